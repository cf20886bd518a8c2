package main

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/watchprobe/watchprobe/pkg/metrics"
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
	b := newBoard(reg, nil, 10, time.Second, slog.New(slog.DiscardHandler))
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

type countingGatherer struct {
	prometheus.Gatherer
	gathers int
}

func (g *countingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.gathers++
	return g.Gatherer.Gather()
}

// With the probe metrics' fault count, the board reads the counters only
// after a fault counter rose (and once after a probe starts), and still
// lists every fault: a watch ending at its timeout is no fault and costs no
// read.
func TestBoardReadsCountersOnlyAfterAFault(t *testing.T) {
	m := metrics.NewProbe(prometheus.NewRegistry())
	ps := m.ForProbe("p", []string{metrics.PathWatch}).Paths[metrics.PathWatch]
	g := &countingGatherer{Gatherer: m.Anomalies()}
	b := newBoard(g, m.Faults, 10, time.Second, slog.New(slog.DiscardHandler))
	r := b.track("p")
	steps := []struct {
		do      func()
		gathers int
	}{
		{func() {}, 1},
		{func() {}, 1},
		{func() { ps.Missed[metrics.MissedSilent].Add(2) }, 2},
		{func() { ps.Restarts[metrics.EndTimeout].Inc() }, 2},
		{func() {}, 2},
		{func() { ps.Late.Inc(); ps.Restarts[metrics.EndEOF].Inc() }, 3},
		{func() {}, 3},
	}
	for i, step := range steps {
		step.do()
		r.Verdict(uint64(i+1), true)
		b.flush()
		if g.gathers != step.gathers {
			t.Errorf("after verdict %d: %d gathers, want %d", i+1, g.gathers, step.gathers)
		}
	}
	b.flush() // nothing queued: no read
	if g.gathers != 3 {
		t.Errorf("a flush with nothing queued gathered (%d gathers)", g.gathers)
	}
	var got [][]string
	for _, c := range slices.Backward(b.recent("p")) {
		got = append(got, c.Anomalies)
	}
	want := [][]string{nil, nil,
		{`events_missed_total{path="watch",reason="silent"} +2`}, nil, nil,
		{`events_late_total{path="watch"} +1`, `watch_restarts_total{path="watch",reason="eof"} +1`}, nil}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("anomalies by cycle: %q, want %q", got, want)
	}
}
