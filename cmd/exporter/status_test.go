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

// A read for one probe's verdict reads every probe's counters: another
// probe's fault it saw must still show on that probe's next verdict, even
// when no fault rose in between (found by review: it vanished).
func TestBoardKeepsAFaultReadForAnotherProbe(t *testing.T) {
	m := metrics.NewProbe(prometheus.NewRegistry())
	a := m.ForProbe("a", []string{metrics.PathWatch}).Paths[metrics.PathWatch]
	m.ForProbe("b", []string{metrics.PathWatch})
	b := newBoard(m.Anomalies(), m.Faults, 10, time.Second, slog.New(slog.DiscardHandler))
	ra, rb := b.track("a"), b.track("b")
	ra.Verdict(1, true)
	rb.Verdict(1, true)
	b.flush()
	a.Restarts[metrics.EndEOF].Inc() // a's watch ends during its cycle 2
	rb.Verdict(2, true)              // b's verdict reads the counters
	b.flush()
	ra.Verdict(2, true) // no fault since that read
	b.flush()
	want := []string{`watch_restarts_total{path="watch",reason="eof"} +1`}
	if got := b.recent("a")[0].Anomalies; !slices.Equal(got, want) {
		t.Errorf("a's cycle 2: %q, want %q", got, want)
	}
}

// Series deleted and created again count from zero: an apiserver's path
// retired after its grace and back at the same address must show its new
// faults at once (found by review: hidden until its counters passed their
// old values).
func TestBoardSeesFaultsOfASeriesCreatedAgain(t *testing.T) {
	m := metrics.NewProbe(prometheus.NewRegistry())
	m.ForProbe("a", []string{metrics.PathWatch})
	x := m.ForPath("a", metrics.PathWatch, "10.0.0.1", false)
	b := newBoard(m.Anomalies(), m.Faults, 10, time.Second, slog.New(slog.DiscardHandler))
	r := b.track("a")
	x.Restarts[metrics.EndEOF].Add(3)
	r.Verdict(1, true)
	b.flush()
	m.DeletePath("a", metrics.PathWatch, "10.0.0.1")
	r.Verdict(2, true)
	b.flush()
	x = m.ForPath("a", metrics.PathWatch, "10.0.0.1", false)
	r.Verdict(3, true)
	b.flush()
	x.Restarts[metrics.EndEOF].Inc()
	r.Verdict(4, true)
	b.flush()
	want := []string{`watch_restarts_total{apiserver="10.0.0.1",path="watch",reason="eof"} +1`}
	if got := b.recent("a")[0].Anomalies; !slices.Equal(got, want) {
		t.Errorf("cycle 4: %q, want %q", got, want)
	}
}
