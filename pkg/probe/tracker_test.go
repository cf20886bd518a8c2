package probe

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The tracker is pure logic; these tests drive it with explicit instants.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }

func newTestTracker(t *testing.T) (*tracker, *metrics.ProbeSeries) {
	t.Helper()
	m := metrics.NewProbe(prometheus.NewRegistry())
	s := m.ForProbe("p", Paths)
	tr := newTracker(Paths, s, time.Second, 5*time.Second, metricsSink{s})
	tr.ledger.base = t0.Add(-24 * time.Hour) // the tests' clock, not the process's
	for i := range Paths {
		tr.live(i, t0.Add(-time.Hour))
	}
	return tr, s
}

// missed sums a path's missed counter over its reasons.
func missed(ps *metrics.PathSeries) float64 {
	var n float64
	for _, c := range ps.Missed {
		n += testutil.ToFloat64(c)
	}
	return n
}

var noSpan = trace.SpanFromContext(context.Background())

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
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
	tr.ack(w, nil, t0)
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
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventModified, noSpan, at(0))
	tr.ack(w, nil, t0)
	tr.observe(watchIdx, metrics.EventModified, marker("m", 1), t0.Add(time.Millisecond))
	tr.closeCycle(c)

	tr.sweep(t0.Add(500 * time.Millisecond))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Missed[metrics.MissedSilent]); got != 0 {
		t.Fatalf("missed before the deadline: %g", got)
	}
	tr.sweep(t0.Add(1500 * time.Millisecond))
	tr.sweep(t0.Add(2500 * time.Millisecond))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Missed[metrics.MissedSilent]); got != 1 {
		t.Errorf("informer missed = %g, want 1", got)
	}
	if got := missed(s.Paths[metrics.PathWatch]); got != 0 {
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
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Missed[metrics.MissedSilent]); got != 1 {
		t.Errorf("a late arrival changed the missed count to %g", got)
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Late); got != 1 {
		t.Errorf("late = %g, want 1", got)
	}
}

// A second delivery of the same write is not a second observation: with no
// relist in between it is a duplicate, after a relist a replay.
func TestRepeatedDelivery(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 7}, metrics.EventAdded, noSpan, at(0))
	tr.ack(w, nil, t0)
	for range 3 {
		tr.observe(informer, metrics.EventAdded, marker("m", 7), t0.Add(time.Millisecond))
	}
	ps := s.Paths[metrics.PathInformer]
	if got := testutil.ToFloat64(ps.Observed[metrics.EventAdded]); got != 1 {
		t.Errorf("observed = %g, want 1", got)
	}
	if got := testutil.ToFloat64(ps.Duplicate); got != 2 {
		t.Errorf("duplicates = %g, want 2", got)
	}
	tr.relisted(informer, metrics.RelistExpired, metrics.ModeList, t0.Add(2*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 7), t0.Add(3*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 7), t0.Add(4*time.Millisecond))
	if got := testutil.ToFloat64(ps.Replayed); got != 1 {
		t.Errorf("replays = %g, want 1 (the first delivery after the relist)", got)
	}
	if got := testutil.ToFloat64(ps.Duplicate); got != 3 {
		t.Errorf("duplicates = %g, want 3 (a second delivery within the new epoch)", got)
	}
}

// A write delivered after a later write of the same writer is out of order,
// once; a relist resets the order it is judged against.
func TestOutOfOrder(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	for seq := uint64(1); seq <= 3; seq++ {
		tr.ack(tr.expect(c, writeKey{"m", seq}, metrics.EventModified, noSpan, at(0)), nil, t0)
	}
	for _, seq := range []uint64{1, 3, 2} {
		tr.observe(watchIdx, metrics.EventModified, marker("m", seq), t0.Add(time.Millisecond))
	}
	ps := s.Paths[metrics.PathWatch]
	if got := testutil.ToFloat64(ps.OutOfOrder); got != 1 {
		t.Errorf("out of order = %g, want 1", got)
	}
	if got := testutil.ToFloat64(ps.Observed[metrics.EventModified]); got != 3 {
		t.Errorf("observed = %g, want 3", got)
	}
	tr.ack(tr.expect(c, writeKey{"n", 4}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.relisted(watchIdx, metrics.RelistExpired, metrics.ModeList, t0)
	tr.observe(watchIdx, metrics.EventAdded, marker("n", 4), t0.Add(time.Millisecond))
	if got := testutil.ToFloat64(ps.OutOfOrder); got != 1 {
		t.Errorf("out of order after a relist = %g, want still 1", got)
	}
}

// A miss is explained only by what overlapped the window in which the event
// was due: an outage in which the path's requests failed, a relist (after
// which only final state arrives), or no stream open at all when it was due. A stream that ended and resumed from its
// resourceVersion loses nothing, so a miss across it is silent.
func TestMissedReason(t *testing.T) {
	ms := func(d time.Duration) time.Time { return t0.Add(d * time.Millisecond) }
	for _, tc := range []struct {
		name string
		path func(tr *tracker) // what happened on the informer path
		want string
	}{
		{"streaming all along", func(*tracker) {}, metrics.MissedSilent},
		{"ended and resumed", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndTimeout, time.Minute, nil, ms(10))
			tr.live(informer, ms(20))
		}, metrics.MissedSilent},
		{"cut and resumed", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, ms(10))
			tr.live(informer, ms(20))
		}, metrics.MissedSilent},
		{"relisted in the window", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndExpired, time.Minute, nil, ms(10))
			tr.relisted(informer, metrics.RelistExpired, metrics.ModeWatchList, ms(300))
			tr.live(informer, ms(400))
		}, metrics.MissedRelist},
		{"relisting when sent", func(tr *tracker) {
			tr.relisted(informer, metrics.RelistError, metrics.ModeList, ms(-100))
			tr.live(informer, ms(50))
		}, metrics.MissedRelist},
		{"relist done before the write", func(tr *tracker) {
			tr.relisted(informer, metrics.RelistError, metrics.ModeList, ms(-300))
			tr.live(informer, ms(-200))
		}, metrics.MissedSilent},
		{"relist after the deadline, before the sweep", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndExpired, time.Minute, nil, ms(1100))
			tr.relisted(informer, metrics.RelistExpired, metrics.ModeList, ms(1200))
		}, metrics.MissedSilent},
		{"ended, not resumed when due", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, ms(10))
			tr.live(informer, ms(1050))
		}, metrics.MissedUnavailable},
		{"ended, still out at the sweep", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, ms(10))
		}, metrics.MissedUnavailable},
		{"requests failing", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, ms(10))
			tr.requestFailed(informer, metrics.RequestWatch, errors.New("connection refused"), ms(20))
		}, metrics.MissedUnavailable},
		{"relisting, but its requests failing", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndExpired, time.Minute, nil, ms(10))
			tr.relisted(informer, metrics.RelistExpired, metrics.ModeList, ms(20))
			tr.requestFailed(informer, metrics.RequestList, errors.New("forbidden"), ms(30))
		}, metrics.MissedUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, s := newTestTracker(t)
			c := tr.newCycle()
			tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
			tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), ms(1))
			tc.path(tr)
			tr.sweep(ms(1500))
			ps := s.Paths[metrics.PathInformer]
			for reason, c := range ps.Missed {
				want := 0.0
				if reason == tc.want {
					want = 1
				}
				if got := testutil.ToFloat64(c); got != want {
					t.Errorf("missed (%s) = %g, want %g", reason, got, want)
				}
			}
		})
	}
}

// An event that arrives after its deadline is late and its write missed,
// whenever the sweep runs: here before any sweep at all.
func TestLateJudgedOnArrival(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.ack(w, nil, t0)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(1200*time.Millisecond)) // deadline 1 s
	tr.closeCycle(c)
	ps := s.Paths[metrics.PathInformer]
	if got := testutil.ToFloat64(ps.Late); got != 1 {
		t.Errorf("late = %g, want 1", got)
	}
	if got := testutil.ToFloat64(ps.Missed[metrics.MissedSilent]); got != 1 {
		t.Errorf("missed = %g, want 1", got)
	}
	if got := testutil.ToFloat64(s.Success); got != 0 {
		t.Errorf("probe_success = %g, want 0: an event arrived after its deadline", got)
	}
	// The sweep, when it comes, does not count it again.
	tr.sweep(t0.Add(3 * time.Second))
	if got := missed(ps); got != 1 {
		t.Errorf("missed after the sweep = %g, want still 1", got)
	}
	// So does an event that arrived late before the response came.
	c = tr.newCycle()
	w = tr.expect(c, writeKey{"m", 2}, metrics.EventModified, noSpan, at(10*time.Second))
	for i := range Paths {
		tr.observe(i, metrics.EventModified, marker("m", 2), t0.Add(12*time.Second))
	}
	tr.ack(w, nil, t0.Add(13*time.Second))
	for _, path := range Paths {
		if got := testutil.ToFloat64(s.Paths[path].Late); got < 1 {
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
	c := tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"a", 2}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	create := tr.expect(c, writeKey{"b", 1}, metrics.EventAdded, noSpan, at(0))
	del := tr.expect(c, writeKey{"c", 3}, metrics.EventDeleted, noSpan, at(0))
	for i := range Paths {
		tr.observe(i, metrics.EventAdded, marker("a", 2), t0.Add(time.Millisecond))
		tr.observe(i, metrics.EventAdded, marker("b", 1), t0.Add(2*time.Millisecond)) // after seq 2
	}
	tr.ack(create, errors.New("context deadline exceeded"), t0.Add(30*time.Second))
	tr.ack(del, errors.New("forbidden"), t0.Add(30*time.Second))
	for i := range Paths {
		tr.observe(i, metrics.EventDeleted, marker("c", 1), t0.Add(40*time.Second))
	}
	tr.closeCycle(c)
	for _, path := range Paths {
		ps := s.Paths[path]
		if got := testutil.ToFloat64(ps.AfterFailedWrite); got != 2 {
			t.Errorf("%s: events after failed writes = %g, want 2", path, got)
		}
		if got := testutil.ToFloat64(ps.Observed[metrics.EventAdded]); got != 1 {
			t.Errorf("%s: observed added = %g, want 1 (the successful write)", path, got)
		}
		if got := testutil.ToFloat64(ps.Observed[metrics.EventDeleted]); got != 0 {
			t.Errorf("%s: observed deleted = %g, want 0", path, got)
		}
		for event, o := range ps.Latency {
			want := uint64(0)
			if event == metrics.EventAdded {
				want = 1
			}
			if got := histogram(t, o).GetSampleCount(); got != want {
				t.Errorf("%s: %s latency samples = %d, want %d", path, event, got, want)
			}
		}
		if got := testutil.ToFloat64(ps.OutOfOrder); got != 0 {
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
		c := tr.newCycle()
		w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
		if lastOK {
			tr.ack(w, nil, t0)
			for i := range Paths {
				tr.observe(i, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
			}
		} else {
			tr.ack(w, errors.New("forbidden"), t0)
		}
		tr.closeCycle(c)
		want := testutil.ToFloat64(s.Success)
		if want != map[bool]float64{true: 1, false: 0}[lastOK] {
			t.Fatalf("probe_success = %g after a cycle that succeeded: %v", want, lastOK)
		}
		c = tr.newCycle()
		tr.abandon(tr.expect(c, writeKey{"m", 2}, metrics.EventModified, noSpan, at(time.Second)))
		tr.closeCycle(c)
		if got := testutil.ToFloat64(s.Success); got != want {
			t.Errorf("probe_success = %g after a cycle cut by shutdown, want %g from the last judged cycle", got, want)
		}
	}
}

// A write whose response comes after the sweep passed its deadline is
// judged by the response, even one stamped before the deadline (it was read
// before the tracker's lock was taken).
func TestAckAfterSweepPassedIt(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.sweep(t0.Add(1200 * time.Millisecond))
	tr.ack(w, nil, t0.Add(999*time.Millisecond))
	tr.closeCycle(c)
	for _, path := range Paths {
		if got := missed(s.Paths[path]); got != 1 {
			t.Errorf("%s missed = %g, want 1", path, got)
		}
	}
	if tr.pending() != 0 {
		t.Errorf("%d writes left unjudged", tr.pending())
	}
}

// A write the apiserver refused (4xx) was never committed: a later event
// for the same marker (the cleaner deleting it) is not this write's.
func TestRefusedWriteForgotten(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 3}, metrics.EventDeleted, noSpan, at(0))
	tr.ack(w, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "m", errors.New("no")), t0)
	if tr.observe(watchIdx, metrics.EventDeleted, marker("m", 2), t0.Add(time.Minute)) {
		t.Error("the cleaner's delete was matched to the refused delete")
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].AfterFailedWrite); got != 0 {
		t.Errorf("events after failed writes = %g, want 0", got)
	}
}

// A write that client-go sent again after a 429 is timed from the attempt
// the apiserver took, not from the first one it refused.
func TestRetriedWriteTimedFromLastAttempt(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.resent(w, t0.Add(time.Second)) // after Retry-After: 1
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Second+2*time.Millisecond))
	tr.ack(w, nil, t0.Add(time.Second+3*time.Millisecond))
	h := histogram(t, s.Paths[metrics.PathWatch].Latency[metrics.EventAdded])
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.002 {
		t.Errorf("latency: count %d sum %g, want 1 and 0.002", h.GetSampleCount(), h.GetSampleSum())
	}
}

// An arrival held when client-go sends the write again is timed from the
// attempt the apiserver took, as one arriving after it is.
func TestArrivalBeforeRetryTimedFromLastAttempt(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(1500*time.Millisecond))
	tr.resent(w, t0.Add(time.Second))
	tr.ack(w, nil, t0.Add(1600*time.Millisecond))
	h := histogram(t, s.Paths[metrics.PathWatch].Latency[metrics.EventAdded])
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.5 {
		t.Errorf("latency: count %d sum %g, want 1 and 0.5", h.GetSampleCount(), h.GetSampleSum())
	}
}

// A traced write's span records each path's arrival with the
// resourceVersion that path delivered, and ends once the write settles.
func TestTracedWriteRecordsArrivals(t *testing.T) {
	tr, _ := newTestTracker(t)
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("")
	tr.sinks = append(tr.sinks, traceSink{tracer})
	_, span := tracer.Start(context.Background(), "write")
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, span, at(0))
	for i, rv := range map[int]string{informer: "11", watchIdx: "12"} {
		obj := marker("m", 1)
		obj.SetResourceVersion(rv)
		tr.observe(i, metrics.EventAdded, obj, t0.Add(time.Duration(i+1)*time.Millisecond))
	}
	tr.ack(w, nil, t0.Add(5*time.Millisecond))
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want the write's", len(ended))
	}
	got := map[string]string{}
	for _, ev := range ended[0].Events() {
		if ev.Name != "watchprobe.arrived" {
			continue
		}
		var path, rv string
		for _, a := range ev.Attributes {
			switch a.Key {
			case "watchprobe.path":
				path = a.Value.AsString()
			case "k8s.resource_version":
				rv = a.Value.AsString()
			}
		}
		got[path] = rv
	}
	if want := map[string]string{metrics.PathInformer: "11", metrics.PathWatch: "12"}; !maps.Equal(got, want) {
		t.Errorf("arrivals recorded by path: %v, want %v", got, want)
	}
}

// The resume point never moves back: after an out-of-order delivery the
// newest resourceVersion seen is where the watch resumes.
func TestNewerRV(t *testing.T) {
	for _, tc := range []struct{ current, seen, want string }{
		{"", "5", "5"},
		{"5", "7", "7"},
		{"7", "5", "7"},
		{"10", "9", "10"},
		{"abc", "5", "5"}, // not integers: the latest wins
	} {
		if got := newerRV(tc.current, tc.seen); got != tc.want {
			t.Errorf("newerRV(%q, %q) = %q, want %q", tc.current, tc.seen, got, tc.want)
		}
	}
}

// How a stream ended is read from the stream: the server's Status first,
// then how the body ended, whatever the lifetime; client is only the
// exporter's own shutdown.
func TestEndReason(t *testing.T) {
	const requested = 10 * time.Second
	expired := apierrors.NewResourceExpired("too old resource version: 1 (2)")
	throttled := apierrors.NewTooManyRequests("slow down", 1)
	for _, tc := range []struct {
		name     string
		status   error
		body     bodyEnd
		shutdown bool
		lifetime time.Duration
		want     string
	}{
		{"410 then the client stops it", expired, bodyClosed, false, time.Second, metrics.EndExpired},
		{"410 during shutdown", expired, bodyClosed, true, time.Second, metrics.EndExpired},
		{"410 then a clean end", expired, bodyEOF, false, time.Second, metrics.EndExpired},
		{"429 in the stream", throttled, bodyEOF, false, time.Second, metrics.EndTooManyRequests},
		{"other Status", apierrors.NewInternalError(errors.New("boom")), bodyEOF, false, time.Second, metrics.EndError},
		{"clean end at the timeout", nil, bodyEOF, false, requested, metrics.EndTimeout},
		{"clean end within the slack", nil, bodyEOF, false, requested - 400*time.Millisecond, metrics.EndTimeout},
		{"clean end after the timeout", nil, bodyEOF, false, 2 * requested, metrics.EndTimeout},
		{"clean end before the timeout", nil, bodyEOF, false, requested / 2, metrics.EndClosedEarly},
		{"reset before the timeout", nil, bodyReadError, false, time.Second, metrics.EndEOF},
		{"reset at the timeout", nil, bodyReadError, false, requested, metrics.EndEOF},
		{"reset after the timeout", nil, bodyReadError, false, 2 * requested, metrics.EndEOF},
		{"server ended it during shutdown", nil, bodyEOF, true, requested, metrics.EndTimeout},
		{"our shutdown", nil, bodyClosed, true, time.Second, metrics.EndClient},
		{"the client gave up on it", nil, bodyClosed, false, time.Second, metrics.EndError},
	} {
		if got := endReason(tc.status, tc.body, tc.shutdown, tc.lifetime, requested); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A path is stalled when acknowledged writes go unanswered past the bound,
// and no longer as soon as anything arrives, a bookmark included.
func TestStall(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.sweep(t0.Add(4 * time.Second))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Stalled); got != 0 {
		t.Fatalf("stalled before the bound: %g", got)
	}
	tr.sweep(t0.Add(6 * time.Second))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Stalled); got != 1 {
		t.Errorf("informer stalled = %g, want 1", got)
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Stalled); got != 0 {
		t.Errorf("watch stalled = %g, want 0: it answered", got)
	}
	tr.bookmark(informer, t0.Add(7*time.Second))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Stalled); got != 0 {
		t.Errorf("informer still stalled after a bookmark")
	}
}

// Deletes are matched by name: the deleted object carries the sequence
// number of the last update, not of the delete.
func TestDeleteMatchedByName(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 3}, metrics.EventDeleted, noSpan, at(0))
	tr.ack(w, nil, t0)
	if !tr.observe(watchIdx, metrics.EventDeleted, marker("m", 2), t0.Add(time.Millisecond)) {
		t.Fatal("the delete was not matched")
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Observed[metrics.EventDeleted]); got != 1 {
		t.Errorf("observed deletes = %g, want 1", got)
	}
}

// Objects that belong to no write of this tracker are ignored, also one
// with the sequence number of a write of another marker.
func TestForeignObjectsIgnored(t *testing.T) {
	tr, s := newTestTracker(t)
	tr.ack(tr.expect(tr.newCycle(), writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
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
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.ack(w, errors.New("connection refused"), t0)
	tr.closeCycle(c)
	tr.sweep(t0.Add(time.Hour))
	for _, path := range Paths {
		if got := missed(s.Paths[path]); got != 0 {
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
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventDeleted, noSpan, at(0))
	tr.ack(w, nil, t0)
	tr.sweep(t0.Add(2 * time.Second))
	tr.sweep(t0.Add(tr.ledger.retain + 3*time.Second))
	if len(tr.ledger.byKey) != 0 || len(tr.ledger.deletes) != 0 || len(tr.ledger.order) != 0 || tr.ledger.settled.n != 0 {
		t.Errorf("still holding %d writes (%d by key, %d deletes, %d settled) after the retention", len(tr.ledger.order), len(tr.ledger.byKey), len(tr.ledger.deletes), tr.ledger.settled.n)
	}
}

// probe_success shows the newest settled cycle: an older cycle whose miss
// settles after a newer clean one does not overwrite it.
func TestSuccessFollowsNewestCycle(t *testing.T) {
	tr, s := newTestTracker(t)
	old := tr.newCycle()
	tr.ack(tr.expect(old, writeKey{"a", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.closeCycle(old)
	fresh := tr.newCycle()
	w := tr.expect(fresh, writeKey{"b", 2}, metrics.EventAdded, noSpan, at(500*time.Millisecond))
	tr.ack(w, nil, t0)
	for i := range Paths {
		tr.observe(i, metrics.EventAdded, marker("b", 2), t0.Add(501*time.Millisecond))
	}
	tr.closeCycle(fresh)
	if got := testutil.ToFloat64(s.Success); got != 1 {
		t.Fatalf("probe_success = %g after the newest cycle succeeded", got)
	}
	tr.sweep(t0.Add(1200 * time.Millisecond)) // the old cycle's write is missed now
	if got := testutil.ToFloat64(s.Success); got != 1 {
		t.Errorf("probe_success = %g: the older cycle's failure overwrote the newer success", got)
	}
	if got := missed(s.Paths[metrics.PathInformer]); got != 1 {
		t.Errorf("the older cycle's miss was not counted: %g", got)
	}
}

// A relist counts once however many attempts it takes, and an expiry seen
// during it belongs to it: the next relist is not labelled by it.
func TestRelistAttempts(t *testing.T) {
	tr, _ := newTestTracker(t)
	m := metrics.NewProbe(prometheus.NewRegistry())
	tr.judge.paths[informer].info.series = m.ForProbe("p", Paths).Paths[metrics.PathInformer]
	p := newPathBase(pathEnv{handle: handle{tr, informer}, watchTimeout: time.Minute, logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	relists := func(reason string) float64 {
		return testutil.ToFloat64(m.Relists.WithLabelValues("p", metrics.PathInformer, "", reason, metrics.ModeWatchList)) +
			testutil.ToFloat64(m.Relists.WithLabelValues("p", metrics.PathInformer, "", reason, metrics.ModeList))
	}
	p.relistAttempt(metrics.ModeWatchList)
	p.relistAttempt(metrics.ModeList) // client-go's fallback: the same relist
	p.relistAttempt(metrics.ModeWatchList)
	p.relistCompleted(metrics.ModeWatchList)
	p.setNextReason(metrics.RelistExpired)
	p.relistAttempt(metrics.ModeWatchList)
	p.setNextReason(metrics.RelistExpired) // a 410 inside that relist
	p.relistCompleted(metrics.ModeList)
	p.relistAttempt(metrics.ModeList)
	for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistExpired: 1, metrics.RelistError: 1} {
		if got := relists(reason); got != want {
			t.Errorf("relists (%s) = %g, want %g", reason, got, want)
		}
	}
}

// The apiserver's share is an apiserver path's arrival minus the etcd
// path's, once per write and path, whichever arrives first and whether the
// response came before or after; a late arrival is left out.
func TestAPIServerLag(t *testing.T) {
	paths := []string{metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd}
	s := metrics.NewProbe(prometheus.NewRegistry()).ForProbe("p", paths)
	tr := newTracker(paths, s, time.Second, 5*time.Second, metricsSink{s})
	for i := range paths {
		tr.live(i, t0.Add(-time.Hour))
	}
	const etcdIdx = 2
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(3*time.Millisecond))
	tr.observe(etcdIdx, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
	tr.ack(w, nil, t0.Add(4*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(1500*time.Millisecond)) // late
	w = tr.expect(c, writeKey{"m", 2}, metrics.EventModified, noSpan, at(10*time.Millisecond))
	tr.ack(w, nil, t0.Add(11*time.Millisecond))
	tr.observe(informer, metrics.EventModified, marker("m", 2), t0.Add(15*time.Millisecond))
	tr.observe(etcdIdx, metrics.EventModified, marker("m", 2), t0.Add(12*time.Millisecond))
	for path, want := range map[string]struct {
		n   uint64
		sum float64
	}{metrics.PathWatch: {1, 0.001}, metrics.PathInformer: {1, 0.003}} {
		h := histogram(t, s.Paths[path].APIServerLag)
		if h.GetSampleCount() != want.n || math.Abs(h.GetSampleSum()-want.sum) > 1e-9 {
			t.Errorf("%s: lag count %d sum %g, want %d and %g", path, h.GetSampleCount(), h.GetSampleSum(), want.n, want.sum)
		}
	}
	if s.Paths[metrics.PathEtcd].APIServerLag != nil {
		t.Error("the etcd path has an apiserver lag of its own")
	}
}

// An ERROR event that client-go's StreamWatcher made up to report its own
// read error or cancellation is not the server's Status: the stream's end
// comes from how its body ended.
func TestClientReportedStatusIgnored(t *testing.T) {
	reporter := apierrors.NewClientErrorReporter(500, "GET", "ClientWatchDecoding")
	made := watch.Event{Type: watch.Error, Object: reporter.AsObject(errors.New("unable to decode an event from the watch stream: context canceled"))}
	server := watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version: 1 (2)").ErrStatus}
	for _, tc := range []struct {
		name string
		end  bodyEnd
		ev   watch.Event
		want bool // taken as the server's Status
	}{
		{"server 410, body open", bodyOpen, server, true},
		{"server 410, body already at its clean end", bodyEOF, server, true},
		{"made up after the client closed the body", bodyClosed, made, false},
		{"made up after a read error", bodyReadError, made, false},
		{"made up, body state not yet recorded", bodyOpen, made, false},
	} {
		s := &stream{path: &pathBase{nextReason: metrics.RelistError}}
		if tc.end != bodyOpen {
			s.body.ended(tc.end, nil)
		}
		s.errorEvent(tc.ev)
		if got := s.status != nil; got != tc.want {
			t.Errorf("%s: taken as the server's = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A path pinned to an apiserver that appears mid-run owes nothing for the
// writes sent before it existed, and everything for those sent after.
func TestAddedPathExpectsOnlyLaterWrites(t *testing.T) {
	tr, s := newTestTracker(t)
	m := metrics.NewProbe(prometheus.NewRegistry())
	c := tr.newCycle()
	before := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.ack(before, nil, t0)

	series := m.ForPath("p", metrics.PathAPIServer, "10.0.0.1:6443", false)
	slot := tr.addPath(metrics.PathAPIServer, "10.0.0.1:6443", series, t0)
	tr.live(slot, t0)
	// Its initial list shows the marker already there: not a delivery.
	tr.observe(slot, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	if !before.done {
		t.Fatal("a write sent before the path existed waits for it")
	}
	if got := testutil.ToFloat64(series.Observed[metrics.EventAdded]); got != 0 {
		t.Errorf("new path observed %g writes sent before it existed, want 0", got)
	}

	after := tr.expect(c, writeKey{"m", 2}, metrics.EventModified, noSpan, at(10*time.Millisecond))
	tr.ack(after, nil, t0.Add(11*time.Millisecond))
	tr.observe(informer, metrics.EventModified, marker("m", 2), t0.Add(12*time.Millisecond))
	tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(12*time.Millisecond))
	if after.done {
		t.Fatal("a write sent after the path was added settled without it")
	}
	tr.sweep(t0.Add(2 * time.Second))
	if got, want := missed(series), 1.0; got != want {
		t.Errorf("new path missed %g, want %g", got, want)
	}
	if got := missed(s.Paths[metrics.PathInformer]); got != 0 {
		t.Errorf("informer missed %g, want 0", got)
	}
}

// Removing a path settles the writes that waited only for it, without
// counting them missed; a path that later takes its slot owes nothing for
// them either.
func TestRemovedPathReleasesItsWrites(t *testing.T) {
	tr, _ := newTestTracker(t)
	m := metrics.NewProbe(prometheus.NewRegistry())
	gone := m.ForPath("p", metrics.PathAPIServer, "10.0.0.1:6443", false)
	slot := tr.addPath(metrics.PathAPIServer, "10.0.0.1:6443", gone, t0.Add(-time.Hour))
	tr.live(slot, t0)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.ack(w, nil, t0)
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	if w.done {
		t.Fatal("settled before the pinned path delivered")
	}
	tr.removePath(slot)
	if !w.done {
		t.Fatal("still waiting for a removed path")
	}

	next := m.ForPath("p", metrics.PathAPIServer, "10.0.0.2:6443", false)
	if got := tr.addPath(metrics.PathAPIServer, "10.0.0.2:6443", next, t0); got != slot {
		t.Fatalf("new path took slot %d, want the free slot %d", got, slot)
	}
	tr.observe(slot, metrics.EventAdded, marker("m", 1), t0.Add(2*time.Millisecond))
	tr.sweep(t0.Add(2 * time.Second))
	if got := testutil.ToFloat64(next.Observed[metrics.EventAdded]) + missed(next) + missed(gone); got != 0 {
		t.Errorf("observed+missed on the removed and the new path = %g, want 0", got)
	}
}

// A path added mid-run owes nothing for writes sent before its first stream
// is live: its initial list holds them, and the watch from the list's
// version never delivers them. A path that never goes live owes every
// write sent once syncTimeout has passed, so an apiserver that never
// answers still shows as misses.
func TestAddedPathOwesOnlyOnceLive(t *testing.T) {
	tr, _ := newTestTracker(t)
	m := metrics.NewProbe(prometheus.NewRegistry())
	slow := m.ForPath("p", metrics.PathAPIServer, "10.0.0.1:6443", false)
	dead := m.ForPath("p", metrics.PathAPIServer, "10.0.0.2:6443", false)
	slowSlot := tr.addPath(metrics.PathAPIServer, "10.0.0.1:6443", slow, t0)
	tr.addPath(metrics.PathAPIServer, "10.0.0.2:6443", dead, t0)
	c := tr.newCycle()
	send := func(seq uint64, at time.Duration) {
		w := tr.expect(c, writeKey{"m", seq}, metrics.EventModified, noSpan, func() time.Time { return t0.Add(at) })
		tr.ack(w, nil, t0.Add(at))
		tr.observe(informer, metrics.EventModified, marker("m", seq), t0.Add(at+time.Millisecond))
		tr.observe(watchIdx, metrics.EventModified, marker("m", seq), t0.Add(at+time.Millisecond))
	}
	send(1, 100*time.Millisecond) // while both are still listing
	tr.live(slowSlot, t0.Add(time.Second))
	send(2, 2*time.Second)             // the slow path is live now
	send(3, syncTimeout+5*time.Second) // the dead one has had its chance
	tr.sweep(t0.Add(syncTimeout + time.Minute))
	if got := missed(slow); got != 2 {
		t.Errorf("slow path missed %g, want 2 (the writes after it went live)", got)
	}
	if got := missed(dead); got != 1 {
		t.Errorf("dead path missed %g, want 1 (the write after syncTimeout)", got)
	}
}

// A write is timed from the transport's stamp of the attempt the apiserver
// took, stored without the lock, not from expect's: the client's own work
// before its transport (a credential plugin, a rate limiter) is not the
// apiserver's. The stamp counts for arrivals judged before and after it is
// folded in, and for the sweep's deadline.
func TestTransportStampTimesWrite(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.attempted(w, t0.Add(time.Second))   // 1 s in the client before its transport
	tr.attempted(w, t0.Add(time.Second/2)) // an earlier stamp never wins
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Second+2*time.Millisecond))
	tr.sweep(t0.Add(time.Second + 3*time.Millisecond))
	tr.ack(w, nil, t0.Add(time.Second+4*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Second+5*time.Millisecond))
	for idx, want := range map[int]float64{watchIdx: 0.002, informer: 0.005} {
		h := histogram(t, s.Paths[[]string{metrics.PathInformer, metrics.PathWatch}[idx]].Latency[metrics.EventAdded])
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
		c := tr.newCycle()
		w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
		if refused {
			tr.attempted(w, t0) // refused with 429
		}
		tr.sweep(t0.Add(time.Second + sweepGrace + time.Millisecond)) // overdue on that stamp
		tr.attempted(w, t0.Add(1500*time.Millisecond))                // the attempt the apiserver took
		tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(1505*time.Millisecond))
		tr.ack(w, nil, t0.Add(1510*time.Millisecond))
		ws, is := s.Paths[metrics.PathWatch], s.Paths[metrics.PathInformer]
		if missed(ws) != 0 || missed(is) != 0 {
			t.Errorf("refused first %v: missed at the response: watch %g, informer %g, want none", refused, missed(ws), missed(is))
		}
		tr.sweep(t0.Add(2700 * time.Millisecond))
		if missed(ws) != 1 || missed(is) != 0 || testutil.ToFloat64(is.Late) != 0 {
			t.Errorf("refused first %v: after the deadline, missed: watch %g (want 1), informer %g, informer late %g (want 0)",
				refused, missed(ws), missed(is), testutil.ToFloat64(is.Late))
		}
	}
}

// The sweep judges a write's deadline from the transport's stamp.
func TestSweepUsesTransportStamp(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.attempted(w, t0.Add(500*time.Millisecond))
	tr.sweep(t0.Add(1200 * time.Millisecond)) // due by expect's stamp, not by the transport's
	tr.ack(w, nil, t0.Add(1210*time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(1220*time.Millisecond))
	ws := s.Paths[metrics.PathWatch]
	if missed(ws) != 0 || testutil.ToFloat64(ws.Late) != 0 {
		t.Errorf("missed %g, late %g, want neither", missed(ws), testutil.ToFloat64(ws.Late))
	}
}

// lost sums a path's lost counter over its reasons.
func lost(ps *metrics.PathSeries) float64 {
	var n float64
	for _, c := range ps.Lost {
		n += testutil.ToFloat64(c)
	}
	return n
}

// pendingMisses counts, on path i, the writes missed there that have
// neither arrived since nor been counted lost: what the deadline verdict
// has said and the lost horizon not yet.
func pendingMisses(tr *tracker, i int) float64 {
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
func wantMissedAccounted(t *testing.T, tr *tracker, s *metrics.ProbeSeries) {
	t.Helper()
	for i, path := range Paths {
		ps := s.Paths[path]
		if m, l, lo, p := missed(ps), testutil.ToFloat64(ps.Late), lost(ps), pendingMisses(tr, i); m != l+lo+p {
			t.Errorf("%s: missed %g != late %g + lost %g + pending %g", path, m, l, lo, p)
		}
	}
}

// An event delivered after its deadline on a stream that stayed up is
// missed and late, never lost: a slow second of etcd is not a data loss.
// One never delivered is counted lost, once, when the horizon passes; a
// delivery after that is neither late nor observed.
func TestLateIsNotLost(t *testing.T) {
	tr, s := newTestTracker(t) // deadline 1s, lost after 1m
	c := tr.newCycle()
	held := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.ack(held, nil, t0)
	dropped := tr.expect(c, writeKey{"m", 2}, metrics.EventModified, noSpan, at(0))
	tr.ack(dropped, nil, t0)
	tr.closeCycle(c)
	for _, seq := range []uint64{1, 2} {
		tr.observe(informer, eventOf(seq), marker("m", seq), t0.Add(5*time.Millisecond))
	}
	tr.sweep(t0.Add(2 * time.Second)) // both missed on the watch path
	wat := s.Paths[metrics.PathWatch]
	wantCounts(t, []count{
		{"watch missed silently", testutil.ToFloat64(wat.Missed[metrics.MissedSilent]), 2},
		{"watch lost", lost(wat), 0},
	})
	wantMissedAccounted(t, tr, s)

	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(9*time.Second)) // held 9 s
	tr.sweep(t0.Add(59 * time.Second))
	wantCounts(t, []count{
		{"watch late", testutil.ToFloat64(wat.Late), 1},
		{"watch lost before the horizon", lost(wat), 0},
	})
	wantMissedAccounted(t, tr, s)

	tr.sweep(t0.Add(61 * time.Second))
	tr.sweep(t0.Add(62 * time.Second))
	wantCounts(t, []count{
		{"watch lost silently", testutil.ToFloat64(wat.Lost[metrics.MissedSilent]), 1},
		{"watch lost", lost(wat), 1},
		{"watch late", testutil.ToFloat64(wat.Late), 1},
		{"informer lost", lost(s.Paths[metrics.PathInformer]), 0},
	})
	wantMissedAccounted(t, tr, s)

	observed := testutil.ToFloat64(wat.Observed[metrics.EventModified])
	if !tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(90*time.Second)) {
		t.Fatal("a delivery after the horizon, within the retention, was not matched")
	}
	wantCounts(t, []count{
		{"watch late after lost", testutil.ToFloat64(wat.Late), 1},
		{"watch lost after the delivery", lost(wat), 1},
		{"watch observed modified", testutil.ToFloat64(wat.Observed[metrics.EventModified]), observed},
	})
	wantMissedAccounted(t, tr, s)
}

// A delivery past the horizon that comes before the sweep has judged the
// write is lost all the same: the verdict does not depend on when the
// sweep runs.
func TestArrivalPastHorizonBeforeSweepIsLost(t *testing.T) {
	tr, s := newTestTracker(t)
	c := tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(5*time.Millisecond))
	tr.closeCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(65*time.Second))
	tr.sweep(t0.Add(66 * time.Second))
	wat := s.Paths[metrics.PathWatch]
	wantCounts(t, []count{
		{"watch lost", lost(wat), 1},
		{"watch late", testutil.ToFloat64(wat.Late), 0},
		{"watch observed", testutil.ToFloat64(wat.Observed[metrics.EventAdded]), 0},
		{"watch missed", missed(wat), 1},
	})
	wantMissedAccounted(t, tr, s)

	// The horizon counts from the write's answer, by which it was
	// committed: an event that arrives before a slow answer (a webhook
	// holding the write for longer than lost_after) was delivered, late
	// at worst; one that comes lost_after after a slow answer is lost.
	c = tr.newCycle()
	w := tr.expect(c, writeKey{"n", 2}, metrics.EventAdded, noSpan, at(100*time.Second))
	tr.observe(informer, metrics.EventAdded, marker("n", 2), t0.Add(169*time.Second))
	tr.observe(watchIdx, metrics.EventAdded, marker("n", 2), t0.Add(170*time.Second))
	tr.ack(w, nil, t0.Add(171*time.Second))
	w = tr.expect(c, writeKey{"n", 3}, metrics.EventModified, noSpan, at(171*time.Second))
	tr.observe(informer, metrics.EventModified, marker("n", 3), t0.Add(200*time.Second))
	tr.ack(w, nil, t0.Add(200*time.Second))
	tr.observe(watchIdx, metrics.EventModified, marker("n", 3), t0.Add(261*time.Second))
	tr.closeCycle(c)
	wantCounts(t, []count{
		{"watch lost", lost(wat), 2},
		{"watch late", testutil.ToFloat64(wat.Late), 1},
		{"informer late", testutil.ToFloat64(s.Paths[metrics.PathInformer].Late), 2},
		{"informer lost", lost(s.Paths[metrics.PathInformer]), 0},
	})
	wantMissedAccounted(t, tr, s)
}

// A lost write's reason is what the path went through between its send
// and the horizon: a relist (after which only final state comes), or no
// stream at all; a stream that stayed up and did not deliver is silent.
func TestLostReason(t *testing.T) {
	sec := func(d time.Duration) time.Time { return t0.Add(d * time.Second) }
	for _, tc := range []struct {
		name string
		path func(tr *tracker)
		want string
	}{
		{"streaming all along", func(*tracker) {}, metrics.MissedSilent},
		{"resumed after an end", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndTimeout, time.Minute, nil, sec(20))
			tr.live(informer, sec(21))
		}, metrics.MissedSilent},
		{"relisted after the deadline", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndExpired, time.Minute, nil, sec(20))
			tr.relisted(informer, metrics.RelistExpired, metrics.ModeWatchList, sec(20))
			tr.live(informer, sec(21))
		}, metrics.MissedRelist},
		{"down at the horizon", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, sec(30))
		}, metrics.MissedUnavailable},
		// A resume from the resourceVersion owes what the stream missed:
		// failures before it explain no loss once it is live again.
		{"requests failed, then resumed", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, sec(30))
			tr.requestFailed(informer, metrics.RequestWatch, errors.New("connection refused"), sec(31))
			tr.live(informer, sec(40))
		}, metrics.MissedSilent},
		// Live again too shortly before the horizon to have replayed it.
		{"resumed within the deadline of the horizon", func(tr *tracker) {
			tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, sec(30))
			tr.live(informer, t0.Add(59500*time.Millisecond))
		}, metrics.MissedUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, s := newTestTracker(t)
			c := tr.newCycle()
			tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
			tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
			tr.closeCycle(c)
			tr.sweep(sec(2))
			tc.path(tr)
			tr.sweep(sec(61))
			ps := s.Paths[metrics.PathInformer]
			for reason, c := range ps.Lost {
				want := 0.0
				if reason == tc.want {
					want = 1
				}
				if got := testutil.ToFloat64(c); got != want {
					t.Errorf("lost (%s) = %g, want %g", reason, got, want)
				}
			}
			wantMissedAccounted(t, tr, s)
		})
	}
}

// A settled write is not forgotten before it has been judged for loss,
// even when the retention is the horizon itself.
func TestLostJudgedBeforeRetentionDrops(t *testing.T) {
	tr, s := newTestTracker(t)
	tr.ledger.retain, tr.judge.lostAfter = 10*time.Second, time.Hour // the horizon is the retention
	c := tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.closeCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
	tr.sweep(t0.Add(20 * time.Second))
	if got := lost(s.Paths[metrics.PathWatch]); got != 1 {
		t.Errorf("watch lost = %g, want 1", got)
	}
	if tr.ledger.settled.n != 0 {
		t.Errorf("%d settled writes kept past the retention", tr.ledger.settled.n)
	}
}

// A stall is a stream that is open and silent: a path whose requests fail
// is down, not stalled, however long writes go unanswered, and a path that
// starts again has stallAfter to answer. A stream that ends and resumes
// from its resourceVersion is the same silent stream: its stall goes on.
func TestStallOnlyWhileLive(t *testing.T) {
	tr, s := newTestTracker(t) // stall after 5s
	inf := s.Paths[metrics.PathInformer]
	tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, t0.Add(-time.Second))
	tr.requestFailed(informer, metrics.RequestList, errors.New("forbidden"), t0)
	c := tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.closeCycle(c)
	tr.sweep(t0.Add(30 * time.Second))
	wantCounts(t, []count{
		{"informer stalled while down", testutil.ToFloat64(inf.Stalled), 0},
		{"informer up", testutil.ToFloat64(inf.Up), 0},
	})
	tr.live(informer, t0.Add(40*time.Second))
	tr.sweep(t0.Add(44 * time.Second))
	if got := testutil.ToFloat64(inf.Stalled); got != 0 {
		t.Errorf("stalled %g within stallAfter of the path's start", got)
	}
	tr.sweep(t0.Add(46 * time.Second))
	if got := testutil.ToFloat64(inf.Stalled); got != 1 {
		t.Errorf("stalled = %g, want 1: the stream has been open and silent past stallAfter", got)
	}
	tr.streamEnded(informer, metrics.EndTimeout, time.Minute, nil, t0.Add(47*time.Second))
	tr.live(informer, t0.Add(47100*time.Millisecond))
	tr.sweep(t0.Add(48 * time.Second))
	if got := testutil.ToFloat64(inf.Stalled); got != 1 {
		t.Errorf("stalled = %g after a resume from the resourceVersion, want still 1", got)
	}
	tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, t0.Add(49*time.Second))
	tr.requestFailed(informer, metrics.RequestWatch, errors.New("connection refused"), t0.Add(49*time.Second))
	if got := testutil.ToFloat64(inf.Stalled); got != 0 {
		t.Errorf("stalled = %g once its requests fail, want 0: the path is down", got)
	}
}

// A silent stream cut and resumed every few seconds, faster than
// stallAfter, is still stalled: each resume is the same stream to a client.
func TestStallAcrossShortStreams(t *testing.T) {
	tr, s := newTestTracker(t) // stall after 5s
	inf := s.Paths[metrics.PathInformer]
	c := tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.closeCycle(c)
	for sec := time.Duration(2); sec <= 8; sec += 2 {
		tr.streamEnded(informer, metrics.EndEOF, 2*time.Second, nil, t0.Add(sec*time.Second))
		tr.live(informer, t0.Add(sec*time.Second+10*time.Millisecond))
		tr.sweep(t0.Add(sec*time.Second + 1500*time.Millisecond))
	}
	if got := testutil.ToFloat64(inf.Stalled); got != 1 {
		t.Errorf("stalled = %g, want 1: nothing arrived for 8 s on streams resumed every 2 s", got)
	}
}

// A path that has never been live (its first list still under way, or
// refused) misses what is due as unavailable, whether or not it went live
// before the deadline: it was not there to receive it, which is not a
// relist that lost events.
func TestMissedBeforeFirstLiveUnavailable(t *testing.T) {
	ms := func(d time.Duration) time.Time { return t0.Add(d * time.Millisecond) }
	for _, tc := range []struct {
		name string
		path func(tr *tracker)
	}{
		{"initial relist under way when due", func(tr *tracker) {
			tr.relisted(informer, metrics.RelistInitial, metrics.ModeWatchList, ms(-100))
		}},
		{"went live between send and due", func(tr *tracker) {
			tr.relisted(informer, metrics.RelistInitial, metrics.ModeWatchList, ms(-100))
			tr.live(informer, ms(500))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := metrics.NewProbe(prometheus.NewRegistry())
			s := m.ForProbe("p", Paths)
			tr := newTracker(Paths, s, time.Second, 5*time.Second, metricsSink{s})
			tr.ledger.base = t0.Add(-24 * time.Hour)
			tr.live(watchIdx, t0.Add(-time.Hour))
			tc.path(tr)
			c := tr.newCycle()
			tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
			tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), ms(1))
			tr.sweep(ms(1500))
			ps := s.Paths[metrics.PathInformer]
			wantCounts(t, []count{
				{"missed unavailable", testutil.ToFloat64(ps.Missed[metrics.MissedUnavailable]), 1},
				{"missed relist", testutil.ToFloat64(ps.Missed[metrics.MissedRelist]), 0},
			})
			// And lost as unavailable too, once the horizon has passed.
			tr.sweep(t0.Add(2 * time.Minute))
			wantCounts(t, []count{
				{"lost unavailable", testutil.ToFloat64(ps.Lost[metrics.MissedUnavailable]), 1},
				{"lost relist", testutil.ToFloat64(ps.Lost[metrics.MissedRelist]), 0},
			})
		})
	}
}

// A path removed (its apiserver left) while writes it missed are neither
// late nor lost yet counts them lost as unavailable, once: its counts add
// up for as long as its series stay.
func TestRemovedPathLosesWhatItMissed(t *testing.T) {
	tr, _ := newTestTracker(t)
	m := metrics.NewProbe(prometheus.NewRegistry())
	gone := m.ForPath("p", metrics.PathAPIServer, "10.0.0.1:6443", false)
	slot := tr.addPath(metrics.PathAPIServer, "10.0.0.1:6443", gone, t0.Add(-time.Hour))
	tr.live(slot, t0.Add(-time.Minute))
	c := tr.newCycle()
	for seq := uint64(1); seq <= 2; seq++ {
		tr.ack(tr.expect(c, writeKey{"m", seq}, eventOf(seq), noSpan, at(0)), nil, t0)
		tr.observe(informer, eventOf(seq), marker("m", seq), t0.Add(time.Millisecond))
		tr.observe(watchIdx, eventOf(seq), marker("m", seq), t0.Add(time.Millisecond))
	}
	tr.closeCycle(c)
	tr.sweep(t0.Add(2 * time.Second)) // both missed on the pinned path, settled
	c = tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"m", 3}, metrics.EventModified, noSpan, at(3*time.Second)), nil, t0.Add(3*time.Second))
	tr.sweep(t0.Add(5 * time.Second)) // missed, still in order behind its open cycle
	tr.removePath(slot)
	tr.removePath(slot) // twice: nothing left to lose
	wantCounts(t, []count{
		{"missed on the removed path", missed(gone), 3},
		{"lost unavailable on the removed path", testutil.ToFloat64(gone.Lost[metrics.MissedUnavailable]), 3},
		{"lost on the removed path", lost(gone), 3},
	})
}

// A reconnect that takes longer than stallAfter, with writes acknowledged
// meanwhile, is no stall: time without a stream is not silence of one, and
// the resumed stream has the deadline to replay what it owes.
func TestNoStallRightAfterASlowResume(t *testing.T) {
	tr, s := newTestTracker(t) // stall after 5s, deadline 1s
	inf := s.Paths[metrics.PathInformer]
	tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, t0.Add(-time.Second))
	c := tr.newCycle()
	tr.ack(tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0)), nil, t0)
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.closeCycle(c)
	tr.live(informer, t0.Add(10*time.Second)) // a plain resume after 11 s
	tr.sweep(t0.Add(10*time.Second + time.Millisecond))
	tr.sweep(t0.Add(12 * time.Second))
	if got := testutil.ToFloat64(inf.Stalled); got != 0 {
		t.Errorf("stalled = %g 2 s after a slow resume, want 0", got)
	}
	tr.sweep(t0.Add(15*time.Second + time.Millisecond))
	if got := testutil.ToFloat64(inf.Stalled); got != 1 {
		t.Errorf("stalled = %g, want 1: live and silent for 5 s since the resume", got)
	}
}

// Outages are kept for as long as a write they explain may still be
// judged: a relist around a write answered late, and lost only at its
// horizon, still explains the loss however long ago it ended.
func TestOutagesKeptUntilJudged(t *testing.T) {
	tr, s := newTestTracker(t) // deadline 1s
	tr.ledger.retain, tr.judge.lostAfter = 10*time.Second, 10*time.Second
	tr.relisted(informer, metrics.RelistExpired, metrics.ModeList, t0.Add(-500*time.Millisecond))
	tr.live(informer, t0.Add(200*time.Millisecond))
	c := tr.newCycle()
	w := tr.expect(c, writeKey{"m", 1}, metrics.EventAdded, noSpan, at(0))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(2500*time.Millisecond))
	tr.ack(w, nil, t0.Add(3*time.Second)) // a slow answer: a webhook
	tr.closeCycle(c)
	tr.streamEnded(informer, metrics.EndTimeout, time.Minute, nil, t0.Add(5*time.Second))
	tr.live(informer, t0.Add(5*time.Second+time.Millisecond)) // a plain resume
	for sec := time.Duration(4); sec <= 14; sec++ {
		tr.sweep(t0.Add(sec * time.Second))
	}
	ps := s.Paths[metrics.PathInformer]
	wantCounts(t, []count{
		{"informer missed relist", testutil.ToFloat64(ps.Missed[metrics.MissedRelist]), 1},
		{"informer lost relist", testutil.ToFloat64(ps.Lost[metrics.MissedRelist]), 1},
		{"informer lost silently", testutil.ToFloat64(ps.Lost[metrics.MissedSilent]), 0},
	})
}
