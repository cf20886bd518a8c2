package main

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Each verdict lists the anomaly counters that rose since the probe's
// previous one, by how much: none while they stay at zero or unchanged,
// and a series deleted and created again counts from zero.
func TestBoardListsCountersThatRose(t *testing.T) {
	reg := prometheus.NewRegistry()
	missed := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "watchprobe_events_missed_total"}, []string{"probe", "path", "reason"})
	reg.MustRegister(missed)
	missed.WithLabelValues("p", "watch", "relist")
	silent := func() prometheus.Counter { return missed.WithLabelValues("p", "watch", "silent") }
	b := newBoard(reg, 10, time.Second, slog.New(slog.DiscardHandler))
	r := b.track("p")
	steps := []func(){
		func() {},
		func() { silent().Add(2) },
		func() {},
		func() { missed.DeleteLabelValues("p", "watch", "silent") },
		func() { silent().Inc() },
	}
	for i, step := range steps {
		step()
		r.Verdict(uint64(i+1), true)
		b.flush()
	}
	var got [][]string
	for _, c := range slices.Backward(b.recent("p")) {
		got = append(got, c.Anomalies)
	}
	rose := []string{`events_missed_total{path="watch",reason="silent"} +2`}
	again := []string{`events_missed_total{path="watch",reason="silent"} +1`}
	want := [][]string{nil, rose, nil, nil, again}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("anomalies by cycle: %q, want %q", got, want)
	}
}
