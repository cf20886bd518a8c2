package judge

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// settle writes a cycle of marker m (create, update, delete with seqs
// from first), delivers every write on both paths, and sweeps past the
// deadline: the writes keep only what a settled write keeps.
func settleCycle(t *testing.T, tr *Tracker, m string, first uint64) {
	t.Helper()
	c := tr.NewCycle()
	for i, event := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		seq := first + uint64(i)
		// Each write's name is a string of its own, as each is decoded from
		// the apiserver's response to the write before.
		answered(tr, c, WriteKey{strings.Clone(m), seq}, event)
		obj := marker(m, seq)
		if event == metrics.EventDeleted {
			obj = marker(m, seq-1) // a deleted object carries its last state
		}
		for _, path := range []int{informer, watchIdx} {
			if !tr.observe(path, event, obj, t0.Add(10*time.Millisecond)) {
				t.Fatalf("%s of %s seq %d not matched", event, m, seq)
			}
		}
	}
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
	if len(tr.ledger.order) != 0 || len(tr.ledger.byKey) != 0 || len(tr.ledger.deletes) != 0 {
		t.Fatalf("settled writes still pending: %d in order, %d by key, %d deletes", len(tr.ledger.order), len(tr.ledger.byKey), len(tr.ledger.deletes))
	}
}

// A settled write past its deadline is judged as it was before it was
// compacted: a second delivery is a duplicate, one after a relist a
// replay, and what a delivery changes is kept for the next one.
func TestSettledWriteJudgedAsBefore(t *testing.T) {
	tr, s := newTestTracker(t)
	settleCycle(t, tr, "m", 1)
	if tr.ledger.settled.n != 3 {
		t.Fatalf("settled writes = %d, want 3", tr.ledger.settled.n)
	}
	inf, wat := s.Paths[metrics.PathInformer], s.Paths[metrics.PathWatch]
	later := t0.Add(3 * time.Second)

	tr.observe(informer, metrics.EventModified, marker("m", 2), later)
	tr.observe(informer, metrics.EventDeleted, &metav1.ObjectMeta{Name: "m"}, later) // a tombstone without the annotation
	tr.relisted(watchIdx, metrics.RelistExpired, metrics.ModeList, later)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), later) // replayed
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), later) // and then twice in the new epoch

	probetest.WantCounts(t, []probetest.Count{
		{"informer duplicates", testutil.ToFloat64(inf.Counter(metrics.EventsDuplicate)), 2},
		{"watch replays", testutil.ToFloat64(wat.Counter(metrics.EventsReplayed)), 1},
		{"watch duplicates", testutil.ToFloat64(wat.Counter(metrics.EventsDuplicate)), 1},
		{"informer late", testutil.ToFloat64(inf.Counter(metrics.EventsLate)), 0},
		{"informer observed added", testutil.ToFloat64(inf.Counter(metrics.EventsObserved, metrics.EventAdded)), 1},
	})
	if tr.observe(informer, metrics.EventModified, marker("other", 2), later) {
		t.Error("an event of another marker with a settled write's seq was matched")
	}
}

// A write missed on a path and settled is counted late when it arrives,
// once: a second delivery of it is a duplicate, not late again.
func TestSettledMissedWriteLateOnce(t *testing.T) {
	tr, s := newTestTracker(t)
	deliveredOnlyOn(tr, informer, metrics.EventAdded, 10*time.Millisecond)
	tr.sweep(t0.Add(2 * time.Second)) // missed on the watch path
	wat := s.Paths[metrics.PathWatch]
	for range 2 {
		if !tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Second)) {
			t.Fatal("the late event was not matched")
		}
	}
	probetest.WantCounts(t, []probetest.Count{
		{"watch late", testutil.ToFloat64(wat.Counter(metrics.EventsLate)), 1},
		{"watch duplicates", testutil.ToFloat64(wat.Counter(metrics.EventsDuplicate)), 1},
		{"watch missed", probetest.MissedTotal(wat), 1},
	})
}

// A write that failed without a response stays known once settled, and an
// event of it is counted after a failed write; one the apiserver refused
// was never committed, so an event naming it is foreign.
func TestSettledFailedWrites(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0)), 0, context.DeadlineExceeded, t0)
	tr.Ack(tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(0)), 0, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "m", errors.New("no")), t0)
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
	if tr.ledger.settled.n != 1 {
		t.Fatalf("settled writes = %d, want 1: the refused one is forgotten", tr.ledger.settled.n)
	}
	if !tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Second)) {
		t.Error("an event of the write that got no response was not matched")
	}
	if tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(3*time.Second)) {
		t.Error("an event of the refused write was matched")
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Counter(metrics.EventsAfterFailedWrite)); got != 1 {
		t.Errorf("watch events after a failed write = %g, want 1", got)
	}
}

// A path removed and its slot taken by a new one: the new path owes
// nothing for settled writes sent before it existed.
func TestSettledWriteOwesNothingToALaterPath(t *testing.T) {
	tr, s := newTestTracker(t)
	settleCycle(t, tr, "m", 1)
	tr.RemovePath(watchIdx, t0.Add(2*time.Second))
	ps := s.Paths[metrics.PathWatch]
	if i := tr.AddPath(metrics.PathWatch, "", t0.Add(3*time.Second)); i != watchIdx {
		t.Fatalf("new path in slot %d, want the freed %d", i, watchIdx)
	}
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(4*time.Second))
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsDuplicate)) + testutil.ToFloat64(ps.Counter(metrics.EventsLate)); got != 0 {
		t.Errorf("the new path counted %g duplicates and late events of a write sent before it", got)
	}
}

// A cycle's settled writes keep one copy of the marker's name, and a
// retained write takes well under the 210 bytes it took as a pendingWrite.
func TestSettledWritesAreSmall(t *testing.T) {
	tr, _ := newTestTracker(t)
	settleCycle(t, tr, "m-1", 1)
	names := map[*byte]bool{}
	for i := range tr.ledger.settled.n {
		names[unsafe.StringData(tr.ledger.settled.at(i).name)] = true
	}
	if len(names) != 1 {
		t.Errorf("the cycle's 3 settled writes hold %d copies of the marker's name, want 1", len(names))
	}

	tr, _ = newTestTracker(t, retaining(time.Hour, time.Minute))
	const writes = 1 << 14
	objs := benchObjects(writes)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range writes {
		sent := at(time.Duration(i) * time.Millisecond)
		c := tr.NewCycle()
		w := tr.Expect(c, WriteKey{"m", uint64(i + 1)}, metrics.EventModified, noTrace, sent)
		tr.Ack(w, 0, nil, sent())
		tr.observe(informer, metrics.EventModified, objs[i], sent().Add(time.Millisecond))
		tr.observe(watchIdx, metrics.EventModified, objs[i], sent().Add(time.Millisecond))
		tr.CloseCycle(c)
		tr.sweep(sent().Add(2 * time.Second))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(objs)
	if n := len(tr.ledger.order) + tr.ledger.settled.n; n != writes {
		t.Fatalf("%d writes retained, want %d", n, writes)
	}
	perWrite := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / writes
	t.Logf("%.0f bytes of heap per retained write", perWrite)
	if perWrite > 120 {
		t.Errorf("a retained write takes %.0f bytes of heap, want at most 120", perWrite)
	}
	runtime.KeepAlive(tr)
}

// A traced write keeps its trace once settled: a late delivery on a path
// pinned to an apiserver, past the three marks kept inline, is counted on
// that path and recorded on a span linked to the write's.
func TestSettledTracedWriteOnAPinnedPath(t *testing.T) {
	tr, s := newTestTracker(t)
	var pinned []int
	var series []*metrics.PathSeries
	for _, addr := range []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"} {
		i, ps := addTestPath(tr, addr, t0.Add(-time.Hour))
		tr.live(i, t0.Add(-time.Hour))
		pinned, series = append(pinned, i), append(series, ps)
	}
	spans, span, c, w := tracedWrite(tr)
	tr.Ack(w, 0, nil, t0)
	for _, i := range append([]int{informer, watchIdx}, pinned[:2]...) {
		tr.observe(i, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	}
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second)) // missed on the last pinned path
	if tr.ledger.settled.n != 1 {
		t.Fatalf("settled writes = %d, want 1", tr.ledger.settled.n)
	}
	last := series[2]
	if got := probetest.MissedTotal(last); got != 1 {
		t.Fatalf("last pinned path missed = %g, want 1", got)
	}
	tr.observe(pinned[2], metrics.EventAdded, marker("m", 1), t0.Add(3*time.Second))
	tr.observe(pinned[1], metrics.EventAdded, marker("m", 1), t0.Add(3*time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"last pinned path late", testutil.ToFloat64(last.Counter(metrics.EventsLate)), 1},
		{"second pinned path duplicates", testutil.ToFloat64(series[1].Counter(metrics.EventsDuplicate)), 1},
		{"informer duplicates", testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsDuplicate)), 0},
	})
	var linked []string
	for _, e := range spans.Ended() {
		for _, l := range e.Links() {
			if l.SpanContext.SpanID() == span.SpanContext().SpanID() {
				linked = append(linked, e.Name())
			}
		}
	}
	if want := []string{"watchprobe.late", "watchprobe.duplicate"}; !slices.Equal(linked, want) {
		t.Errorf("spans linked to the settled write: %v, want %v", linked, want)
	}
}
