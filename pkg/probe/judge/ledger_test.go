package judge

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// resent restamps w's send time, as the transport does when client-go sends
// a write again after a 429 and the apiserver takes only the last attempt.
func (t *Tracker) resent(w *PendingWrite, at time.Time) {
	t.lock()
	defer t.unlock()
	t.ledger.restamp(w, at)
}

// A marker write leaves as soon as it is stamped, even while the tracker's
// lock is held: under CPU contention a holder of that lock can be
// descheduled for milliseconds, and a wait for it before the request went
// out would count as delivery latency on every write that followed
// another. Between Expect and its answer, a write's only call into the
// tracker is the transport's stamp of each attempt, which takes no lock.
func TestAttemptStampedWithoutTheLock(t *testing.T) {
	tr, _ := newTestTracker(t)
	w := tr.Expect(tr.NewCycle(), WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.lock()
	stamped := make(chan struct{})
	go func() {
		tr.Attempted(w, t0.Add(time.Second))
		close(stamped)
	}()
	select {
	case <-stamped:
	case <-time.After(time.Minute):
		t.Fatal("an attempt's stamp waited for the tracker's lock")
	}
	tr.unlock()
	tr.Ack(w, 0, nil, t0.Add(2*time.Second))
	if !w.sent.Equal(t0.Add(time.Second)) {
		t.Errorf("sent at %s, want the attempt's stamp %s", w.sent, t0.Add(time.Second))
	}
}

// A write that client-go sent again after a 429 is timed from the attempt
// the apiserver took, not from the first one it refused; so is an arrival
// held while client-go sends the write again.
func TestRetriedWriteTimedFromLastAttempt(t *testing.T) {
	for _, tc := range []struct {
		name            string
		heldAcrossRetry bool
		arrival, answer time.Duration
		want            float64
	}{
		{"arrival after the retry", false, time.Second + 2*time.Millisecond, time.Second + 3*time.Millisecond, 0.002},
		{"arrival held across the retry", true, 1500 * time.Millisecond, 1600 * time.Millisecond, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, s := newTestTracker(t)
			w := tr.Expect(tr.NewCycle(), WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
			arrive := func() { tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(tc.arrival)) }
			if tc.heldAcrossRetry {
				arrive()
			}
			tr.resent(w, t0.Add(time.Second)) // after Retry-After: 1
			if !tc.heldAcrossRetry {
				arrive()
			}
			tr.Ack(w, 0, nil, t0.Add(tc.answer))
			h := probetest.Histogram(t, s.Paths[metrics.PathWatch].Observer(metrics.EventLatency, metrics.EventAdded))
			if h.GetSampleCount() != 1 || h.GetSampleSum() != tc.want {
				t.Errorf("latency: count %d sum %g, want 1 and %g", h.GetSampleCount(), h.GetSampleSum(), tc.want)
			}
		})
	}
}

// Deletes are matched by name: the deleted object carries the sequence
// number of the last update, not of the delete.
func TestDeleteMatchedByName(t *testing.T) {
	tr, s := newTestTracker(t)
	answered(tr, tr.NewCycle(), WriteKey{"m", 3}, metrics.EventDeleted)
	if !tr.observe(watchIdx, metrics.EventDeleted, marker("m", 2), t0.Add(time.Millisecond)) {
		t.Fatal("the delete was not matched")
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Counter(metrics.EventsObserved, metrics.EventDeleted)); got != 1 {
		t.Errorf("observed deletes = %g, want 1", got)
	}
}

// Objects that belong to no write of this tracker are ignored, also one
// with the sequence number of a write of another marker.
func TestForeignObjectsIgnored(t *testing.T) {
	tr, s := newTestTracker(t)
	answered(tr, tr.NewCycle(), WriteKey{"m", 1}, metrics.EventAdded)
	for _, obj := range []metav1.Object{marker("other", 1), &metav1.ObjectMeta{Name: "no-seq"}} {
		if tr.observe(informer, metrics.EventAdded, obj, t0) {
			t.Errorf("%s was matched", obj.GetName())
		}
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Counter(metrics.EventsObserved, metrics.EventAdded)); got != 0 {
		t.Errorf("observed = %g, want 0", got)
	}
}

// Settled writes are forgotten after the retention, so memory stays flat.
func TestSettledWritesForgotten(t *testing.T) {
	tr, _ := newTestTracker(t)
	answered(tr, tr.NewCycle(), WriteKey{"m", 1}, metrics.EventDeleted)
	tr.sweep(t0.Add(2 * time.Second))
	tr.sweep(t0.Add(tr.ledger.retain + 3*time.Second))
	if len(tr.ledger.byKey) != 0 || len(tr.ledger.deletes) != 0 || len(tr.ledger.order) != 0 || tr.ledger.settled.n != 0 {
		t.Errorf("still holding %d writes (%d by key, %d deletes, %d settled) after the retention", len(tr.ledger.order), len(tr.ledger.byKey), len(tr.ledger.deletes), tr.ledger.settled.n)
	}
}

// A write is timed from the transport's stamp of the attempt the apiserver
// took, stored without the lock, not from expect's: the client's own work
// before its transport (a credential plugin, a rate limiter) is not the
// apiserver's. The stamp counts for arrivals judged before and after it is
// folded in, and for the sweep's deadline.
func TestTransportStampTimesWrite(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Attempted(w, t0.Add(time.Second))   // 1 s in the client before its transport
	tr.Attempted(w, t0.Add(time.Second/2)) // an earlier stamp never wins
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Second+2*time.Millisecond))
	tr.sweep(t0.Add(time.Second + 3*time.Millisecond))
	tr.Ack(w, 0, nil, t0.Add(time.Second+4*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Second+5*time.Millisecond))
	for idx, want := range map[int]float64{watchIdx: 0.002, informer: 0.005} {
		h := probetest.Histogram(t, s.Paths[[]string{metrics.PathInformer, metrics.PathWatch}[idx]].Observer(metrics.EventLatency, metrics.EventAdded))
		if h.GetSampleCount() != 1 || math.Abs(h.GetSampleSum()-want) > 1e-9 {
			t.Errorf("path %d latency: count %d sum %g, want 1 and %g", idx, h.GetSampleCount(), h.GetSampleSum(), want)
		}
	}
}

// A write the sweep passed by on expect's stamp, while it was still in the
// client (a credential plugin) or waiting out a 429, is judged on the
// transport's stamp of the attempt the apiserver took: a path that has not
// delivered it when the response comes is not missed yet, and one that
// never does is missed once the deadline from that stamp has passed.
func TestOverdueOnEarlierStampNotMissed(t *testing.T) {
	for _, refused := range []bool{false, true} {
		tr, s := newTestTracker(t)
		c := tr.NewCycle()
		w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
		if refused {
			tr.Attempted(w, t0) // refused with 429
		}
		tr.sweep(t0.Add(time.Second + time.Millisecond)) // due on that stamp
		tr.Attempted(w, t0.Add(1500*time.Millisecond))   // the attempt the apiserver took
		tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(1505*time.Millisecond))
		tr.Ack(w, 0, nil, t0.Add(1510*time.Millisecond))
		ws, is := s.Paths[metrics.PathWatch], s.Paths[metrics.PathInformer]
		if probetest.MissedTotal(ws) != 0 || probetest.MissedTotal(is) != 0 {
			t.Errorf("refused first %v: missed at the response: watch %g, informer %g, want none", refused, probetest.MissedTotal(ws), probetest.MissedTotal(is))
		}
		tr.sweep(t0.Add(2700 * time.Millisecond))
		if probetest.MissedTotal(ws) != 1 || probetest.MissedTotal(is) != 0 || testutil.ToFloat64(is.Counter(metrics.EventsLate)) != 0 {
			t.Errorf("refused first %v: after the deadline, missed: watch %g (want 1), informer %g, informer late %g (want 0)",
				refused, probetest.MissedTotal(ws), probetest.MissedTotal(is), testutil.ToFloat64(is.Counter(metrics.EventsLate)))
		}
	}
}

// The sweep judges a write's deadline from the transport's stamp.
func TestSweepUsesTransportStamp(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.Attempted(w, t0.Add(500*time.Millisecond))
	tr.sweep(t0.Add(1200 * time.Millisecond)) // due by expect's stamp, not by the transport's
	tr.Ack(w, 0, nil, t0.Add(1210*time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(1220*time.Millisecond))
	ws := s.Paths[metrics.PathWatch]
	if probetest.MissedTotal(ws) != 0 || testutil.ToFloat64(ws.Counter(metrics.EventsLate)) != 0 {
		t.Errorf("missed %g, late %g, want neither", probetest.MissedTotal(ws), testutil.ToFloat64(ws.Counter(metrics.EventsLate)))
	}
}

// What a shorter retention gives up: an event arriving after it is matched
// to nothing, so it is not counted late, while its write stays counted
// missed; within it, the same event is counted late.
func TestLateArrivalOnlyWithinRetention(t *testing.T) {
	tr, s := newTestTracker(t, retaining(time.Minute, time.Minute)) // deadline 1s
	ps := s.Paths[metrics.PathInformer]
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"a", 1}, metrics.EventAdded)
	answered(tr, c, WriteKey{"a", 2}, metrics.EventModified)
	tr.CloseCycle(c)
	for _, seq := range []uint64{1, 2} {
		tr.observe(watchIdx, eventOf(seq), marker("a", seq), t0.Add(10*time.Millisecond))
	}
	tr.sweep(t0.Add(2 * time.Second)) // both missed on the informer path
	if got := probetest.MissedTotal(ps); got != 2 {
		t.Fatalf("informer missed = %g, want 2", got)
	}

	if !tr.observe(informer, metrics.EventAdded, marker("a", 1), t0.Add(50*time.Second)) {
		t.Error("an event 50s late, within the 1m retention, was not matched")
	}
	tr.sweep(t0.Add(61 * time.Second)) // the retention has passed for both
	if tr.observe(informer, metrics.EventModified, marker("a", 2), t0.Add(61*time.Second)) {
		t.Error("an event 61s late, past the 1m retention, was matched")
	}
	if got := testutil.ToFloat64(ps.Counter(metrics.EventsLate)); got != 1 {
		t.Errorf("informer late = %g, want 1: only the event within the retention", got)
	}
	if got := probetest.MissedTotal(ps); got != 2 {
		t.Errorf("informer missed = %g, want still 2", got)
	}
}
