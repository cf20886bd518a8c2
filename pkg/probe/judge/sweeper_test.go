package judge

import (
	"context"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// A shared Sweeper judges the misses of every probe added to it, each
// within a sweep of its deadline, and stops sweeping a probe once removed.
func TestSweeperJudgesEveryProbe(t *testing.T) {
	s := NewSweeper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	defer func() { cancel(); <-done }()

	const deadline = 100 * time.Millisecond
	type probe struct {
		tr     *Tracker
		watch  *metrics.PathSeries
		remove func()
	}
	var probes []probe
	for _, every := range []time.Duration{20 * time.Millisecond, 300 * time.Millisecond} {
		sink := newTestSink(config.DefaultPaths)
		series := sink.series
		tr := New(Settings{Paths: config.DefaultPaths, Deadline: deadline, StallAfter: time.Minute, Retain: config.DefaultRetention(deadline), LostAfter: config.DefaultLostAfter(deadline, config.DefaultRetention(deadline)), Base: time.Now()}, sink)
		for i := range config.DefaultPaths {
			tr.live(i, time.Now().Add(-time.Hour))
		}
		probes = append(probes, probe{tr, series.Paths[metrics.PathWatch], s.Add(tr, every)})
	}
	write := func(p probe, seq uint64) {
		w := p.tr.Expect(p.tr.NewCycle(), WriteKey{"m", seq}, metrics.EventAdded, noTrace, time.Now)
		p.tr.Ack(w, 0, nil, time.Now())
	}
	judged := func(p probe, want float64, within time.Duration) bool {
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if probetest.MissedTotal(p.watch) == want {
				return true
			}
		}
		return false
	}
	for _, p := range probes {
		write(p, 1)
	}
	// Generous: the machine is shared; the sweeps come every 20 ms.
	for i, p := range probes {
		if !judged(p, 1, 3*time.Second) {
			t.Errorf("probe %d: write unseen past its deadline judged missed %g times, want 1", i, probetest.MissedTotal(p.watch))
		}
	}
	probes[0].remove()
	write(probes[0], 2)
	write(probes[1], 2)
	if !judged(probes[1], 2, 3*time.Second) {
		t.Errorf("the probe still added: second write judged missed %g times in all, want 2", probetest.MissedTotal(probes[1].watch))
	}
	time.Sleep(2 * deadline)
	if got := probetest.MissedTotal(probes[0].watch); got != 1 {
		t.Errorf("the removed probe was swept: missed %g, want 1", got)
	}
}
