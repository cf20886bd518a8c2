package judge

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The tracker is pure logic. Its tests, and those of the judgement it
// locks (judge_test.go, health_test.go, ledger_test.go, settled_test.go),
// drive it with explicit instants through the harness below.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// observe hands the tracker one event of a watch stream that arrived on
// path i, as a path's handle does; false when it belongs to no write the
// tracker knows.
func (t *Tracker) observe(i int, event string, obj metav1.Object, arrival time.Time) bool {
	return t.deliver(i, arrival, PathEvent{Event: event, Obj: obj}) == 1
}

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

// testSettings are the settings of the tests' trackers: the default paths,
// a deadline of 1 s, and the tests' clock rather than the process's.
func testSettings(paths []string) Settings {
	return Settings{
		Paths: paths, Deadline: time.Second, StallAfter: 5 * time.Second,
		Retain: config.DefaultRetention(time.Second), LostAfter: config.DefaultLostAfter(time.Second, config.DefaultRetention(time.Second)),
		Base: t0.Add(-24 * time.Hour),
	}
}

// newTestTracker is a tracker of the default paths, both live, with the
// settings of testSettings as edit changes them.
func newTestTracker(t *testing.T, edit ...func(*Settings)) (*Tracker, *metrics.ProbeSeries) {
	t.Helper()
	settings := testSettings(config.DefaultPaths)
	for _, e := range edit {
		e(&settings)
	}
	sink := newTestSink(settings.Paths)
	tr := New(settings, sink)
	s := sink.series
	for i := range config.DefaultPaths {
		tr.live(i, t0.Add(-time.Hour))
	}
	return tr, s
}

// etcdPaths are the paths of the tests that pair the etcd path's arrivals
// with the others': informer, watch and etcd, at etcdIdx.
var etcdPaths = []string{metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd}

const etcdIdx = 2

// newEtcdTracker is a tracker of etcdPaths, every one live, with sinks
// beside its metrics sink, which it returns.
func newEtcdTracker(sinks ...Sink) (*Tracker, *MetricsSink) {
	sink := newTestSink(etcdPaths)
	tr := New(testSettings(etcdPaths), append([]Sink{sink}, sinks...)...)
	for i := range etcdPaths {
		tr.live(i, t0.Add(-time.Hour))
	}
	return tr, sink
}

// newTestSink is the metrics sink of a probe "p" on paths, on a registry
// of its own, that keeps the series of removed paths.
func newTestSink(paths []string) *MetricsSink {
	return NewMetricsSink(metrics.NewProbe(prometheus.NewRegistry()), "p", paths, nil, nil, nil, RetiredSeries{Keep: true})
}

// addTestPath adds a path pinned to addr at at to a tracker of
// newTestTracker's, and returns its slot and its series.
func addTestPath(tr *Tracker, addr string, at time.Time) (int, *metrics.PathSeries) {
	slot := tr.AddPath(metrics.PathAPIServer, addr, at)
	return slot, tr.sinks[0].(*MetricsSink).path(&PathInfo{Name: metrics.PathAPIServer, APIServer: addr})
}

// retaining sets the retention and the lost horizon of a test's tracker.
func retaining(retain, lostAfter time.Duration) func(*Settings) {
	return func(s *Settings) { s.Retain, s.LostAfter = retain, lostAfter }
}

var noTrace trace.SpanContext

func marker(name string, seq uint64) metav1.Object {
	return &metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationSeq: strconv.FormatUint(seq, 10)}}
}

const informer, watchIdx = 0, 1

// pendingMisses counts, on path i, the writes missed there that have
// neither arrived since nor been counted lost: what the deadline verdict
// has said and the lost horizon not yet.
func pendingMisses(tr *Tracker, i int) float64 {
	tr.lock()
	defer tr.unlock()
	n := 0
	for _, w := range tr.ledger.order {
		if i >= len(w.marks) {
			continue
		}
		if m := w.marks[i]; m.expected && m.missed && !m.seen && !m.lost {
			n++
		}
	}
	for j := range tr.ledger.settled.n {
		s := tr.ledger.settled.at(j)
		if i >= int(s.paths) {
			continue
		}
		if m := *s.mark(i); m&(markExpected|markMissed|markSeen|markLost) == markExpected|markMissed {
			n++
		}
	}
	return float64(n)
}

// wantMissedAccounted checks, on every path, that each missed write is
// late, lost or still pending, exactly once.
func wantMissedAccounted(t *testing.T, tr *Tracker, s *metrics.ProbeSeries) {
	t.Helper()
	for i, path := range config.DefaultPaths {
		ps := s.Paths[path]
		if m, l, lo, p := probetest.MissedTotal(ps), testutil.ToFloat64(ps.Counter(metrics.EventsLate)), probetest.LostTotal(ps), pendingMisses(tr, i); m != l+lo+p {
			t.Errorf("%s: missed %g != late %g + lost %g + pending %g", path, m, l, lo, p)
		}
	}
}

func eventOf(seq uint64) string {
	if seq == 1 {
		return metrics.EventAdded
	}
	return metrics.EventModified
}

// A path pinned to an apiserver that appears mid-run owes nothing for the
// writes sent before it existed, and everything for those sent after.
func TestAddedPathExpectsOnlyLaterWrites(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	before := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Ack(before, 0, nil, t0)

	slot, series := addTestPath(tr, "10.0.0.1:6443", t0)
	tr.live(slot, t0)
	// Its initial list shows the marker already there: not a delivery.
	tr.observe(slot, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	if !before.done {
		t.Fatal("a write sent before the path existed waits for it")
	}
	if got := testutil.ToFloat64(series.Counter(metrics.EventsObserved, metrics.EventAdded)); got != 0 {
		t.Errorf("new path observed %g writes sent before it existed, want 0", got)
	}

	after := tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(10*time.Millisecond))
	tr.Ack(after, 0, nil, t0.Add(11*time.Millisecond))
	tr.observe(informer, metrics.EventModified, marker("m", 2), t0.Add(12*time.Millisecond))
	tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(12*time.Millisecond))
	if after.done {
		t.Fatal("a write sent after the path was added settled without it")
	}
	tr.sweep(t0.Add(2 * time.Second))
	if got, want := probetest.MissedTotal(series), 1.0; got != want {
		t.Errorf("new path missed %g, want %g", got, want)
	}
	if got := probetest.MissedTotal(s.Paths[metrics.PathInformer]); got != 0 {
		t.Errorf("informer missed %g, want 0", got)
	}
}

// Removing a path settles the writes that waited only for it, without
// counting them missed; a path that later takes its slot owes nothing for
// them either.
func TestRemovedPathReleasesItsWrites(t *testing.T) {
	tr, _ := newTestTracker(t)
	slot, gone := addTestPath(tr, "10.0.0.1:6443", t0.Add(-time.Hour))
	tr.live(slot, t0)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Ack(w, 0, nil, t0)
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	if w.done {
		t.Fatal("settled before the pinned path delivered")
	}
	tr.RemovePath(slot, t0.Add(time.Millisecond))
	if !w.done {
		t.Fatal("still waiting for a removed path")
	}

	got, next := addTestPath(tr, "10.0.0.2:6443", t0)
	if got != slot {
		t.Fatalf("new path took slot %d, want the free slot %d", got, slot)
	}
	tr.observe(slot, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
	tr.sweep(t0.Add(2 * time.Second))
	if got := testutil.ToFloat64(next.Counter(metrics.EventsObserved, metrics.EventAdded)) + probetest.MissedTotal(next) + probetest.MissedTotal(gone); got != 0 {
		t.Errorf("observed+missed on the removed and the new path = %g, want 0", got)
	}
}

// A path removed (its apiserver left) while writes it missed are neither
// late nor lost yet counts them lost as unavailable, once: its counts add
// up for as long as its series stay.
func TestRemovedPathLosesWhatItMissed(t *testing.T) {
	tr, _ := newTestTracker(t)
	slot, gone := addTestPath(tr, "10.0.0.1:6443", t0.Add(-time.Hour))
	tr.live(slot, t0.Add(-time.Minute))
	c := tr.NewCycle()
	for seq := uint64(1); seq <= 2; seq++ {
		tr.Ack(tr.Expect(c, WriteKey{"m", seq}, eventOf(seq), noTrace, at(0)), 0, nil, t0)
		tr.observe(informer, eventOf(seq), marker("m", seq), t0.Add(time.Millisecond))
		tr.observe(watchIdx, eventOf(seq), marker("m", seq), t0.Add(time.Millisecond))
	}
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second)) // both missed on the pinned path, settled
	c = tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"m", 3}, metrics.EventModified, noTrace, at(3*time.Second)), 0, nil, t0.Add(3*time.Second))
	tr.sweep(t0.Add(5 * time.Second)) // missed, still in order behind its open cycle
	tr.RemovePath(slot, t0.Add(5*time.Second))
	tr.RemovePath(slot, t0.Add(5*time.Second)) // twice: nothing left to lose
	probetest.WantCounts(t, []probetest.Count{
		{"missed on the removed path", probetest.MissedTotal(gone), 3},
		{"lost unavailable on the removed path", testutil.ToFloat64(gone.Counter(metrics.EventsLost, metrics.MissedUnavailable)), 3},
		{"lost on the removed path", probetest.LostTotal(gone), 3},
	})
}

// blockingSink holds the first outcome of kind until released.
type blockingSink struct {
	kind     Kind
	held     chan struct{}
	released chan struct{}
	once     sync.Once
	mu       sync.Mutex
	heard    []string
}

func (b *blockingSink) Outcome(o Outcome) {
	if o.Kind == b.kind {
		b.once.Do(func() {
			close(b.held)
			<-b.released
		})
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if o.Path != nil {
		b.heard = append(b.heard, fmt.Sprint(o.Kind, " ", o.Path.Name))
	}
}

// A sink that blocks (a log written to a full pipe) holds up only the
// goroutine delivering to it: the other paths' handlers and the sweeper go
// on, and every outcome is heard, in the order concluded, once it lets go.
func TestBlockedSinkStallsNoPath(t *testing.T) {
	tr, _ := newTestTracker(t)
	sink := &blockingSink{kind: Arrived, held: make(chan struct{}), released: make(chan struct{})}
	tr.sinks = append(tr.sinks, sink)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Ack(w, 0, nil, t0)
	go tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	<-sink.held
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
		tr.sweep(t0.Add(time.Hour))
		tr.bookmark(informer, t0.Add(time.Hour))
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a path and the sweeper waited for a blocked sink")
	}
	close(sink.released)
	last := fmt.Sprint(Bookmark, " ", metrics.PathInformer)
	localcluster.Eventually(t, time.Minute, "every outcome heard", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return slices.Contains(sink.heard, last)
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	first, second := fmt.Sprint(Arrived, " ", metrics.PathInformer), fmt.Sprint(Arrived, " ", metrics.PathWatch)
	if i, j := slices.Index(sink.heard, first), slices.Index(sink.heard, second); i < 0 || j < i || sink.heard[len(sink.heard)-1] != last {
		t.Errorf("outcomes heard %v, want the informer's arrival, then the watch's, and the bookmark last", sink.heard)
	}
}

// createdAt10 opens a cycle whose create of m1 the apiserver answers at
// resourceVersion 10 and the paths in slots deliver 1 ms after t0, in
// that order.
func createdAt10(tr *Tracker, slots ...int) *Cycle {
	c := tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0)), 10, nil, t0)
	for _, i := range slots {
		tr.observe(i, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(time.Millisecond))
	}
	return c
}
