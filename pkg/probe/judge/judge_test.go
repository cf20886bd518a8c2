package judge

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// answered is write key of event, sent at t0 in cycle c and answered at
// once, successfully.
func answered(tr *Tracker, c *Cycle, key WriteKey, event string) {
	tr.Ack(tr.Expect(c, key, event, noTrace, at(0)), 0, nil, t0)
}

// deliveredOnlyOn sends write m 1 of event, answered at t0 in a cycle of
// its own, and has path i alone deliver it, after after: the first sweep
// past the deadline counts it missed on the other path.
func deliveredOnlyOn(tr *Tracker, i int, event string, after time.Duration) {
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, event)
	tr.observe(i, event, marker("m", 1), t0.Add(after))
	tr.CloseCycle(c)
}

// succeeded runs a cycle delivered in time on every path, so that a
// probe_success of 0 after it is a verdict, not the gauge's start.
func succeeded(t *testing.T, tr *Tracker, s *metrics.ProbeSeries) {
	t.Helper()
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"g", 1}, metrics.EventAdded)
	for i := range config.DefaultPaths {
		tr.observe(i, metrics.EventAdded, marker("g", 1), t0.Add(time.Millisecond))
	}
	tr.CloseCycle(c)
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
		t.Fatalf("probe_success = %g after a cycle delivered in time on every path, want 1", got)
	}
}

// An event that beats the write's response still gets its true, positive
// latency, and the write settles as soon as the response arrives.
func TestEventBeforeResponse(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
	tr.Ack(w, 0, nil, t0)
	tr.CloseCycle(c)

	h := probetest.Histogram(t, s.Paths[metrics.PathInformer].Observer(metrics.EventLatency, metrics.EventAdded))
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.003 {
		t.Errorf("informer latency: count %d sum %g, want 1 and 0.003", h.GetSampleCount(), h.GetSampleSum())
	}
	if tr.Pending() != 0 {
		t.Errorf("%d writes pending after every path saw the write and it was acknowledged", tr.Pending())
	}
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
		t.Errorf("probe_success = %g, want 1", got)
	}
}

// A write one path never delivers is missed on that path only, once, and the
// cycle fails; arriving later, it is recorded but the miss stands.
func TestMissedOnOnePath(t *testing.T) {
	tr, s := newTestTracker(t)
	succeeded(t, tr, s)
	deliveredOnlyOn(tr, watchIdx, metrics.EventModified, time.Millisecond)

	tr.sweep(t0.Add(500 * time.Millisecond))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsMissed, metrics.MissedSilent)); got != 0 {
		t.Fatalf("missed before the deadline: %g", got)
	}
	tr.sweep(t0.Add(1500 * time.Millisecond))
	tr.sweep(t0.Add(2500 * time.Millisecond))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsMissed, metrics.MissedSilent)); got != 1 {
		t.Errorf("informer missed = %g, want 1", got)
	}
	if got := probetest.MissedTotal(s.Paths[metrics.PathWatch]); got != 0 {
		t.Errorf("watch missed = %g, want 0", got)
	}
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 0 {
		t.Errorf("probe_success = %g, want 0", got)
	}

	tr.observe(informer, metrics.EventModified, marker("m", 1), t0.Add(4*time.Second))
	h := probetest.Histogram(t, s.Paths[metrics.PathInformer].Observer(metrics.EventLatency, metrics.EventModified))
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 4 {
		t.Errorf("late arrival: count %d sum %g, want 1 and 4", h.GetSampleCount(), h.GetSampleSum())
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsMissed, metrics.MissedSilent)); got != 1 {
		t.Errorf("a late arrival changed the missed count to %g", got)
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsLate)); got != 1 {
		t.Errorf("late = %g, want 1", got)
	}
}

// A second delivery of the same write is not a second observation: with no
// relist in between it is a duplicate, after a relist a replay.
func TestRepeatedDelivery(t *testing.T) {
	tr, s := newTestTracker(t)
	answered(tr, tr.NewCycle(), WriteKey{"m", 7}, metrics.EventAdded)
	for range 3 {
		tr.observe(informer, metrics.EventAdded, marker("m", 7), t0.Add(time.Millisecond))
	}
	ps := s.Paths[metrics.PathInformer]
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventAdded)); got != 1 {
		t.Errorf("observed = %g, want 1", got)
	}
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsDuplicate)); got != 2 {
		t.Errorf("duplicates = %g, want 2", got)
	}
	tr.relisted(informer, metrics.RelistExpired, metrics.ModeList, t0.Add(2*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 7), t0.Add(3*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 7), t0.Add(4*time.Millisecond))
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsReplayed)); got != 1 {
		t.Errorf("replays = %g, want 1 (the first delivery after the relist)", got)
	}
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsDuplicate)); got != 3 {
		t.Errorf("duplicates = %g, want 3 (a second delivery within the new epoch)", got)
	}
}

// A write delivered after a later write of the same writer is out of order,
// once; a relist resets the order it is judged against.
func TestOutOfOrder(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	for seq := uint64(1); seq <= 3; seq++ {
		answered(tr, c, WriteKey{"m", seq}, metrics.EventModified)
	}
	for _, seq := range []uint64{1, 3, 2} {
		tr.observe(watchIdx, metrics.EventModified, marker("m", seq), t0.Add(time.Millisecond))
	}
	ps := s.Paths[metrics.PathWatch]
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsOutOfOrder)); got != 1 {
		t.Errorf("out of order = %g, want 1", got)
	}
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventModified)); got != 3 {
		t.Errorf("observed = %g, want 3", got)
	}
	answered(tr, c, WriteKey{"n", 4}, metrics.EventAdded)
	tr.relisted(watchIdx, metrics.RelistExpired, metrics.ModeList, t0)
	tr.observe(watchIdx, metrics.EventAdded, marker("n", 4), t0.Add(time.Millisecond))
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsOutOfOrder)); got != 1 {
		t.Errorf("out of order after a relist = %g, want still 1", got)
	}
}

// An event that arrives after its deadline is late and its write missed,
// whenever the sweep runs: here before any sweep at all.
func TestLateJudgedOnArrival(t *testing.T) {
	tr, s := newTestTracker(t)
	succeeded(t, tr, s)
	// The late event arrives while its cycle is still open: a slow cycle
	// must fail as surely as one already closed.
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(1200*time.Millisecond)) // deadline 1 s
	tr.CloseCycle(c)
	ps := s.Paths[metrics.PathInformer]
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsLate)); got != 1 {
		t.Errorf("late = %g, want 1", got)
	}
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedSilent)); got != 1 {
		t.Errorf("missed = %g, want 1", got)
	}
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 0 {
		t.Errorf("probe_success = %g, want 0: an event arrived after its deadline", got)
	}
	// The sweep, when it comes, does not count it again.
	tr.sweep(t0.Add(3 * time.Second))
	if got := probetest.MissedTotal(ps); got != 1 {
		t.Errorf("missed after the sweep = %g, want still 1", got)
	}
	// So does an event that arrived late before the response came.
	c = tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(10*time.Second))
	for i := range config.DefaultPaths {
		tr.observe(i, metrics.EventModified, marker("m", 2), t0.Add(12*time.Second))
	}
	tr.Ack(w, 0, nil, t0.Add(13*time.Second))
	for _, path := range config.DefaultPaths {
		if got := testutil.ToFloat64(s.Paths[path].Counter(metrics.EventsLate)); got < 1 {
			t.Errorf("%s: the event that beat its late response was not judged late", path)
		}
	}
}

// The events of a write the exporter saw fail are counted apart: no latency,
// no observation, no ordering verdict, whether they arrive before the
// failure is known (a create committed although its response was lost) or
// after it (a failed delete retried later).
func TestEventsOfFailedWrites(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"a", 2}, metrics.EventAdded)
	create := tr.Expect(c, WriteKey{"b", 1}, metrics.EventAdded, noTrace, at(0))
	del := tr.Expect(c, WriteKey{"c", 3}, metrics.EventDeleted, noTrace, at(0))
	for i := range config.DefaultPaths {
		tr.observe(i, metrics.EventAdded, marker("a", 2), t0.Add(time.Millisecond))
		tr.observe(i, metrics.EventAdded, marker("b", 1), t0.Add(2*time.Millisecond)) // after seq 2
	}
	tr.Ack(create, 0, errors.New("context deadline exceeded"), t0.Add(30*time.Second))
	tr.Ack(del, 0, errors.New("forbidden"), t0.Add(30*time.Second))
	for i := range config.DefaultPaths {
		tr.observe(i, metrics.EventDeleted, marker("c", 1), t0.Add(40*time.Second))
	}
	tr.CloseCycle(c)
	for _, path := range config.DefaultPaths {
		ps := s.Paths[path]
		if got := testutil.ToFloat64(ps.Counter(metrics.EventsAfterFailedWrite)); got != 2 {
			t.Errorf("%s: events after failed writes = %g, want 2", path, got)
		}
		if got := testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventAdded)); got != 1 {
			t.Errorf("%s: observed added = %g, want 1 (the successful write)", path, got)
		}
		if got := testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)); got != 0 {
			t.Errorf("%s: observed deleted = %g, want 0", path, got)
		}
		for _, event := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
			o := ps.Observer(metrics.EventLatency, event)
			want := uint64(0)
			if event == metrics.EventAdded {
				want = 1
			}
			if got := probetest.Histogram(t, o).GetSampleCount(); got != want {
				t.Errorf("%s: %s latency samples = %d, want %d", path, event, got, want)
			}
		}
		if got := testutil.ToFloat64(ps.Counter(metrics.EventsOutOfOrder)); got != 0 {
			t.Errorf("%s: out of order = %g, want 0", path, got)
		}
	}
}

// A cycle cut short by the exporter's own shutdown is not judged: it says
// nothing about the cluster, so probe_success keeps the verdict of the last
// judged cycle, whether that was a success or a failure.
func TestShutdownNotJudged(t *testing.T) {
	for _, lastOK := range []bool{true, false} {
		tr, s := newTestTracker(t)
		c := tr.NewCycle()
		w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
		if lastOK {
			tr.Ack(w, 0, nil, t0)
			for i := range config.DefaultPaths {
				tr.observe(i, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
			}
		} else {
			tr.Ack(w, 0, errors.New("forbidden"), t0)
		}
		tr.CloseCycle(c)
		want := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess))
		if want != map[bool]float64{true: 1, false: 0}[lastOK] {
			t.Fatalf("probe_success = %g after a cycle that succeeded: %v", want, lastOK)
		}
		c = tr.NewCycle()
		tr.Abandon(tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(time.Second)))
		tr.CloseCycle(c)
		if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != want {
			t.Errorf("probe_success = %g after a cycle cut by shutdown, want %g from the last judged cycle", got, want)
		}
	}
}

// A write whose response comes after the sweep passed its deadline, even
// one stamped before the deadline (it was read before the tracker's lock
// was taken), is judged by the next sweep: the sweep waits for its answer.
func TestAckAfterSweepPassedIt(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.sweep(t0.Add(1200 * time.Millisecond))
	tr.Ack(w, 0, nil, t0.Add(999*time.Millisecond))
	tr.CloseCycle(c)
	for _, path := range config.DefaultPaths {
		if got := probetest.MissedTotal(s.Paths[path]); got != 0 {
			t.Errorf("%s missed = %g at the answer, want 0: the sweep judges it", path, got)
		}
	}
	tr.sweep(t0.Add(1300 * time.Millisecond))
	for _, path := range config.DefaultPaths {
		if got := probetest.MissedTotal(s.Paths[path]); got != 1 {
			t.Errorf("%s missed = %g, want 1", path, got)
		}
	}
	if tr.Pending() != 0 {
		t.Errorf("%d writes left unjudged", tr.Pending())
	}
}

// A write the apiserver refused (4xx) was never committed: a later event
// for the same marker (the cleaner deleting it) is not this write's.
func TestRefusedWriteForgotten(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 3}, metrics.EventDeleted, noTrace, at(0))
	tr.Ack(w, 0, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "m", errors.New("no")), t0)
	if tr.observe(watchIdx, metrics.EventDeleted, marker("m", 2), t0.Add(time.Minute)) {
		t.Error("the cleaner's delete was matched to the refused delete")
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Counter(metrics.EventsAfterFailedWrite)); got != 0 {
		t.Errorf("events after failed writes = %g, want 0", got)
	}
}

// A failed write is never counted as missed: nothing was written to miss.
// It fails the cycle.
func TestFailedWriteFailsCycleWithoutMisses(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Ack(w, 0, errors.New("connection refused"), t0)
	tr.CloseCycle(c)
	tr.sweep(t0.Add(time.Hour))
	for _, path := range config.DefaultPaths {
		if got := probetest.MissedTotal(s.Paths[path]); got != 0 {
			t.Errorf("%s missed = %g, want 0", path, got)
		}
	}
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 0 {
		t.Errorf("probe_success = %g, want 0", got)
	}
}

// probe_success shows the newest settled cycle: an older cycle whose miss
// settles after a newer clean one does not overwrite it.
func TestSuccessFollowsNewestCycle(t *testing.T) {
	tr, s := newTestTracker(t)
	old := tr.NewCycle()
	answered(tr, old, WriteKey{"a", 1}, metrics.EventAdded)
	tr.CloseCycle(old)
	fresh := tr.NewCycle()
	w := tr.Expect(fresh, WriteKey{"b", 2}, metrics.EventAdded, noTrace, at(500*time.Millisecond))
	tr.Ack(w, 0, nil, t0)
	for i := range config.DefaultPaths {
		tr.observe(i, metrics.EventAdded, marker("b", 2), t0.Add(501*time.Millisecond))
	}
	tr.CloseCycle(fresh)
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
		t.Fatalf("probe_success = %g after the newest cycle succeeded", got)
	}
	tr.sweep(t0.Add(1200 * time.Millisecond)) // the old cycle's write is missed now
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
		t.Errorf("probe_success = %g: the older cycle's failure overwrote the newer success", got)
	}
	if got := probetest.MissedTotal(s.Paths[metrics.PathInformer]); got != 1 {
		t.Errorf("the older cycle's miss was not counted: %g", got)
	}
}

// The apiserver's share is an apiserver path's arrival minus the etcd
// path's, once per write and path, whichever arrives first and whether the
// response came before or after, and a late arrival's too.
// lagsByWrite records each APIServerLag outcome's latency by path and write.
type lagsByWrite struct {
	lags map[string]map[WriteKey]time.Duration
}

func (r *lagsByWrite) Outcome(o Outcome) {
	if o.Kind != APIServerLag {
		return
	}
	if r.lags == nil {
		r.lags = map[string]map[WriteKey]time.Duration{}
	}
	if r.lags[o.Path.Name] == nil {
		r.lags[o.Path.Name] = map[WriteKey]time.Duration{}
	}
	r.lags[o.Path.Name][WriteKey{o.Marker, o.Seq}] = o.Latency
}

func TestAPIServerLag(t *testing.T) {
	rec := &lagsByWrite{}
	tr, sink := newEtcdTracker(rec)
	s := sink.series
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Millisecond))
	tr.observe(etcdIdx, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
	tr.Ack(w, 0, nil, t0.Add(4*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(1500*time.Millisecond)) // late
	w = tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(10*time.Millisecond))
	tr.Ack(w, 0, nil, t0.Add(11*time.Millisecond))
	tr.observe(informer, metrics.EventModified, marker("m", 2), t0.Add(15*time.Millisecond))
	tr.observe(etcdIdx, metrics.EventModified, marker("m", 2), t0.Add(12*time.Millisecond))
	for path, want := range map[string]struct {
		n   uint64
		sum float64
	}{metrics.PathWatch: {1, 0.001}, metrics.PathInformer: {2, 1.501}} {
		h := probetest.Histogram(t, s.Paths[path].Observer(metrics.APIServerLag))
		if h.GetSampleCount() != want.n || math.Abs(h.GetSampleSum()-want.sum) > 1e-9 {
			t.Errorf("%s: lag count %d sum %g, want %d and %g", path, h.GetSampleCount(), h.GetSampleSum(), want.n, want.sum)
		}
	}
	if s.Paths[metrics.PathEtcd].Has(metrics.APIServerLag) {
		t.Error("the etcd path has an apiserver lag of its own")
	}
	// Each lag names its write.
	for path, want := range map[string]map[WriteKey]time.Duration{
		metrics.PathWatch:    {{"m", 1}: time.Millisecond},
		metrics.PathInformer: {{"m", 1}: 1498 * time.Millisecond, {"m", 2}: 3 * time.Millisecond},
	} {
		if got := rec.lags[path]; !maps.Equal(got, want) {
			t.Errorf("%s: lags by write %v, want %v", path, got, want)
		}
	}
}

// An event delivered after its deadline on a stream that stayed up is
// missed and late, never lost: a slow second of etcd is not a data loss.
// One never delivered is counted lost, once, when the horizon passes; a
// delivery after that is neither late nor observed.
func TestLateIsNotLost(t *testing.T) {
	tr, s := newTestTracker(t) // deadline 1s, lost after 1m
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)    // held: the watch path delivers it 9 s late
	answered(tr, c, WriteKey{"m", 2}, metrics.EventModified) // dropped: the watch path never does
	tr.CloseCycle(c)
	for _, seq := range []uint64{1, 2} {
		tr.observe(informer, eventOf(seq), marker("m", seq), t0.Add(5*time.Millisecond))
	}
	tr.sweep(t0.Add(2 * time.Second)) // both missed on the watch path
	wat := s.Paths[metrics.PathWatch]
	probetest.WantCounts(t, []probetest.Count{
		{"watch missed silently", testutil.ToFloat64(wat.Counter(metrics.EventsMissed, metrics.MissedSilent)), 2},
		{"watch lost", probetest.LostTotal(wat), 0},
	})
	wantMissedAccounted(t, tr, s)

	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(9*time.Second)) // held 9 s
	tr.sweep(t0.Add(59 * time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"watch late", testutil.ToFloat64(wat.Counter(metrics.EventsLate)), 1},
		{"watch lost before the horizon", probetest.LostTotal(wat), 0},
	})
	wantMissedAccounted(t, tr, s)

	tr.sweep(t0.Add(61 * time.Second))
	tr.sweep(t0.Add(62 * time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"watch lost silently", testutil.ToFloat64(wat.Counter(metrics.EventsLost, metrics.MissedSilent)), 1},
		{"watch lost", probetest.LostTotal(wat), 1},
		{"watch late", testutil.ToFloat64(wat.Counter(metrics.EventsLate)), 1},
		{"informer lost", probetest.LostTotal(s.Paths[metrics.PathInformer]), 0},
	})
	wantMissedAccounted(t, tr, s)

	observed := testutil.ToFloat64(wat.Counter(metrics.EventsObserved, metrics.EventModified))
	if !tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(90*time.Second)) {
		t.Fatal("a delivery after the horizon, within the retention, was not matched")
	}
	probetest.WantCounts(t, []probetest.Count{
		{"watch late after lost", testutil.ToFloat64(wat.Counter(metrics.EventsLate)), 1},
		{"watch lost after the delivery", probetest.LostTotal(wat), 1},
		{"watch observed modified", testutil.ToFloat64(wat.Counter(metrics.EventsObserved, metrics.EventModified)), observed},
	})
	wantMissedAccounted(t, tr, s)
}

// A delivery past the horizon that comes before the sweep has judged the
// write is lost all the same: the verdict does not depend on when the
// sweep runs.
func TestArrivalPastHorizonBeforeSweepIsLost(t *testing.T) {
	tr, s := newTestTracker(t)
	deliveredOnlyOn(tr, informer, metrics.EventAdded, 5*time.Millisecond)
	tr.sweep(t0.Add(2 * time.Second))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(65*time.Second))
	tr.sweep(t0.Add(66 * time.Second))
	wat := s.Paths[metrics.PathWatch]
	probetest.WantCounts(t, []probetest.Count{
		{"watch lost", probetest.LostTotal(wat), 1},
		{"watch late", testutil.ToFloat64(wat.Counter(metrics.EventsLate)), 0},
		{"watch observed", testutil.ToFloat64(wat.Counter(metrics.EventsObserved, metrics.EventAdded)), 0},
		{"watch missed", probetest.MissedTotal(wat), 1},
	})
	wantMissedAccounted(t, tr, s)

	// The horizon counts from the write's answer, by which it was
	// committed: an event that arrives before a slow answer (a webhook
	// holding the write for longer than lost_after) was delivered, late
	// at worst; one that comes lost_after after a slow answer is lost.
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"n", 2}, metrics.EventAdded, noTrace, at(100*time.Second))
	tr.observe(informer, metrics.EventAdded, marker("n", 2), t0.Add(169*time.Second))
	tr.observe(watchIdx, metrics.EventAdded, marker("n", 2), t0.Add(170*time.Second))
	tr.Ack(w, 0, nil, t0.Add(171*time.Second))
	w = tr.Expect(c, WriteKey{"n", 3}, metrics.EventModified, noTrace, at(171*time.Second))
	tr.observe(informer, metrics.EventModified, marker("n", 3), t0.Add(200*time.Second))
	tr.Ack(w, 0, nil, t0.Add(200*time.Second))
	tr.observe(watchIdx, metrics.EventModified, marker("n", 3), t0.Add(261*time.Second))
	tr.CloseCycle(c)
	probetest.WantCounts(t, []probetest.Count{
		{"watch lost", probetest.LostTotal(wat), 2},
		{"watch late", testutil.ToFloat64(wat.Counter(metrics.EventsLate)), 1},
		{"informer late", testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsLate)), 2},
		{"informer lost", probetest.LostTotal(s.Paths[metrics.PathInformer]), 0},
	})
	wantMissedAccounted(t, tr, s)
}

// A settled write is not forgotten before it has been judged for loss,
// even when the retention is the horizon itself.
func TestLostJudgedBeforeRetentionDrops(t *testing.T) {
	tr, s := newTestTracker(t, retaining(10*time.Second, time.Hour)) // the horizon is the retention
	deliveredOnlyOn(tr, informer, metrics.EventAdded, time.Millisecond)
	tr.sweep(t0.Add(2 * time.Second))
	tr.sweep(t0.Add(20 * time.Second))
	if got := probetest.LostTotal(s.Paths[metrics.PathWatch]); got != 1 {
		t.Errorf("watch lost = %g, want 1", got)
	}
	if tr.ledger.settled.n != 0 {
		t.Errorf("%d settled writes kept past the retention", tr.ledger.settled.n)
	}
}

// markerAt is marker at resourceVersion rv.
func markerAt(name string, seq, rv uint64) metav1.Object {
	m := marker(name, seq)
	m.SetResourceVersion(strconv.FormatUint(rv, 10))
	return m
}

// The verdict on an arrival follows its stamp, whatever order the
// goroutines then take the lock in: an event the informer stamped before
// the deadline (1 s) is neither missed nor late, one stamped after it is
// missed and late, however the write's answer, the sweep and the path's
// hand-over interleave. The watch path never delivers, and is missed once
// in every order.
func TestVerdictFollowsStamp(t *testing.T) {
	type step string
	const (
		begin  step = "begin"  // the path marks its flight
		stamp  step = "stamp"  // the path reads the clock
		answer step = "answer" // the write's answer takes the lock
		sweep  step = "sweep"  // the sweeper takes the lock
		lock   step = "lock"   // the path takes the lock and hands over
	)
	var orders [][]step
	var permute func(prefix, rest []step)
	permute = func(prefix, rest []step) {
		if len(rest) == 0 {
			orders = append(orders, slices.Clone(prefix))
			return
		}
		for i, s := range rest {
			next := append(slices.Clone(rest[:i]), rest[i+1:]...)
			permute(append(prefix, s), next)
		}
	}
	permute(nil, []step{begin, stamp, answer, sweep, lock})
	for _, order := range orders {
		// A path marks its flight before it reads the clock, and hands over
		// after: other orders cannot happen.
		if slices.Index(order, begin) > slices.Index(order, stamp) || slices.Index(order, stamp) > slices.Index(order, lock) {
			continue
		}
		for _, stamped := range []time.Duration{999 * time.Millisecond, 1001 * time.Millisecond} {
			for _, answered := range []time.Duration{500 * time.Millisecond, 1100 * time.Millisecond} {
				name := fmt.Sprintf("%v/stamped %v/answered %v", order, stamped, answered)
				// One clock: what took the lock before the path marked
				// its flight read the clock before the path's stamp.
				arrival := stamped
				for _, st := range order[:slices.Index(order, begin)] {
					switch st {
					case answer:
						arrival = max(arrival, answered+time.Millisecond)
					case sweep:
						arrival = max(arrival, 1500*time.Millisecond+time.Millisecond)
					}
				}
				t.Run(name, func(t *testing.T) {
					tr, s := newTestTracker(t)
					h := tr.Handle(informer)
					c := tr.NewCycle()
					w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
					for _, st := range order {
						switch st {
						case begin:
							h.flight.begin()
						case stamp:
							h.flight.stamped(t0.Add(arrival).Sub(tr.ledger.base))
						case answer:
							tr.Ack(w, 0, nil, t0.Add(answered))
						case sweep:
							tr.sweep(t0.Add(1500 * time.Millisecond))
						case lock:
							tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(arrival))
							h.Handed()
						}
					}
					tr.sweep(t0.Add(1600 * time.Millisecond))
					tr.CloseCycle(c)
					late := 0.0
					if arrival > time.Second {
						late = 1
					}
					is, ws := s.Paths[metrics.PathInformer], s.Paths[metrics.PathWatch]
					probetest.WantCounts(t, []probetest.Count{
						{"informer missed", probetest.MissedTotal(is), late},
						{"informer late", testutil.ToFloat64(is.Counter(metrics.EventsLate)), late},
						{"informer observed", testutil.ToFloat64(is.Counter(metrics.EventsObserved, metrics.EventAdded)), 1},
						{"watch missed", probetest.MissedTotal(ws), 1},
						{"pending", float64(tr.Pending()), 0},
					})
				})
			}
		}
	}
}

// The lost horizon waits for what is in flight too: an event stamped
// before it and handed over after the sweep passed it is late, not lost.
func TestLostVerdictFollowsStamp(t *testing.T) {
	tr, s := newTestTracker(t) // deadline 1s; lost after 1m
	h := tr.Handle(informer)
	deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
	tr.sweep(t0.Add(2 * time.Second)) // missed on the informer
	horizon := tr.judge.horizon()
	tr.stamp(h.flight, at(horizon-time.Millisecond))
	tr.sweep(t0.Add(horizon + time.Second))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(horizon-time.Millisecond))
	h.Handed()
	tr.sweep(t0.Add(horizon + 2*time.Second))
	is := s.Paths[metrics.PathInformer]
	probetest.WantCounts(t, []probetest.Count{
		{"missed", probetest.MissedTotal(is), 1},
		{"late", testutil.ToFloat64(is.Counter(metrics.EventsLate)), 1},
		{"lost", probetest.LostTotal(is), 0},
	})
	wantMissedAccounted(t, tr, s)
}

// What one delivery is, from the resourceVersions involved.
func TestDeliveryOf(t *testing.T) {
	seen := pathMark{seen: true, rv: 10}
	for _, tc := range []struct {
		name     string
		m        pathMark
		delete   bool
		rv, own  uint64
		listed   bool
		newEpoch bool
		want     delivery
	}{
		{"first, answered", pathMark{}, false, 10, 10, false, false, firstDelivery},
		{"first, before the answer", pathMark{}, false, 10, 0, false, false, firstDelivery},
		{"the same again", seen, false, 10, 10, false, false, againDelivery},
		{"the same after a relist", seen, false, 10, 10, false, true, replayDelivery},
		{"someone else's change", seen, false, 11, 10, false, false, foreignDelivery},
		{"someone else's change, not the write's own first", pathMark{}, false, 11, 10, false, false, foreignDelivery},
		{"someone else's change before the answer", seen, false, 11, 0, false, false, foreignDelivery},
		{"that change again", pathMark{seen: true, rv: 10, foreign: 11}, false, 11, 10, false, false, againDelivery},
		{"that change after a relist", pathMark{seen: true, rv: 10, foreign: 11}, false, 11, 10, false, true, replayDelivery},
		{"the write's own after someone else's, before the answer", pathMark{seen: true, rv: 11}, false, 10, 0, false, false, earlierDelivery},
		{"a relist's state, not delivered before", pathMark{}, false, 10, 10, true, false, listedState},
		{"a relist's state of someone else's change", pathMark{}, false, 11, 10, true, false, listedState},
		{"a relist's state, delivered before", seen, false, 10, 10, true, true, replayDelivery},
		{"a delete", pathMark{}, true, 20, 0, false, false, firstDelivery},
		{"a delete again", pathMark{seen: true}, true, 20, 0, false, false, againDelivery},
		{"a tombstone after a relist", pathMark{}, true, 10, 0, true, false, listedState},
		{"no integer resourceVersion", seen, false, 0, 10, false, false, againDelivery},
		{"an older change after a newer one", pathMark{seen: true, rv: 10, foreign: 12}, false, 11, 10, false, false, againDelivery},
	} {
		if got := deliveryOf(tc.m, tc.delete, tc.rv, tc.own, tc.listed, tc.newEpoch); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Another client's change of a marker is counted once per path and change,
// with its manager; it is never a duplicate, never timed, and whether it
// arrives before or after the write's answer makes no difference.
func TestForeignChanges(t *testing.T) {
	foreign := func(rv uint64) metav1.Object {
		m := markerAt("m", 1, rv)
		ts := metav1.NewTime(t0)
		m.SetManagedFields([]metav1.ManagedFieldsEntry{
			{Manager: FieldManager, Time: &ts},
			{Manager: "labeller", Time: &ts},
		})
		return m
	}
	for _, beforeAnswer := range []bool{false, true} {
		t.Run(fmt.Sprint("before the answer ", beforeAnswer), func(t *testing.T) {
			tr, s := newTestTracker(t)
			rec := hearing(tr)
			c := tr.NewCycle()
			w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
			if !beforeAnswer {
				tr.Ack(w, 10, nil, t0.Add(time.Millisecond))
			}
			for _, i := range []int{informer, watchIdx} {
				tr.observe(i, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(2*time.Millisecond))
				tr.observe(i, metrics.EventModified, foreign(11), t0.Add(3*time.Millisecond))
				tr.observe(i, metrics.EventModified, foreign(11), t0.Add(4*time.Millisecond)) // repeated: a duplicate
				tr.observe(i, metrics.EventModified, foreign(12), t0.Add(5*time.Millisecond))
			}
			if beforeAnswer {
				tr.Ack(w, 10, nil, t0.Add(6*time.Millisecond))
			}
			tr.CloseCycle(c)
			tr.sweep(t0.Add(2 * time.Second))
			for _, p := range config.DefaultPaths {
				ps := s.Paths[p]
				probetest.WantCounts(t, []probetest.Count{
					{p + " foreign", testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 2},
					{p + " duplicates", testutil.ToFloat64(ps.Counter(metrics.EventsDuplicate)), 1},
					{p + " observed", testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventAdded)), 1},
					{p + " missed", probetest.MissedTotal(ps), 0},
				})
				if h := probetest.Histogram(t, ps.Observer(metrics.EventLatency, metrics.EventAdded)); h.GetSampleSum() != 0.002 {
					t.Errorf("%s latency sum %g, want only the write's own 2ms", p, h.GetSampleSum())
				}
			}
			for _, o := range rec.outcomes {
				if o.Kind == ForeignChange && o.Manager != "labeller" {
					t.Errorf("foreign change named %q, want labeller", o.Manager)
				}
			}
		})
	}
}

// A path that delivered someone else's later change before the write's own
// event, and the write's answer came first, has not delivered the write:
// it is missed there, and the change is counted foreign.
func TestForeignChangeInPlaceOfTheWrite(t *testing.T) {
	for _, beforeAnswer := range []bool{false, true} {
		tr, s := newTestTracker(t)
		c := tr.NewCycle()
		w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
		if !beforeAnswer {
			tr.Ack(w, 10, nil, t0.Add(time.Millisecond))
		}
		tr.observe(watchIdx, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(2*time.Millisecond))
		tr.observe(informer, metrics.EventAdded, markerAt("m", 1, 11), t0.Add(2*time.Millisecond)) // the write's own was dropped
		if beforeAnswer {
			tr.Ack(w, 10, nil, t0.Add(3*time.Millisecond))
		}
		tr.CloseCycle(c)
		tr.sweep(t0.Add(2 * time.Second))
		is := s.Paths[metrics.PathInformer]
		probetest.WantCounts(t, []probetest.Count{
			{fmt.Sprint("before the answer ", beforeAnswer, ": informer foreign"), testutil.ToFloat64(is.Counter(metrics.ForeignChanges)), 1},
			{fmt.Sprint("before the answer ", beforeAnswer, ": informer missed"), probetest.MissedTotal(is), 1},
			{fmt.Sprint("before the answer ", beforeAnswer, ": informer observed"), testutil.ToFloat64(is.Counter(metrics.EventsObserved, metrics.EventAdded)), 0},
		})
	}
}

// A relist delivers state, not events: the writes whose events it replaced
// are missed and then lost for the relist, untimed, as on a path that
// never delivers them; what the path had delivered before is replayed.
func TestRelistStateIsNoDelivery(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	first := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Ack(first, 10, nil, t0.Add(time.Millisecond))
	for _, i := range []int{informer, watchIdx} {
		tr.observe(i, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(2*time.Millisecond))
		tr.streamEnded(i, metrics.EndExpired, time.Second, nil, t0.Add(3*time.Millisecond))
	}
	second := tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(4*time.Millisecond))
	tr.Ack(second, 11, nil, t0.Add(5*time.Millisecond))
	tr.CloseCycle(c)
	for _, i := range []int{informer, watchIdx} {
		tr.relisted(i, metrics.RelistExpired, metrics.ModeList, t0.Add(300*time.Millisecond))
		tr.relistDone(i, metrics.ModeList, 10*time.Millisecond, t0.Add(310*time.Millisecond))
		tr.live(i, t0.Add(310*time.Millisecond))
	}
	// The informer's store hands the relist's state to its handler; the
	// watch path does not.
	tr.deliver(informer, t0.Add(311*time.Millisecond),
		PathEvent{Event: metrics.EventModified, Obj: markerAt("m", 2, 11), Listed: true},
		PathEvent{Event: metrics.EventAdded, Obj: markerAt("m", 1, 10), Listed: true}) // what it had: a replay
	tr.sweep(t0.Add(2 * time.Second))
	tr.sweep(t0.Add(tr.judge.horizon() + time.Minute))
	for _, p := range config.DefaultPaths {
		ps := s.Paths[p]
		probetest.WantCounts(t, []probetest.Count{
			{p + " missed relist", testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedRelist)), 1},
			{p + " lost relist", testutil.ToFloat64(ps.Counter(metrics.EventsLost, metrics.MissedRelist)), 1},
			{p + " late", testutil.ToFloat64(ps.Counter(metrics.EventsLate)), 0},
			{p + " observed", testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventModified)), 0},
		})
		if h := probetest.Histogram(t, ps.Observer(metrics.EventLatency, metrics.EventModified)); h.GetSampleCount() != 0 {
			t.Errorf("%s: %d latency samples of the write the relist replaced, want none", p, h.GetSampleCount())
		}
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsReplayed)); got != 1 {
		t.Errorf("informer replays = %g, want 1", got)
	}
	wantMissedAccounted(t, tr, s)
}

// A refused write is counted by its cause, apart from write errors, names
// its cause, what denied it and the fix in the log, owes no event and
// fails its cycle; a control plane's failure stays a write error.
func TestRefusedWriteCountedApart(t *testing.T) {
	tr, s := newTestTracker(t)
	var log bytes.Buffer
	tr.sinks = append(tr.sinks, &LogSink{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	succeeded(t, tr, s)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventAdded, noTrace, at(0))
	tr.Ack(w, 0, validatingPolicyDenial(metav1.StatusReasonInvalid, 422), t0)
	tr.CloseCycle(c)
	c = tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"n", 3}, metrics.EventAdded, noTrace, at(time.Second)), 0, apierrors.NewServiceUnavailable("no"), t0.Add(time.Second))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(time.Hour))
	probetest.WantCounts(t, []probetest.Count{
		{"refused creates (admission_denied)", testutil.ToFloat64(s.Counter(metrics.WritesRefused, metrics.VerbCreate, metrics.RefusedAdmission)), 1},
		{"create errors (503)", testutil.ToFloat64(s.Counter(metrics.WriteErrors, metrics.VerbCreate, "503")), 1},
		{"create errors (422)", testutil.ToFloat64(s.Counter(metrics.WriteErrors, metrics.VerbCreate, "422")), 0},
		{"creates", testutil.ToFloat64(s.Counter(metrics.Writes, metrics.VerbCreate)), 3},
		{"probe_success", testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)), 0},
	})
	for _, path := range config.DefaultPaths {
		ps := s.Paths[path]
		if got := probetest.MissedTotal(ps) + testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventAdded)); got != 1 {
			t.Errorf("%s: observed + missed = %g, want 1 (the successful cycle's)", path, got)
		}
	}
	if got, want := (Outcome{Kind: Answered, Verb: metrics.VerbCreate, Err: errors.New("x"), Reason: metrics.RefusedQuota}).Anomaly(),
		`writes_refused_total{cause="quota_exceeded",verb="create"}`; got != want {
		t.Errorf("anomaly %s, want %s", got, want)
	}
	for _, want := range []string{"marker write refused", "cause=admission_denied", `by="ValidatingAdmissionPolicy 'deny-markers' with binding 'deny-markers-here'"`, "fix=", `msg="marker write failed"`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, log.String())
		}
	}
}

// The apiserver's share pairs late arrivals too: a path's arrival after
// the deadline with the etcd path's, and the etcd path's with every
// other's, settled writes included. An arrival after the lost horizon, a
// path added after the write and an unmeasurable delete have no pair.
func TestAPIServerLagPairsLateArrivals(t *testing.T) {
	rec := &lagsByWrite{}
	tr, sink := newEtcdTracker(rec) // deadline 1 s, lost after 1 m
	ms := time.Millisecond
	c := tr.NewCycle()
	// m/1: the watch path delivers 7 s late, long after the write settled.
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
	tr.observe(etcdIdx, metrics.EventAdded, marker("m", 1), t0.Add(2*ms))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(3*ms))
	// m/2: the etcd path delivers 7 s late.
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(10*ms))
	tr.Ack(w, 0, nil, t0.Add(11*ms))
	tr.observe(informer, metrics.EventModified, marker("m", 2), t0.Add(13*ms))
	tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(14*ms))
	// m/3: the etcd path delivers after the lost horizon.
	w = tr.Expect(c, WriteKey{"m", 3}, metrics.EventModified, noTrace, at(20*ms))
	tr.Ack(w, 0, nil, t0.Add(21*ms))
	tr.observe(informer, metrics.EventModified, marker("m", 3), t0.Add(23*ms))
	tr.observe(watchIdx, metrics.EventModified, marker("m", 3), t0.Add(24*ms))
	tr.sweep(t0.Add(2 * time.Second))
	if n := tr.ledger.settled.n; n != 3 {
		t.Fatalf("%d writes settled before the late arrivals, want 3", n)
	}
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(7*time.Second))
	tr.observe(etcdIdx, metrics.EventModified, marker("m", 2), t0.Add(7*time.Second))
	tr.sweep(t0.Add(2 * time.Minute))
	tr.observe(etcdIdx, metrics.EventModified, marker("m", 3), t0.Add(2*time.Minute))
	// n/4: a pinned path added after its send owes it nothing.
	w = tr.Expect(c, WriteKey{"n", 4}, metrics.EventAdded, noTrace, at(3*time.Minute))
	pinned, _ := addTestPath(tr, "10.0.0.1:6443", t0.Add(3*time.Minute))
	tr.live(pinned, t0.Add(3*time.Minute))
	tr.Ack(w, 0, nil, t0.Add(3*time.Minute+ms))
	for _, i := range []int{etcdIdx, informer, watchIdx, pinned} {
		tr.observe(i, metrics.EventAdded, marker("n", 4), t0.Add(3*time.Minute+2*ms))
	}
	// n/5: a delete other clients' finalizers hold is no share.
	w = tr.Expect(c, WriteKey{"n", 5}, metrics.EventDeleted, noTrace, at(3*time.Minute+10*ms))
	for _, i := range []int{etcdIdx, informer, watchIdx, pinned} {
		tr.observe(i, metrics.EventDeleted, heldAt("n", 4, 30, "holder"), t0.Add(3*time.Minute+11*ms))
	}
	tr.AckHeld(w, heldAt("n", 4, 30, "holder"), t0.Add(3*time.Minute+12*ms))
	tr.CloseCycle(c)
	want := map[string]map[WriteKey]time.Duration{
		metrics.PathWatch:    {{"m", 1}: 7*time.Second - 2*ms, {"m", 2}: 4*ms - (7*time.Second - 10*ms), {"n", 4}: 0},
		metrics.PathInformer: {{"m", 1}: ms, {"m", 2}: 3*ms - (7*time.Second - 10*ms), {"n", 4}: 0},
	}
	for path, lags := range want {
		if got := rec.lags[path]; !maps.Equal(got, lags) {
			t.Errorf("%s: lags by write %v, want %v", path, got, lags)
		}
		h := probetest.Histogram(t, sink.series.Paths[path].Observer(metrics.APIServerLag))
		if h.GetSampleCount() != uint64(len(lags)) {
			t.Errorf("%s: %d samples of the apiserver's share, want %d", path, h.GetSampleCount(), len(lags))
		}
	}
	if got := rec.lags[metrics.PathAPIServer]; len(got) != 0 {
		t.Errorf("the path added after the write has shares %v, want none", got)
	}
}

// heldAt is marker name, its last write seq, at rv, marked deleting and
// held by a finalizer that managers set.
func heldAt(name string, seq, rv uint64, managers ...string) metav1.Object {
	m := markerAt(name, seq, rv).(*metav1.ObjectMeta)
	ts := metav1.NewTime(t0)
	m.DeletionTimestamp = &ts
	m.Finalizers = []string{"example.com/hold"}
	for _, mgr := range managers {
		m.ManagedFields = append(m.ManagedFields, metav1.ManagedFieldsEntry{Manager: mgr,
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:finalizers":{".":{},"v:\"example.com/hold\"":{}}}}`)})
	}
	return m
}

// A delete that other clients' finalizers hold owes no DELETED: it is
// unmeasurable on every path at its answer, naming them, and never missed
// or lost. The marker marked deleting is the delete's own change, not a
// foreign one; the DELETED that comes when the finalizers go, before the
// answer or minutes after, is neither timed, nor late, nor foreign: it is
// the marker's release. The cycle succeeds.
func TestDeleteHeldByFinalizers(t *testing.T) {
	for _, deletedBeforeAnswer := range []bool{false, true} {
		t.Run(fmt.Sprint("deleted before the answer ", deletedBeforeAnswer), func(t *testing.T) {
			tr, s := newTestTracker(t)
			rec := hearing(tr)
			c := tr.NewCycle()
			answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
			w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(10*time.Millisecond))
			for _, i := range []int{informer, watchIdx} {
				tr.observe(i, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(2*time.Millisecond))
				tr.observe(i, metrics.EventModified, heldAt("m", 1, 11, "holder"), t0.Add(11*time.Millisecond))
				if deletedBeforeAnswer {
					tr.observe(i, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), t0.Add(12*time.Millisecond))
				}
			}
			tr.AckHeld(w, heldAt("m", 1, 11, "holder", "other"), t0.Add(13*time.Millisecond))
			tr.CloseCycle(c)
			tr.sweep(t0.Add(2 * time.Second))
			if !deletedBeforeAnswer {
				for _, i := range []int{informer, watchIdx} {
					tr.observe(i, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), t0.Add(3*time.Minute))
				}
			}
			tr.observe(informer, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), t0.Add(3*time.Minute)) // repeated
			tr.sweep(t0.Add(4 * time.Minute))
			for _, p := range config.DefaultPaths {
				ps := s.Paths[p]
				duplicates := 0.0
				if p == metrics.PathInformer {
					duplicates = 1
				}
				probetest.WantCounts(t, []probetest.Count{
					{p + " delete_blocked", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableDeleteBlocked)), 1},
					{p + " missed", probetest.MissedTotal(ps), 0},
					{p + " lost", probetest.LostTotal(ps), 0},
					{p + " late", testutil.ToFloat64(ps.Counter(metrics.EventsLate)), 0},
					{p + " foreign", testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 0},
					{p + " duplicates", testutil.ToFloat64(ps.Counter(metrics.EventsDuplicate)), duplicates},
					{p + " observed deletes", testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)), 0},
				})
				if h := probetest.Histogram(t, ps.Observer(metrics.EventLatency, metrics.EventDeleted)); h.GetSampleCount() != 0 {
					t.Errorf("%s: %d delete latencies, want none", p, h.GetSampleCount())
				}
			}
			for _, o := range rec.kinds(Unmeasurable) {
				if o.Manager != "holder,other" {
					t.Errorf("the held delete names %q, want holder,other", o.Manager)
				}
			}
			released := 2
			if deletedBeforeAnswer {
				released = 0 // the cleaner finds it gone by itself
			}
			if got := len(rec.kinds(Released)); got != released {
				t.Errorf("%d releases, want %d", got, released)
			}
			if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
				t.Errorf("probe_success = %g after a held delete, want 1", got)
			}
		})
	}
}

// A DELETED on a path for a marker the probe has not deleted is another
// client's change: it took the marker out of the path's label selector.
// Counted foreign on that path; the probe's next update, which labels it
// again, arrives there as an ADDED and is that update's delivery; a
// delete while the marker is out of the selector is unmeasurable there,
// never missed or lost, while the etcd path, which watches every key,
// times it. After the cycle, a DELETED of its marker is the cleaner's and
// judges nothing.
func TestMarkerLeftSelector(t *testing.T) {
	tr, sink := newEtcdTracker()
	s := sink.series
	paths := etcdPaths
	ms := time.Millisecond
	selectors := []int{informer, watchIdx}
	c := tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0)), 10, nil, t0.Add(ms))
	for i := range paths {
		tr.observe(i, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(2*ms))
	}
	strip := func(seq, rv uint64, when time.Duration) {
		for _, i := range selectors {
			tr.observe(i, metrics.EventDeleted, markerAt("m", seq, rv), t0.Add(when))
		}
		tr.observe(etcdIdx, metrics.EventModified, markerAt("m", seq, rv), t0.Add(when))
	}
	strip(1, 11, 3*ms)
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(10*ms))
	tr.Ack(w, 12, nil, t0.Add(11*ms))
	for _, i := range selectors {
		tr.observe(i, metrics.EventAdded, markerAt("m", 2, 12), t0.Add(15*ms)) // back in the selector
	}
	tr.observe(etcdIdx, metrics.EventModified, markerAt("m", 2, 12), t0.Add(14*ms))
	strip(2, 13, 20*ms)
	tr.observe(informer, metrics.EventDeleted, markerAt("m", 2, 13), t0.Add(21*ms)) // repeated
	w = tr.Expect(c, WriteKey{"m", 3}, metrics.EventDeleted, noTrace, at(30*ms))
	tr.Ack(w, 0, nil, t0.Add(31*ms))
	tr.observe(etcdIdx, metrics.EventDeleted, markerAt("m", 2, 14), t0.Add(32*ms))
	tr.CloseCycle(c)

	// A marker whose delete was refused, deleted later by the cleaner.
	c = tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"n", 4}, metrics.EventAdded, noTrace, at(40*ms)), 20, nil, t0.Add(41*ms))
	for i := range paths {
		tr.observe(i, metrics.EventAdded, markerAt("n", 4, 20), t0.Add(42*ms))
	}
	refused := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "n", errors.New("no delete"))
	tr.Ack(tr.Expect(c, WriteKey{"n", 5}, metrics.EventDeleted, noTrace, at(50*ms)), 0, refused, t0.Add(51*ms))
	tr.CloseCycle(c)
	for i := range paths {
		tr.observe(i, metrics.EventDeleted, markerAt("n", 4, 21), t0.Add(time.Second))
	}
	tr.sweep(t0.Add(2 * time.Second))
	tr.sweep(t0.Add(2 * time.Minute))

	for _, p := range paths {
		ps := s.Paths[p]
		want := []probetest.Count{
			{p + " foreign", testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 2},
			{p + " missed", probetest.MissedTotal(ps), 0},
			{p + " lost", probetest.LostTotal(ps), 0},
			{p + " observed updates", testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventModified)), 1},
		}
		if p == metrics.PathEtcd {
			want = append(want,
				probetest.Count{Name: p + " observed deletes", Got: testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)), Want: 1},
				probetest.Count{Name: p + " left_selector", Got: testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), Want: 0})
		} else {
			want = append(want,
				probetest.Count{Name: p + " observed deletes", Got: testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)), Want: 0},
				probetest.Count{Name: p + " left_selector", Got: testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), Want: 1})
		}
		dup := 0.0
		if p == metrics.PathInformer {
			dup = 1
		}
		want = append(want, probetest.Count{Name: p + " duplicates", Got: testutil.ToFloat64(ps.Counter(metrics.EventsDuplicate)), Want: dup})
		probetest.WantCounts(t, want)
		if h := probetest.Histogram(t, ps.Observer(metrics.EventLatency, metrics.EventModified)); h.GetSampleCount() != 1 {
			t.Errorf("%s: %d update latencies, want the update's", p, h.GetSampleCount())
		}
	}
	for _, i := range selectors {
		if got := tr.judge.paths[i].left; got != (leftMarker{}) {
			t.Errorf("%s: the closed cycle's marker is still out of its selector: %v", paths[i], got)
		}
	}
}

// A path whose list and watch are refused (refusedAfter times in a row),
// down since before a write was sent, could not receive it: the write is
// unmeasurable there, not missed,
// and not lost later; a delivery after that is not timed. The path shows
// refused until it is live again; a later failure of the control plane's
// takes the refusal back, and the writes due then are missed.
func TestRefusedPathUnmeasurable(t *testing.T) {
	tr, s := newTestTracker(t)
	ps := s.Paths[metrics.PathWatch]
	refusedGauge := func() float64 { return testutil.ToFloat64(ps.Gauge(metrics.PathRefused, metrics.PathForbidden)) }
	deny := apierrors.NewForbidden(configmaps, "", errors.New(`User "probe" cannot watch resource "configmaps"`))
	// Sent while the path was live, due (t0+1s) before it was refused
	// (t0+1.5s): the path owed it, and it is missed.
	c := tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"a", 1}, metrics.EventAdded, noTrace, at(0)), 0, nil, t0)
	tr.observe(informer, metrics.EventAdded, marker("a", 1), t0.Add(time.Millisecond))
	tr.CloseCycle(c)
	tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0.Add(1500*time.Millisecond))
	for k := range refusedAfter {
		tr.requestFailed(watchIdx, metrics.RequestWatch, deny, t0.Add(1500*time.Millisecond+time.Duration(k)*100*time.Millisecond))
	}
	confirm(tr, metrics.RequestWatch, t0.Add(1500*time.Millisecond+refusedAfter*100*time.Millisecond))
	tr.sweep(t0.Add(1600 * time.Millisecond))
	// Sent while it was refused.
	for seq := uint64(2); seq <= 4; seq++ {
		c := tr.NewCycle()
		sent := time.Duration(seq) * 10 * time.Second
		tr.Ack(tr.Expect(c, WriteKey{"b", seq}, metrics.EventAdded, noTrace, at(sent)), 0, nil, t0.Add(sent))
		tr.observe(informer, metrics.EventAdded, marker("b", seq), t0.Add(sent+time.Millisecond))
		tr.CloseCycle(c)
		tr.sweep(t0.Add(sent + 2*time.Second))
	}
	probetest.WantCounts(t, []probetest.Count{
		{"path_refused{forbidden}", refusedGauge(), 1},
		{"unmeasurable (path_refused)", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)), 3},
		{"missed unavailable", testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedUnavailable)), 0},
		{"missed", probetest.MissedTotal(ps), 1},
		{"probe_success", testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)), 0},
		{"informer unmeasurable", testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)), 0},
	})
	if down := tr.DownPaths(); len(down) != 1 || !strings.Contains(down[0], "watch: refused (forbidden): ") {
		t.Errorf("paths down %q, want the watch path named refused", down)
	}
	// The path comes back and relists; a resumed stream delivering an old
	// write now is neither timed nor late.
	tr.live(watchIdx, t0.Add(time.Minute))
	tr.observe(watchIdx, metrics.EventAdded, marker("b", 2), t0.Add(time.Minute))
	tr.sweep(t0.Add(time.Hour))
	probetest.WantCounts(t, []probetest.Count{
		{"path_refused{forbidden} once live", refusedGauge(), 0},
		{"observed", testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventAdded)), 0},
		{"late", testutil.ToFloat64(ps.Counter(metrics.EventsLate)), 0},
		{"lost", probetest.LostTotal(ps), 1},
	})
	// Refused, then failing otherwise: no longer refused, and missed.
	tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0.Add(2*time.Hour))
	for range refusedAfter {
		tr.requestFailed(watchIdx, metrics.RequestList, deny, t0.Add(2*time.Hour))
	}
	confirm(tr, metrics.RequestList, t0.Add(2*time.Hour))
	if got := refusedGauge(); got != 1 {
		t.Fatalf("path_refused{forbidden} = %g after %d refusals, want 1", got, refusedAfter)
	}
	tr.requestFailed(watchIdx, metrics.RequestList, apierrors.NewServiceUnavailable("no"), t0.Add(2*time.Hour))
	c = tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"c", 5}, metrics.EventAdded, noTrace, at(2*time.Hour)), 0, nil, t0.Add(2*time.Hour))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2*time.Hour + 2*time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"path_refused{forbidden} after a 503", refusedGauge(), 0},
		{"missed unavailable after a 503", testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedUnavailable)), 1},
		{"unmeasurable still", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)), 3},
	})
}

// The clients that set an object's finalizers are those whose
// managedFields entries own metadata.finalizers.
func TestFinalizerManagers(t *testing.T) {
	m := heldAt("m", 1, 10, "holder", "other", "holder").(*metav1.ObjectMeta)
	m.ManagedFields = append(m.ManagedFields,
		metav1.ManagedFieldsEntry{Manager: FieldManager, FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{}}}`)},
		metav1.ManagedFieldsEntry{Manager: "broken", FieldsV1: metav1.NewFieldsV1(`{`)},
		metav1.ManagedFieldsEntry{Manager: "empty"})
	if got := FinalizerManagers(m); !slices.Equal(got, []string{"holder", "other"}) {
		t.Errorf("finalizer managers %v, want [holder other]", got)
	}
}

// A marker that leaves a path's selector while its cycle is slow, after
// the write whose state it carries has settled, has left it all the same.
func TestMarkerLeftSelectorAfterItsWriteSettled(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0)), 10, nil, t0.Add(time.Millisecond))
	for _, i := range []int{informer, watchIdx} {
		tr.observe(i, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(2*time.Millisecond))
	}
	tr.sweep(t0.Add(2 * time.Second))
	if tr.ledger.settled.n != 1 {
		t.Fatalf("%d writes settled, want the create", tr.ledger.settled.n)
	}
	tr.observe(informer, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(2100*time.Millisecond))
	tr.Ack(tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(2200*time.Millisecond)), 0, nil, t0.Add(2201*time.Millisecond))
	tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 12), t0.Add(2202*time.Millisecond))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(5 * time.Minute))
	inf := s.Paths[metrics.PathInformer]
	probetest.WantCounts(t, []probetest.Count{
		{"informer foreign", testutil.ToFloat64(inf.Counter(metrics.ForeignChanges)), 1},
		{"informer left_selector", testutil.ToFloat64(inf.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), 1},
		{"informer missed", probetest.MissedTotal(inf), 0},
		{"informer lost", probetest.LostTotal(inf), 0},
		{"watch observed deletes", testutil.ToFloat64(s.Paths[metrics.PathWatch].Counter(metrics.EventsObserved, metrics.EventDeleted)), 1},
	})
}

// An informer relist reports the marker as a tombstone a moment before the
// other paths show another client's label strip that made its list lack
// it. The strip's evidence, once it comes (before or after the delete's
// answer), makes the tombstone a selector leave: the delete is
// unmeasurable on the informer, never missed or lost there.
func TestRelistTombstoneBeforeStripEvidence(t *testing.T) {
	for _, afterAnswer := range []bool{false, true} {
		tr, sink := newEtcdTracker()
		paths := etcdPaths
		ms := time.Millisecond
		c := createdAt10(tr, informer, watchIdx, etcdIdx)
		tr.relisted(informer, metrics.RelistExpired, "list", t0.Add(40*ms))
		tr.deliver(informer, t0.Add(50*ms), PathEvent{Event: metrics.EventDeleted, Obj: markerAt("m", 1, 10), Listed: true})
		tr.live(informer, t0.Add(50*ms))
		evidence := func(when time.Duration) {
			tr.observe(etcdIdx, metrics.EventModified, markerAt("m", 1, 11), t0.Add(when))
			tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(when+ms))
		}
		if !afterAnswer {
			evidence(52 * ms)
		}
		w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
		tr.Ack(w, 0, nil, t0.Add(210*ms))
		if afterAnswer {
			evidence(212 * ms)
		}
		tr.observe(etcdIdx, metrics.EventDeleted, markerAt("m", 1, 12), t0.Add(215*ms))
		tr.sweep(t0.Add(5 * time.Second))
		tr.sweep(t0.Add(2 * time.Minute))
		tr.CloseCycle(c)
		for _, p := range paths[:2] {
			ps := sink.series.Paths[p]
			probetest.WantCounts(t, []probetest.Count{
				{fmt.Sprintf("after the answer %v: %s foreign", afterAnswer, p), testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 1},
				{fmt.Sprintf("after the answer %v: %s left_selector", afterAnswer, p), testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), 1},
				{fmt.Sprintf("after the answer %v: %s missed", afterAnswer, p), probetest.MissedTotal(ps), 0},
				{fmt.Sprintf("after the answer %v: %s lost", afterAnswer, p), probetest.LostTotal(ps), 0},
			})
		}
		if got := testutil.ToFloat64(sink.series.Paths[metrics.PathEtcd].Counter(metrics.EventsObserved, metrics.EventDeleted)); got != 1 {
			t.Errorf("after the answer %v: etcd observed deletes %g, want the delete's", afterAnswer, got)
		}
	}
}

// Another client strips the marker's label just before the probe's delete
// is sent, and every selector path delivers the leave's DELETED only after
// the delete was expected. A DELETED stamped before the delete's send
// (the transport's stamp), or at or before the state its answer says it
// removed, is not the delete's: the delete is unmeasurable there,
// never timed, and the leave counted foreign. A DELETED stamped between
// two attempts of the delete may be an earlier attempt's: it is timed from
// the first send, never negative.
func TestLabelStripHeardAfterTheDeleteWasExpected(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		answerRV uint64
		heard    time.Duration
	}{
		{"stamped before the send", 0, 203 * ms},
		{"at the state the delete's answer says it removed", 11, 206 * ms},
	} {
		tr, sink := newEtcdTracker()
		paths := etcdPaths
		c := createdAt10(tr, informer, watchIdx, etcdIdx)
		w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
		tr.Attempted(w, t0.Add(205*ms))
		tr.observe(etcdIdx, metrics.EventModified, markerAt("m", 1, 11), t0.Add(202*ms))
		tr.observe(informer, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(tc.heard))
		tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(tc.heard))
		tr.Ack(w, tc.answerRV, nil, t0.Add(210*ms))
		tr.observe(etcdIdx, metrics.EventDeleted, markerAt("m", 1, 12), t0.Add(215*ms))
		tr.sweep(t0.Add(5 * time.Second))
		tr.CloseCycle(c)
		for _, p := range paths[:2] {
			ps := sink.series.Paths[p]
			probetest.WantCounts(t, []probetest.Count{
				{fmt.Sprintf("%s: %s observed deletes", tc.name, p), testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)), 0},
				{fmt.Sprintf("%s: %s left_selector", tc.name, p), testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), 1},
				{fmt.Sprintf("%s: %s foreign", tc.name, p), testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 1},
				{fmt.Sprintf("%s: %s missed", tc.name, p), probetest.MissedTotal(ps), 0},
			})
		}
		e := sink.series.Paths[metrics.PathEtcd]
		if h := probetest.Histogram(t, e.Observer(metrics.EventLatency, metrics.EventDeleted)); h.GetSampleCount() != 1 || h.GetSampleSum() != (10*ms).Seconds() {
			t.Errorf("%s: etcd delete latencies %d summing %gs, want the delete's 10ms from its send", tc.name, h.GetSampleCount(), h.GetSampleSum())
		}
	}

	// Retried: the DELETED between the attempts may be the first's.
	paths := []string{metrics.PathInformer, metrics.PathWatch}
	sink := newTestSink(paths)
	tr := New(testSettings(paths), sink)
	for i := range paths {
		tr.live(i, t0.Add(-time.Hour))
	}
	c := createdAt10(tr, informer, watchIdx)
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
	tr.Attempted(w, t0.Add(201*ms))
	tr.Attempted(w, t0.Add(300*ms))
	for i := range paths {
		tr.observe(i, metrics.EventDeleted, markerAt("m", 1, 12), t0.Add(250*ms))
	}
	tr.Ack(w, 0, nil, t0.Add(310*ms))
	tr.sweep(t0.Add(5 * time.Second))
	tr.CloseCycle(c)
	for _, p := range paths {
		ps := sink.series.Paths[p]
		h := probetest.Histogram(t, ps.Observer(metrics.EventLatency, metrics.EventDeleted))
		if h.GetSampleCount() != 1 || h.GetSampleSum() != (50*ms).Seconds() {
			t.Errorf("retried: %s delete latencies %d summing %gs, want one of 50ms from the first send", p, h.GetSampleCount(), h.GetSampleSum())
		}
		if got := testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)); got != 0 {
			t.Errorf("retried: %s left_selector %g, want 0", p, got)
		}
	}
}

// Without an etcd path, the selector paths alone tell the strip from the
// delete: a delete answers which state it removed (its precondition), and
// its DELETED carries a later resourceVersion. Another client strips the
// marker's label (rv 11) just before the probe's delete, which removes the
// stripped state; the informer hears the strip's DELETED after the
// delete's send and before its answer, the watch path after the answer:
// both are the strip's, a leave (counted foreign although the cycle ended
// at the delete's answer), and the delete is unmeasurable there, never
// timed, missed or lost. Without the strip the delete removes the
// probe's own state (rv 10), and its DELETED (rv 11), heard before or after
// the answer, is timed.
func TestStripBeforeTheDeleteWithoutAnEtcdPath(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		removed uint64 // the state the delete removed
		strip   bool
	}{
		{"a strip at rv 11, then the delete", 11, true},
		{"the delete alone", 10, false},
	} {
		tr, s := newTestTracker(t)
		c := createdAt10(tr, informer, watchIdx)
		w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
		tr.Attempted(w, t0.Add(201*ms))
		tr.observe(informer, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(203*ms))
		tr.Ack(w, tc.removed, nil, t0.Add(210*ms))
		tr.CloseCycle(c) // as the probe's cycle ends at the delete's answer
		tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(230*ms))
		tr.sweep(t0.Add(5 * time.Second))
		tr.sweep(t0.Add(5 * time.Minute))
		left, observed := 1.0, 0.0
		if !tc.strip {
			left, observed = 0, 1
		}
		for _, p := range config.DefaultPaths {
			ps := s.Paths[p]
			probetest.WantCounts(t, []probetest.Count{
				{fmt.Sprintf("%s: %s observed deletes", tc.name, p), testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)), observed},
				{fmt.Sprintf("%s: %s left_selector", tc.name, p), testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), left},
				{fmt.Sprintf("%s: %s foreign", tc.name, p), testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), left},
				{fmt.Sprintf("%s: %s missed", tc.name, p), probetest.MissedTotal(ps), 0},
				{fmt.Sprintf("%s: %s lost", tc.name, p), probetest.LostTotal(ps), 0},
			})
		}
		if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
			t.Errorf("%s: probe_success = %g, want 1", tc.name, got)
		}
	}
}

// Another client strips the marker's label just before the probe's
// delete, and the watch path is slow: it delivers the strip's DELETED
// only after the delete's deadline (1 s), by which the delete was counted
// missed there. The leave shows the marker left that path's view late:
// the miss ends late (timed from the delete's send), never lost for want
// of a DELETED that could not come, and the leave is counted foreign. The
// informer heard the strip at once: unmeasurable there.
func TestLeaveHeardAfterTheDeleteWasMissed(t *testing.T) {
	ms := time.Millisecond
	tr, s := newTestTracker(t)
	c := createdAt10(tr, informer, watchIdx)
	tr.observe(informer, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(150*ms))
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
	tr.Ack(w, 11, nil, t0.Add(210*ms))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
	if got := probetest.MissedTotal(s.Paths[metrics.PathWatch]); got != 1 {
		t.Fatalf("watch missed %g at the deadline, want 1", got)
	}
	tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(3200*ms))
	tr.sweep(t0.Add(5 * time.Minute))
	for p, want := range map[string]struct{ left, missed, late float64 }{
		metrics.PathInformer: {1, 0, 0},
		metrics.PathWatch:    {0, 1, 1},
	} {
		ps := s.Paths[p]
		probetest.WantCounts(t, []probetest.Count{
			{p + " left_selector", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), want.left},
			{p + " foreign", testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 1},
			{p + " missed", probetest.MissedTotal(ps), want.missed},
			{p + " late", testutil.ToFloat64(ps.Counter(metrics.EventsLate)), want.late},
			{p + " lost", probetest.LostTotal(ps), 0},
		})
	}
	if h := probetest.Histogram(t, s.Paths[metrics.PathWatch].Observer(metrics.EventLatency, metrics.EventDeleted)); h.GetSampleCount() != 1 || h.GetSampleSum() != 3.0 {
		t.Errorf("watch delete latencies %d summing %gs, want one of 3s from the delete's send", h.GetSampleCount(), h.GetSampleSum())
	}
}

// An informer relist's tombstone of the marker comes before any other
// path shows another client's strip, and the cycle ends at the delete's
// answer, before the watch path delivers the strip. The delete's answer
// says it removed a state past the probe's last write: another client
// changed the marker in between, evidence that takes the tombstone for a
// leave, so the delete is unmeasurable on the informer, never missed or
// lost there. Without an etcd path.
func TestRelistTombstoneConfirmedByTheDeleteAnswer(t *testing.T) {
	ms := time.Millisecond
	tr, s := newTestTracker(t)
	c := createdAt10(tr, informer, watchIdx)
	tr.relisted(informer, metrics.RelistExpired, "list", t0.Add(40*ms))
	tr.deliver(informer, t0.Add(50*ms), PathEvent{Event: metrics.EventDeleted, Obj: markerAt("m", 1, 10), Listed: true})
	tr.live(informer, t0.Add(50*ms))
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
	tr.Ack(w, 11, nil, t0.Add(210*ms))
	tr.CloseCycle(c)
	tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(230*ms))
	tr.sweep(t0.Add(5 * time.Second))
	tr.sweep(t0.Add(5 * time.Minute))
	wantTombstoneLeft(t, s)

	// A held delete's answer, the marker marked deleting past the
	// probe's last write, is the delete's own change: no evidence.
	tr, s = newTestTracker(t)
	c = createdAt10(tr, informer, watchIdx)
	tr.relisted(informer, metrics.RelistExpired, "list", t0.Add(40*ms))
	tr.deliver(informer, t0.Add(50*ms), PathEvent{Event: metrics.EventDeleted, Obj: markerAt("m", 1, 10), Listed: true})
	tr.live(informer, t0.Add(50*ms))
	w = tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
	tr.AckHeld(w, heldAt("m", 1, 11, "holder"), t0.Add(210*ms))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(5 * time.Minute))
	for _, p := range config.DefaultPaths {
		ps := s.Paths[p]
		probetest.WantCounts(t, []probetest.Count{
			{"held: " + p + " foreign", testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 0},
			{"held: " + p + " left_selector", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), 0},
			{"held: " + p + " delete_blocked", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableDeleteBlocked)), 1},
		})
	}
}

// wantTombstoneLeft checks the counts of TestRelistTombstoneConfirmedByTheDeleteAnswer.
func wantTombstoneLeft(t *testing.T, s *metrics.ProbeSeries) {
	t.Helper()
	for _, p := range config.DefaultPaths {
		ps := s.Paths[p]
		probetest.WantCounts(t, []probetest.Count{
			{p + " left_selector", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), 1},
			{p + " foreign", testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 1},
			{p + " missed", probetest.MissedTotal(ps), 0},
			{p + " lost", probetest.LostTotal(ps), 0},
		})
	}
}

// A delete that went without its precondition after conflicts (another
// client changed the marker between each try, a label strip first)
// cannot tell its own DELETED from the strip's: no path times it, on no
// path is it missed, every path counts it unmeasurable (delete_raced).
func TestUnconditionalDeleteIsNotTimed(t *testing.T) {
	ms := time.Millisecond
	tr, s := newTestTracker(t)
	c := createdAt10(tr, informer, watchIdx)
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
	tr.Attempted(w, t0.Add(201*ms))
	tr.observe(informer, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(203*ms))
	tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(204*ms))
	tr.Attempted(w, t0.Add(220*ms))
	tr.Attempted(w, t0.Add(240*ms))
	tr.Attempted(w, t0.Add(260*ms)) // without a precondition
	tr.Ack(w, RemovedUnknown, nil, t0.Add(270*ms))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(5 * time.Second))
	tr.sweep(t0.Add(5 * time.Minute))
	for _, p := range []string{metrics.PathInformer, metrics.PathWatch} {
		ps := s.Paths[p]
		if h := probetest.Histogram(t, ps.Observer(metrics.EventLatency, metrics.EventDeleted)); h.GetSampleCount() != 0 {
			t.Errorf("%s: %d delete latencies, want none: the DELETED may be the strip's", p, h.GetSampleCount())
		}
		if got := testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableDeleteRaced)); got != 1 {
			t.Errorf("%s: unmeasurable delete_raced %g, want 1", p, got)
		}
		if got := probetest.MissedTotal(ps); got != 0 {
			t.Errorf("%s: missed %g, want 0", p, got)
		}
	}
}
