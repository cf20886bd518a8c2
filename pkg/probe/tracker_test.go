package probe

import (
	"errors"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The tracker is pure logic; these tests drive it with explicit instants.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

func newTestTracker(t *testing.T) (*tracker, *metrics.ProbeSeries) {
	t.Helper()
	m := metrics.NewProbe(prometheus.NewRegistry())
	s := m.ForProbe("p", Paths)
	return newTracker(Paths, s, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil))), s
}

func marker(name string, seq uint64) metav1.Object {
	return &metav1.ObjectMeta{Name: name, Annotations: map[string]string{AnnotationSeq: strconv.FormatUint(seq, 10)}}
}

func histogram(t *testing.T, o prometheus.Observer) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

const informer, watchIdx = 0, 1

// An event that beats the write's response still gets its true, positive
// latency, and the write settles as soon as the response arrives.
func TestEventBeforeResponse(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, at(0))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
	tr.ack(w, nil)
	tr.closeCycle(c)

	h := histogram(t, s.Paths[metrics.PathInformer].Latency[metrics.EventAdded])
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.003 {
		t.Errorf("informer latency: count %d sum %g, want 1 and 0.003", h.GetSampleCount(), h.GetSampleSum())
	}
	if tr.pending() != 0 {
		t.Errorf("%d writes pending after every path saw the write and it was acknowledged", tr.pending())
	}
	if got := testutil.ToFloat64(s.Success); got != 1 {
		t.Errorf("probe_success = %g, want 1", got)
	}
}

// A write one path never delivers is missed on that path only, once, and the
// cycle fails; arriving later, it is recorded but the miss stands.
func TestMissedOnOnePath(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventModified, at(0))
	tr.ack(w, nil)
	tr.observe(watchIdx, metrics.EventModified, marker("m", 1), t0.Add(time.Millisecond))
	tr.closeCycle(c)

	tr.sweep(t0.Add(500 * time.Millisecond))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Missed); got != 0 {
		t.Fatalf("missed before the deadline: %g", got)
	}
	tr.sweep(t0.Add(1500 * time.Millisecond))
	tr.sweep(t0.Add(2500 * time.Millisecond))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Missed); got != 1 {
		t.Errorf("informer missed = %g, want 1", got)
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Missed); got != 0 {
		t.Errorf("watch missed = %g, want 0", got)
	}
	if got := testutil.ToFloat64(s.Success); got != 0 {
		t.Errorf("probe_success = %g, want 0", got)
	}

	tr.observe(informer, metrics.EventModified, marker("m", 1), t0.Add(4*time.Second))
	h := histogram(t, s.Paths[metrics.PathInformer].Latency[metrics.EventModified])
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 4 {
		t.Errorf("late arrival: count %d sum %g, want 1 and 4", h.GetSampleCount(), h.GetSampleSum())
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Missed); got != 1 {
		t.Errorf("a late arrival changed the missed count to %g", got)
	}
}

// A second delivery of the same write is not counted as a second observation.
func TestRepeatedDeliveryCountedOnce(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 7}, metrics.EventAdded, at(0))
	tr.ack(w, nil)
	for range 3 {
		tr.observe(informer, metrics.EventAdded, marker("m", 7), t0.Add(time.Millisecond))
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Observed[metrics.EventAdded]); got != 1 {
		t.Errorf("observed = %g, want 1", got)
	}
}

// Deletes are matched by name: the deleted object carries the sequence
// number of the last update, not of the delete.
func TestDeleteMatchedByName(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 3}, metrics.EventDeleted, at(0))
	tr.ack(w, nil)
	if !tr.observe(watchIdx, metrics.EventDeleted, marker("m", 2), t0.Add(time.Millisecond)) {
		t.Fatal("the delete was not matched")
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Observed[metrics.EventDeleted]); got != 1 {
		t.Errorf("observed deletes = %g, want 1", got)
	}
}

// Objects that belong to no write of this tracker are ignored.
func TestForeignObjectsIgnored(t *testing.T) {
	tr, s := newTestTracker(t)
	for _, obj := range []metav1.Object{marker("other", 1), &metav1.ObjectMeta{Name: "no-seq"}} {
		if tr.observe(informer, metrics.EventAdded, obj, t0) {
			t.Errorf("%s was matched", obj.GetName())
		}
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Observed[metrics.EventAdded]); got != 0 {
		t.Errorf("observed = %g, want 0", got)
	}
}

// A failed write is never counted as missed: nothing was written to miss.
// It fails the cycle.
func TestFailedWriteFailsCycleWithoutMisses(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, at(0))
	tr.ack(w, errors.New("connection refused"))
	tr.closeCycle(c)
	tr.sweep(t0.Add(time.Hour))
	for _, path := range Paths {
		if got := testutil.ToFloat64(s.Paths[path].Missed); got != 0 {
			t.Errorf("%s missed = %g, want 0", path, got)
		}
	}
	if got := testutil.ToFloat64(s.Success); got != 0 {
		t.Errorf("probe_success = %g, want 0", got)
	}
}

// Settled writes are forgotten after the retention, so memory stays flat.
func TestSettledWritesForgotten(t *testing.T) {
	tr, _ := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventDeleted, at(0))
	tr.ack(w, nil)
	tr.sweep(t0.Add(2 * time.Second))
	tr.sweep(t0.Add(tr.retain + 3*time.Second))
	if len(tr.byKey) != 0 || len(tr.deletes) != 0 {
		t.Errorf("still holding %d writes and %d deletes after the retention", len(tr.byKey), len(tr.deletes))
	}
}
