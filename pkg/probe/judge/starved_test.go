package judge

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// fakeMonitor is a self-monitor the test moves by hand: covered through
// an instant, and starved in given windows. It judges which windows move a
// verdict as pkg/selfhealth does, with a margin of 100 ms: a window within
// it of the send, or of the verdict's instant.
type fakeMonitor struct {
	covered  time.Time
	starved  [][2]time.Time
	watching int
}

const fakeMargin = 100 * time.Millisecond

func (f *fakeMonitor) Covered() time.Time { return f.covered }

// Watch keeps the count the monitor would: the count is shared by every
// probe, so one that goes below zero stops the close ticking that
// another probe's pending writes need.
func (f *fakeMonitor) Watch(delta int) {
	f.watching += delta
	if f.watching < 0 {
		panic(fmt.Sprintf("the monitor's count of pending writes went to %d", f.watching))
	}
}

func (f *fakeMonitor) Starved(sent, at time.Time) bool {
	if !at.Before(f.covered) {
		panic("Starved asked about " + at.String() + ", not covered yet")
	}
	early := sent.Add(fakeMargin)
	if at.Before(early) {
		early = at
	}
	for _, w := range f.starved {
		nearSend := !w[0].After(early) && !w[1].Before(sent)
		nearVerdict := !w[0].After(at) && !w[1].Before(at.Add(-fakeMargin))
		if nearSend || nearVerdict {
			return true
		}
	}
	return false
}

// Resumed is the end of the windows that cover at or end within the margin
// before it, and the margin: the fake's windows are short, so that none
// goes on longer than the delay it causes.
func (f *fakeMonitor) Resumed(at time.Time) time.Time {
	if !at.Before(f.covered) {
		panic("Resumed asked about " + at.String() + ", not covered yet")
	}
	r := at
	for _, w := range f.starved {
		if !w[0].After(at) && !w[1].Before(at.Add(-fakeMargin)) {
			r = maxTime(r, w[1].Add(fakeMargin))
		}
	}
	return r
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// starve adds a starved window from from to to after t0.
func (f *fakeMonitor) starve(from, to time.Duration) {
	f.starved = append(f.starved, [2]time.Time{t0.Add(from), t0.Add(to)})
}

func (f *fakeMonitor) cover(d time.Duration) { f.covered = t0.Add(d) }

// monitored is a test tracker with a self-monitor that has covered
// nothing after t0 yet.
func monitored(t *testing.T) (*Tracker, *metrics.ProbeSeries, *fakeMonitor) {
	t.Helper()
	mon := &fakeMonitor{covered: t0}
	tr, s := newTestTracker(t, func(s *Settings) { s.Monitor = mon })
	return tr, s, mon
}

func unmeasurable(ps *metrics.PathSeries) float64 {
	return testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableStarved))
}

// wantPath checks a path's verdict counts: observed, timed (latency
// samples), missed, late, lost and unmeasurable.
func wantPath(t *testing.T, ps *metrics.PathSeries, path string, observed, missed, late, lost, starved float64) {
	t.Helper()
	var got float64
	var timed uint64
	for _, e := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		got += testutil.ToFloat64(ps.Counter(metrics.EventsObserved, e))
		timed += probetest.Histogram(t, ps.Observer(metrics.EventLatency, e)).GetSampleCount()
	}
	probetest.WantCounts(t, []probetest.Count{
		{path + " observed", got, observed},
		{path + " latency samples", float64(timed), observed},
		{path + " missed", probetest.MissedTotal(ps), missed},
		{path + " late", testutil.ToFloat64(ps.Counter(metrics.EventsLate)), late},
		{path + " lost", probetest.LostTotal(ps), lost},
		{path + " unmeasurable", unmeasurable(ps), starved},
	})
}

// An arrival's verdict waits until the self-monitor has covered its
// instant; then it is timed as ever if the exporter was not starved, and
// unmeasurable if it was: no latency sample, not observed, not missed, and
// its cycle gets no verdict, so probe_success keeps the previous one.
func TestArrivalWaitsForTheMonitor(t *testing.T) {
	tr, s, mon := monitored(t)
	mon.cover(time.Hour) // the previous cycle, judged as ever
	succeeded(t, tr, s)
	mon.cover(0)

	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 2}, metrics.EventAdded)
	tr.observe(informer, metrics.EventAdded, marker("m", 2), t0.Add(2*time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 2), t0.Add(3*time.Millisecond))
	tr.CloseCycle(c)
	inf, wat := s.Paths[metrics.PathInformer], s.Paths[metrics.PathWatch]
	tr.sweep(t0.Add(10 * time.Millisecond))
	wantPath(t, inf, "informer, not covered yet", 1, 0, 0, 0, 0) // the previous cycle's
	if tr.Pending() != 1 {
		t.Errorf("%d writes pending while the monitor has not covered their arrivals, want 1", tr.Pending())
	}
	if mon.watching != 1 {
		t.Errorf("the monitor is told of %d pending writes, want 1", mon.watching)
	}

	mon.starve(2500*time.Microsecond, 2600*time.Microsecond) // the watch path's arrival only
	mon.cover(5 * time.Millisecond)
	tr.sweep(t0.Add(10 * time.Millisecond))
	wantPath(t, inf, "informer", 2, 0, 0, 0, 0)
	wantPath(t, wat, "watch", 1, 0, 0, 0, 1)
	if h := probetest.Histogram(t, inf.Observer(metrics.EventLatency, metrics.EventAdded)); math.Abs(h.GetSampleSum()-0.003) > 1e-9 {
		t.Errorf("informer latency sum %g, want the previous cycle's 1 ms and this one's 2 ms", h.GetSampleSum())
	}
	if tr.Pending() != 0 {
		t.Errorf("%d writes pending once every arrival is judged", tr.Pending())
	}
	if mon.watching != 0 {
		t.Errorf("the monitor is told of %d pending writes once none is", mon.watching)
	}
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
		t.Errorf("probe_success = %g after a cycle with an unmeasurable write, want the previous verdict, 1", got)
	}
	if got := testutil.ToFloat64(s.Counter(metrics.CyclesUnjudged)); got != 1 {
		t.Errorf("cycles unjudged %g, want the one with an unmeasurable write", got)
	}

	// With another path's miss, the cluster's, the cycle fails: the
	// exporter was starved as the watch path's arrival came, not near the
	// send or the informer path's deadline.
	c = tr.NewCycle()
	w := tr.Expect(c, WriteKey{"n", 3}, metrics.EventAdded, noTrace, at(10*time.Second))
	tr.Ack(w, 0, nil, t0.Add(10*time.Second))
	mon.starve(10499*time.Millisecond, 10501*time.Millisecond)
	tr.observe(watchIdx, metrics.EventAdded, marker("n", 3), t0.Add(10500*time.Millisecond))
	tr.CloseCycle(c)
	mon.cover(12 * time.Second)
	tr.sweep(t0.Add(11200 * time.Millisecond))
	wantPath(t, inf, "informer", 2, 1, 0, 0, 0)
	wantPath(t, wat, "watch", 1, 0, 0, 0, 2)
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 0 {
		t.Errorf("probe_success = %g after a cycle missed on the informer path while the exporter ran, want 0", got)
	}
	if got := testutil.ToFloat64(s.Counter(metrics.CyclesUnjudged)); got != 1 {
		t.Errorf("cycles unjudged %g, want 1: the failed cycle has a verdict", got)
	}
	wantMissedAccounted(t, tr, s)
}

// A write undelivered at its deadline while the exporter was starved is
// held, neither missed nor cleared: an arrival while it runs shows it was
// late (missed and late); one while it is starved is unmeasurable; none by
// the lost horizon is missed and lost. missed = late + lost holds
// throughout, and nothing is counted twice.
func TestMissHeldWhileStarved(t *testing.T) {
	tr, s, mon := monitored(t)
	inf, wat := s.Paths[metrics.PathInformer], s.Paths[metrics.PathWatch]
	c := tr.NewCycle()
	for seq := uint64(1); seq <= 4; seq++ {
		answered(tr, c, WriteKey{"m", seq}, eventOf(seq))
		tr.observe(informer, eventOf(seq), marker("m", seq), t0.Add(time.Millisecond))
	}
	tr.CloseCycle(c)
	mon.starve(900*time.Millisecond, 1100*time.Millisecond) // across the deadline, 1 s
	mon.cover(1500 * time.Millisecond)
	tr.sweep(t0.Add(1200 * time.Millisecond))
	wantPath(t, inf, "informer", 4, 0, 0, 0, 0)
	wantPath(t, wat, "watch, held", 0, 0, 0, 0, 0)
	wantMissedAccounted(t, tr, s)
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 0 {
		t.Errorf("probe_success = %g, want its start, 0: no cycle has a verdict", got)
	}

	// m1 arrives at 3 s, while the exporter runs: late.
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Second))
	// m2 arrives at 5 s, while it is starved again: unmeasurable.
	mon.starve(4900*time.Millisecond, 5100*time.Millisecond)
	tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(5*time.Second))
	mon.cover(6 * time.Second)
	tr.sweep(t0.Add(6 * time.Second))
	wantPath(t, wat, "watch", 1, 1, 1, 0, 1)
	if h := probetest.Histogram(t, wat.Observer(metrics.EventLatency, metrics.EventAdded)); h.GetSampleSum() != 3 {
		t.Errorf("watch latency of the late arrival %g, want 3", h.GetSampleSum())
	}
	wantMissedAccounted(t, tr, s)

	// m3 and m4 never arrive; at their horizon, 1 min after the answer,
	// the exporter runs: they are lost, starved at the deadline or not.
	mon.cover(2 * time.Minute)
	tr.sweep(t0.Add(61 * time.Second))
	wantPath(t, wat, "watch, at a horizon the exporter ran through", 1, 3, 1, 2, 1)
	wantMissedAccounted(t, tr, s)

	// A delivery after the verdict changes nothing.
	tr.observe(watchIdx, metrics.EventModified, marker("m", 3), t0.Add(70*time.Second))
	tr.sweep(t0.Add(71 * time.Second))
	wantPath(t, wat, "watch, after a delivery past the horizon", 1, 3, 1, 2, 1)
}

// A write never delivered is lost, however starved the exporter was at
// its deadline and at its horizon: starvation can delay a stamp, never
// take a delivered event away. Here every cycle's start is starved for
// 20 ms (a CPU limit throttling each burst of writes), and the horizon,
// 1 min after the answer, falls on a cycle's start.
func TestLossNeverHiddenByStarvation(t *testing.T) {
	tr, s, mon := monitored(t)
	deliveredOnlyOn(tr, informer, metrics.EventAdded, time.Millisecond)
	for k := range time.Duration(11) {
		mon.starve(k*10*time.Second, k*10*time.Second+20*time.Millisecond)
	}
	mon.starve(990*time.Millisecond, 1010*time.Millisecond) // and the deadline
	mon.cover(2 * time.Minute)
	tr.sweep(t0.Add(2 * time.Second))
	wat := s.Paths[metrics.PathWatch]
	wantPath(t, wat, "watch, held at the deadline", 0, 0, 0, 0, 0)
	tr.sweep(t0.Add(62 * time.Second))
	wantPath(t, wat, "watch, past the horizon", 0, 1, 0, 1, 0)
	wantMissedAccounted(t, tr, s)
}

// Starvation at the horizon delays its verdict until the exporter has run
// again long enough to stamp what was delivered before it: an arrival
// stamped by then is late (missed and late, never lost), one stamped after
// it arrived after the horizon (lost), and a write still undelivered then
// is lost.
func TestStarvationAtTheHorizonDelaysItsVerdict(t *testing.T) {
	tr, s, mon := monitored(t)
	c := tr.NewCycle()
	for seq := uint64(1); seq <= 3; seq++ {
		answered(tr, c, WriteKey{"m", seq}, eventOf(seq))
		tr.observe(informer, eventOf(seq), marker("m", seq), t0.Add(time.Millisecond))
	}
	tr.CloseCycle(c)
	mon.starve(900*time.Millisecond, 1100*time.Millisecond) // the deadline: all three held
	mon.starve(59*time.Second, 61*time.Second)              // the horizon, 60 s
	mon.cover(1500 * time.Millisecond)
	tr.sweep(t0.Add(1200 * time.Millisecond))
	wat := s.Paths[metrics.PathWatch]
	wantPath(t, wat, "watch, held", 0, 0, 0, 0, 0)

	// The horizon passed while starved: no verdict yet.
	mon.cover(60500 * time.Millisecond)
	tr.sweep(t0.Add(60500 * time.Millisecond))
	wantPath(t, wat, "watch, starved at the horizon", 0, 0, 0, 0, 0)

	// m1 stamped at 60.8 s, in the starved stretch: it may have been
	// delivered before the horizon. m2 stamped at 70 s, after the stretch
	// and its margin: delivered after the horizon. m3 never.
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(60800*time.Millisecond))
	tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(70*time.Second))
	mon.cover(71 * time.Second)
	tr.sweep(t0.Add(71 * time.Second))
	wantPath(t, wat, "watch", 1, 3, 1, 2, 0)
	if h := probetest.Histogram(t, wat.Observer(metrics.EventLatency, metrics.EventAdded)); h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-60.8) > 1e-9 {
		t.Errorf("watch latency samples %d, sum %g: want m1's, 60.8 s", h.GetSampleCount(), h.GetSampleSum())
	}
	wantMissedAccounted(t, tr, s)
}

// A miss counted while the exporter ran stands: its arrival while the
// exporter is starved is late all the same, so that missed = late + lost.
func TestMissStandsWhenStarvedLater(t *testing.T) {
	tr, s, mon := monitored(t)
	deliveredOnlyOn(tr, informer, metrics.EventAdded, time.Millisecond)
	mon.cover(1500 * time.Millisecond)
	tr.sweep(t0.Add(1200 * time.Millisecond))
	wat := s.Paths[metrics.PathWatch]
	wantPath(t, wat, "watch at the deadline", 0, 1, 0, 0, 0)
	mon.starve(2900*time.Millisecond, 3100*time.Millisecond)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Second)) // not covered: judged as ever
	wantPath(t, wat, "watch", 1, 1, 1, 0, 0)
	wantMissedAccounted(t, tr, s)
}

// The apiserver's share pairs no arrival the exporter could not time: an
// unmeasurable arrival on either side leaves the write out.
func TestAPIServerLagSkipsUnmeasurable(t *testing.T) {
	paths := []string{metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd}
	sink := newTestSink(paths)
	rec := &lagsByWrite{}
	mon := &fakeMonitor{covered: t0}
	settings := testSettings(paths)
	settings.Monitor = mon
	tr := New(settings, sink, rec)
	for i := range paths {
		tr.live(i, t0.Add(-time.Hour))
	}
	const etcdIdx = 2
	c := tr.NewCycle()
	for seq := uint64(1); seq <= 2; seq++ {
		answered(tr, c, WriteKey{"m", seq}, eventOf(seq))
		at := time.Duration(seq) * 100 * time.Millisecond
		tr.observe(etcdIdx, eventOf(seq), marker("m", seq), t0.Add(at+time.Millisecond))
		tr.observe(watchIdx, eventOf(seq), marker("m", seq), t0.Add(at+2*time.Millisecond))
		tr.observe(informer, eventOf(seq), marker("m", seq), t0.Add(at+400*time.Millisecond))
	}
	tr.CloseCycle(c)
	mon.starve(201500*time.Microsecond, 201600*time.Microsecond) // m2's watch arrival alone
	mon.cover(time.Second)
	tr.sweep(t0.Add(500 * time.Millisecond))
	if got := rec.lags[metrics.PathWatch]; len(got) != 1 || got[WriteKey{"m", 1}] != time.Millisecond {
		t.Errorf("watch lags by write %v, want m1's 1 ms only", got)
	}
	if got := rec.lags[metrics.PathInformer]; len(got) != 2 {
		t.Errorf("informer lags by write %v, want both writes'", got)
	}
	wantPath(t, sink.series.Paths[metrics.PathWatch], "watch", 1, 0, 0, 0, 1)
}

// A path removed while a miss is held, or an arrival waits for the
// monitor, concludes them unmeasurable: its slot may go to another path,
// and its counts must add up for as long as its series stay.
func TestRemovedPathConcludesHeldVerdicts(t *testing.T) {
	tr, s, mon := monitored(t)
	slot, ps := addTestPath(tr, "10.0.0.1:6443", t0.Add(-time.Minute))
	tr.live(slot, t0.Add(-time.Minute))
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
	answered(tr, c, WriteKey{"m", 2}, metrics.EventModified)
	for _, i := range []int{informer, watchIdx} {
		tr.observe(i, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
		tr.observe(i, metrics.EventModified, marker("m", 2), t0.Add(time.Millisecond))
	}
	tr.observe(slot, metrics.EventModified, marker("m", 2), t0.Add(2*time.Second))
	tr.CloseCycle(c)
	mon.starve(990*time.Millisecond, 1010*time.Millisecond)
	mon.cover(1500 * time.Millisecond)
	tr.sweep(t0.Add(1200 * time.Millisecond)) // m1 held on the pinned path; m2's arrival waits
	tr.RemovePath(slot, t0.Add(3*time.Second))
	wantPath(t, ps, "removed path", 0, 0, 0, 0, 2)
	wantMissedAccounted(t, tr, s)
}

// missingOnPinned adds a path pinned to an apiserver, live since a minute
// before t0, and a cycle of one write, m1, that the configured paths
// deliver 1 ms after t0 and the pinned path not: what becomes of m1 there
// is the test's.
func missingOnPinned(tr *Tracker) (slot int, ps *metrics.PathSeries) {
	slot, ps = addTestPath(tr, "10.0.0.1:6443", t0.Add(-time.Minute))
	tr.live(slot, t0.Add(-time.Minute))
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
	for _, i := range []int{informer, watchIdx} {
		tr.observe(i, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	}
	tr.CloseCycle(c)
	return slot, ps
}

// A held miss counted missed and lost at its horizon is concluded: the
// path's removal before the write is forgotten counts it nothing more,
// one verdict per write and path.
func TestRemovedPathKeepsALossCounted(t *testing.T) {
	tr, s, mon := monitored(t)
	slot, ps := missingOnPinned(tr)
	mon.starve(990*time.Millisecond, 1010*time.Millisecond)
	mon.cover(2 * time.Minute)
	tr.sweep(t0.Add(1200 * time.Millisecond))
	wantPath(t, ps, "pinned path, held", 0, 0, 0, 0, 0)
	tr.sweep(t0.Add(61 * time.Second))
	wantPath(t, ps, "pinned path at the horizon", 0, 1, 0, 1, 0)
	tr.RemovePath(slot, t0.Add(90*time.Second))
	wantPath(t, ps, "pinned path after its removal", 0, 1, 0, 1, 0)
	wantMissedAccounted(t, tr, s)
}

// A write that settles after its tracker was closed (a sweep under way as
// the probe stops) takes nothing more back from the monitor's count of
// pending writes, which Close already gave back: the count, shared by every
// probe, never goes below zero.
func TestSettleAfterCloseKeepsTheMonitorCount(t *testing.T) {
	tr, _, mon := monitored(t)
	deliveredOnlyOn(tr, informer, metrics.EventAdded, time.Millisecond)
	if mon.watching != 1 {
		t.Fatalf("the monitor is told of %d pending writes, want 1", mon.watching)
	}
	tr.Close()
	mon.cover(2 * time.Second)
	tr.sweep(t0.Add(1500 * time.Millisecond))
	if tr.Pending() != 0 || mon.watching != 0 {
		t.Errorf("after Close and a sweep: %d writes pending, the monitor told of %d; want 0 and 0", tr.Pending(), mon.watching)
	}
}

// A write missed while the exporter ran, whose arrival after its horizon
// waits for the monitor when its path is removed, is lost as unavailable
// there, not unmeasurable: its miss is counted, and missed = late + lost
// must hold.
func TestRemovedPathLosesAMissWaitingPastItsHorizon(t *testing.T) {
	tr, s, mon := monitored(t)
	slot, ps := missingOnPinned(tr)
	mon.cover(2 * time.Second)
	tr.sweep(t0.Add(1500 * time.Millisecond))
	wantPath(t, ps, "pinned path at the deadline", 0, 1, 0, 0, 0)
	tr.observe(slot, metrics.EventAdded, marker("m", 1), t0.Add(61*time.Second)) // past the horizon, not covered
	tr.RemovePath(slot, t0.Add(62*time.Second))
	wantPath(t, ps, "removed path", 0, 1, 0, 1, 0)
	wantMissedAccounted(t, tr, s)
}

// A write starved at its deadline is held on the path that has not
// delivered it, and its arrival is judged with Monitor.Starved at its
// instant: the monitor is told to tick closely until that verdict is
// given, not only until the write settles. Its count goes back to zero
// once the held verdict is concluded, and never below.
func TestHeldMissKeepsTheMonitorClose(t *testing.T) {
	tr, s, mon := monitored(t)
	ms := time.Millisecond
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Ack(w, 0, nil, t0.Add(5*ms))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(10*ms))
	tr.CloseCycle(c)
	mon.starve(900*ms, 1100*ms) // starved around the deadline (t0+1s)
	mon.cover(1200 * ms)
	tr.sweep(t0.Add(1200 * ms))
	if mon.watching != 1 {
		t.Errorf("the monitor is told of %d pending verdicts while the watch path's miss is held, want 1", mon.watching)
	}
	mon.cover(3 * time.Second)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(2500*ms))
	tr.sweep(t0.Add(3 * time.Second))
	wantPath(t, s.Paths[metrics.PathWatch], "watch", 1, 1, 1, 0, 0)
	if mon.watching != 0 {
		t.Errorf("the monitor is told of %d pending verdicts once the held one is concluded, want 0", mon.watching)
	}
	tr.Close()
	tr.sweep(t0.Add(4 * time.Second))
	if mon.watching != 0 {
		t.Errorf("the monitor is told of %d pending verdicts after Close, want 0", mon.watching)
	}
}

// A write missed on a path (the exporter not starved at its deadline) is
// lost at its horizon unless delivered before it: whether an event
// stamped after the horizon was delivered before it is Monitor.Resumed's
// to say, so the monitor ticks closely from shortly before the horizon
// until that verdict is given; and a held miss's the same, until its
// horizon concludes it. Close gives back what is held, and a sweep after
// it takes nothing more.
func TestLostHorizonKeepsTheMonitorClose(t *testing.T) {
	tr, s, mon := monitored(t)
	deliveredOnlyOn(tr, informer, metrics.EventAdded, time.Millisecond)
	mon.cover(2 * time.Second)
	tr.sweep(t0.Add(1500 * time.Millisecond))
	wantPath(t, s.Paths[metrics.PathWatch], "watch at the deadline", 0, 1, 0, 0, 0)
	if mon.watching != 0 {
		t.Fatalf("the monitor is told of %d pending verdicts long before the horizon, want 0", mon.watching)
	}
	horizon := tr.judge.horizon()
	mon.cover(horizon - time.Second)
	tr.sweep(t0.Add(horizon - time.Second)) // within horizonLead of it
	if mon.watching != 1 {
		t.Errorf("the monitor is told of %d pending verdicts a second before the horizon, want 1", mon.watching)
	}
	tr.sweep(t0.Add(horizon + 10*time.Millisecond)) // not covered yet: the verdict waits
	if mon.watching != 1 {
		t.Errorf("the monitor is told of %d pending verdicts while the horizon's verdict waits for it, want 1", mon.watching)
	}
	mon.cover(horizon + time.Second)
	tr.sweep(t0.Add(horizon + time.Second))
	wantPath(t, s.Paths[metrics.PathWatch], "watch past the horizon", 0, 1, 0, 1, 0)
	if mon.watching != 0 {
		t.Errorf("the monitor is told of %d pending verdicts once the horizon's is given, want 0", mon.watching)
	}
	// Again, closed while the monitor ticks closely for the horizon.
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(time.Hour))
	tr.Ack(w, 0, nil, t0.Add(time.Hour))
	tr.observe(informer, metrics.EventModified, marker("m", 2), t0.Add(time.Hour+time.Millisecond))
	tr.CloseCycle(c)
	mon.cover(time.Hour + horizon)
	tr.sweep(t0.Add(time.Hour + 2*time.Second))
	tr.sweep(t0.Add(time.Hour + horizon - time.Second))
	if mon.watching != 1 {
		t.Errorf("the monitor is told of %d pending verdicts a second before the second write's horizon, want 1", mon.watching)
	}
	tr.Close()
	tr.sweep(t0.Add(time.Hour + horizon - 500*time.Millisecond))
	if mon.watching != 0 {
		t.Errorf("the monitor is told of %d pending verdicts after Close, want 0", mon.watching)
	}
}

// A held miss on a path pinned to an apiserver that goes away is
// concluded with the path, and the monitor's close ticking for it ends at
// the next sweep.
func TestRemovedPathEndsTheMonitorsCloseTicking(t *testing.T) {
	tr, _, mon := monitored(t)
	slot, ps := missingOnPinned(tr)
	mon.starve(990*time.Millisecond, 1010*time.Millisecond)
	mon.cover(1500 * time.Millisecond)
	tr.sweep(t0.Add(1200 * time.Millisecond))
	if mon.watching != 1 {
		t.Fatalf("the monitor is told of %d pending verdicts with the pinned path's miss held, want 1", mon.watching)
	}
	tr.RemovePath(slot, t0.Add(2*time.Second))
	tr.sweep(t0.Add(2 * time.Second))
	wantPath(t, ps, "removed path", 0, 0, 0, 0, 1)
	if mon.watching != 0 {
		t.Errorf("the monitor is told of %d pending verdicts once the path is removed, want 0", mon.watching)
	}
}
