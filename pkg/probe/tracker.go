package probe

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// writeKey identifies one marker write: the marker's name (unique per run,
// replica and cycle) and the writer's sequence number.
type writeKey struct {
	name string
	seq  uint64
}

// pendingWrite is one write whose events the paths are expected to deliver.
type pendingWrite struct {
	key   writeKey
	event string // the watch event this write must cause: added, modified or deleted
	// sent is taken just before the request leaves, with Go's monotonic
	// reading, so arrival.Sub(sent) is immune to wall-clock steps and is
	// positive even when the event beats the write's response.
	sent   time.Time
	acked  bool // the apiserver answered with success
	failed bool // the apiserver answered with an error, or none came
	done   bool // every path has seen or missed it, or it failed
	// Indexed by path; arrays rather than slices so that a write is one
	// allocation.
	seen      [maxPaths]bool
	seenEpoch [maxPaths]uint64 // the path's relist epoch at the latest delivery
	missed    [maxPaths]bool
	cycle     *cycle
	// span covers the write from just before it is sent until it is settled
	// on every path; arrivals, misses and anomalies are its events.
	span trace.Span
}

// cycle groups the writes of one create-update-delete cycle, so the probe's
// success can be judged once all of them are settled.
type cycle struct {
	n       uint64 // cycles start in increasing order
	open    bool   // the writer may still add writes
	pending int
	ok      bool
}

// pathState is what the tracker knows about one path's streams.
type pathState struct {
	series *metrics.PathSeries
	// epoch counts relists. A write delivered again in a later epoch is a
	// replay, which a relist is expected to cause; in the same epoch it is a
	// duplicate, which nothing should cause.
	epoch uint64
	// lastSeq is the highest sequence number delivered in this epoch; a
	// lower one arriving after it is out of order.
	lastSeq uint64
	// up is true while a watch stream is open; changedAt is when a stream
	// last started or ended or a relist began. A miss in a window with such a
	// change is explained by it.
	up        bool
	changedAt time.Time
	// unansweredSince is the send time of the oldest acknowledged write that
	// nothing on this path has answered: no event, no bookmark since.
	unansweredSince time.Time
	stalled         bool
}

// tracker matches events arriving on each path to the writes that caused
// them and judges what they show: latency, misses and their reason,
// duplicates, replays, reordering, lateness and stalls. It takes every time
// as an argument so that its logic can be tested without a clock.
type tracker struct {
	mu         sync.Mutex
	paths      []string
	state      []*pathState
	series     *metrics.ProbeSeries
	deadline   time.Duration
	stallAfter time.Duration
	// retain keeps settled writes so a late or repeated arrival is still
	// matched and judged rather than mistaken for a foreign object.
	retain   time.Duration
	byKey    map[writeKey]*pendingWrite
	deletes  map[string]*pendingWrite
	logger   *slog.Logger
	tracer   trace.Tracer
	recorder Recorder // nil unless benchmarking
	// cycles counts cycles started; judged is the newest cycle whose result
	// probe_success shows. An older cycle settling later (its misses wait
	// for the deadline, which may be longer than the interval) is in the
	// counters, but must not overwrite the newer cycle's verdict.
	cycles, judged uint64
}

// maxPaths bounds the paths a probe can have (informer and watch).
const maxPaths = 2

func newTracker(paths []string, series *metrics.ProbeSeries, deadline, stallAfter time.Duration, tracer trace.Tracer, logger *slog.Logger) *tracker {
	t := &tracker{
		tracer:     tracer,
		paths:      paths,
		series:     series,
		deadline:   deadline,
		stallAfter: stallAfter,
		retain:     max(3*deadline, 5*time.Minute),
		byKey:      map[writeKey]*pendingWrite{},
		deletes:    map[string]*pendingWrite{},
		logger:     logger,
	}
	for _, p := range paths {
		t.state = append(t.state, &pathState{series: series.Paths[p]})
	}
	return t
}

func (t *tracker) newCycle() *cycle {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cycles++
	return &cycle{n: t.cycles, open: true, ok: true}
}

// closeCycle tells the tracker no more writes join c.
func (t *tracker) closeCycle(c *cycle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.open = false
	t.settleCycle(c)
}

// expect registers a write before it is sent, so that an event arriving
// before the write's response still finds it. It stamps the send time as its
// very last step; the caller sends immediately after. span is the write's
// span, which the tracker ends when the write settles.
func (t *tracker) expect(c *cycle, key writeKey, event string, span trace.Span, now func() time.Time) *pendingWrite {
	w := &pendingWrite{
		key:   key,
		event: event,
		cycle: c,
		span:  span,
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byKey[key] = w
	if event == metrics.EventDeleted {
		t.deletes[key.name] = w
	}
	c.pending++
	w.sent = now()
	return w
}

// ack records the apiserver's answer to w.
func (t *tracker) ack(w *pendingWrite, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		w.failed = true
		w.cycle.ok = false
		w.span.RecordError(err)
		w.span.SetStatus(codes.Error, "write failed")
		t.settle(w)
		return
	}
	w.acked = true
	for i, ps := range t.state {
		if !w.seen[i] && ps.unansweredSince.IsZero() {
			ps.unansweredSince = w.sent
		}
	}
	if t.allSeen(w) {
		t.settle(w)
	}
}

// observe matches one event that arrived on path i. It returns false for an
// event that belongs to no write this tracker knows.
func (t *tracker) observe(i int, event string, obj metav1.Object, arrival time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w *pendingWrite
	if event == metrics.EventDeleted {
		// A deleted object carries its last state, so the delete is found by
		// name rather than by the sequence number on the object.
		w = t.deletes[obj.GetName()]
	} else if seq, ok := seqOf(obj); ok {
		w = t.byKey[writeKey{obj.GetName(), seq}]
	}
	if w == nil {
		return false
	}
	ps := t.state[i]
	t.touch(ps, arrival)
	pathAttr := attribute.String("watchprobe.path", t.paths[i])
	if w.seen[i] {
		if ps.epoch > w.seenEpoch[i] {
			ps.series.Replayed.Inc()
			w.seenEpoch[i] = ps.epoch
			t.spanEvent(w, "watchprobe.replayed", arrival, pathAttr)
		} else {
			ps.series.Duplicate.Inc()
			t.spanEvent(w, "watchprobe.duplicate", arrival, pathAttr)
			t.logger.Warn("event delivered twice without a relist", "path", t.paths[i], "marker", w.key.name, "seq", w.key.seq, "event", w.event)
		}
		return true
	}
	w.seen[i] = true
	w.seenEpoch[i] = ps.epoch
	if w.key.seq < ps.lastSeq {
		ps.series.OutOfOrder.Inc()
		t.spanEvent(w, "watchprobe.out_of_order", arrival, pathAttr, attribute.Int64("watchprobe.after_seq", int64(ps.lastSeq)))
		t.logger.Warn("event delivered after a later one", "path", t.paths[i], "marker", w.key.name, "seq", w.key.seq, "after_seq", ps.lastSeq)
	} else {
		ps.lastSeq = w.key.seq
	}
	latency := arrival.Sub(w.sent)
	if t.recorder != nil {
		t.recorder.Arrived(t.paths[i], w.key.name, w.key.seq, arrival)
	}
	observe(ps.series.Latency[w.event], latency, w.span)
	ps.series.Observed[w.event].Inc()
	ps.series.LastEvent.Set(float64(arrival.UnixNano()) / 1e9)
	if w.missed[i] {
		ps.series.Late.Inc()
		t.spanEvent(w, "watchprobe.late", arrival, arrivalAttrs(pathAttr, latency, obj)...)
		t.logger.Info("event arrived after its deadline", "path", t.paths[i], "marker", w.key.name, "seq", w.key.seq, "latency", latency)
	} else if w.span.IsRecording() {
		w.span.AddEvent("watchprobe.arrived", trace.WithTimestamp(arrival), trace.WithAttributes(arrivalAttrs(pathAttr, latency, obj)...))
	}
	if w.acked && !w.done && t.allSeen(w) {
		t.settle(w)
	}
	return true
}

// bookmark records a BOOKMARK on path i: proof that the stream is alive.
func (t *tracker) bookmark(i int, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state[i].series.Bookmarks.Inc()
	t.touch(t.state[i], now)
}

// streamStarted records that a watch stream on path i is open.
func (t *tracker) streamStarted(i int, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.state[i]
	ps.up, ps.changedAt = true, now
}

// streamEnded records the end of a watch stream on path i, why, and the
// error that ended it if there was one.
func (t *tracker) streamEnded(i int, reason string, lifetime time.Duration, err error, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.state[i]
	ps.up, ps.changedAt = false, now
	ps.series.Restarts[reason].Inc()
	ps.series.WatchDuration.Observe(lifetime.Seconds())
	if reason != metrics.EndTimeout && reason != metrics.EndClient {
		t.logger.Info("watch ended", "path", t.paths[i], "reason", reason, "lifetime", lifetime, "err", err)
	}
}

// relisted records that path i began fetching its whole state again.
func (t *tracker) relisted(i int, reason, mode string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := t.state[i]
	ps.epoch++
	ps.lastSeq = 0
	ps.changedAt = now
	ps.series.Relist(reason, mode)
	if reason != metrics.RelistInitial {
		t.logger.Info("relisting", "path", t.paths[i], "reason", reason, "mode", mode)
	}
}

func (t *tracker) touch(ps *pathState, now time.Time) {
	ps.series.Idle.Touch(now)
	ps.unansweredSince = time.Time{}
	if ps.stalled {
		ps.stalled = false
		ps.series.Stalled.Set(0)
	}
}

// sweep declares missed, on each path, every acknowledged write older than
// the deadline that the path has not delivered; marks paths stalled; and
// forgets settled writes older than the retention.
func (t *tracker) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, w := range t.byKey {
		age := now.Sub(w.sent)
		if !w.done && w.acked && age > t.deadline {
			for i, ps := range t.state {
				if w.seen[i] {
					continue
				}
				reason := metrics.MissedSilent
				if !ps.up || ps.changedAt.After(w.sent) {
					reason = metrics.MissedRelist
				}
				w.missed[i] = true
				w.cycle.ok = false
				ps.series.Missed[reason].Inc()
				if w.span.IsRecording() {
					w.span.AddEvent("watchprobe.missed", trace.WithTimestamp(now), trace.WithAttributes(
						attribute.String("watchprobe.path", t.paths[i]), attribute.String("watchprobe.reason", reason)))
				}
				t.logger.Warn("event missed", "path", t.paths[i], "reason", reason, "marker", w.key.name, "seq", w.key.seq, "event", w.event, "deadline", t.deadline)
			}
			t.settle(w)
		}
		if w.done && age > t.retain {
			delete(t.byKey, key)
			if t.deletes[key.name] == w {
				delete(t.deletes, key.name)
			}
		}
	}
	for i, ps := range t.state {
		if !ps.stalled && !ps.unansweredSince.IsZero() && now.Sub(ps.unansweredSince) > t.stallAfter {
			ps.stalled = true
			ps.series.Stalled.Set(1)
			t.logger.Warn("watch stalled: writes acknowledged, nothing arriving", "path", t.paths[i], "since", now.Sub(ps.unansweredSince))
		}
	}
}

// pending reports how many writes are not settled yet.
func (t *tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, w := range t.byKey {
		if !w.done {
			n++
		}
	}
	return n
}

func (t *tracker) allSeen(w *pendingWrite) bool {
	for i := range t.paths {
		if !w.seen[i] {
			return false
		}
	}
	return true
}

func (t *tracker) settle(w *pendingWrite) {
	if w.done {
		return
	}
	w.done = true
	if w.span.IsRecording() {
		var missed []string
		for i := range t.paths {
			if w.missed[i] {
				missed = append(missed, t.paths[i])
			}
		}
		if len(missed) > 0 {
			w.span.SetStatus(codes.Error, "missed on "+strings.Join(missed, ", "))
		}
	}
	w.span.End()
	w.cycle.pending--
	t.settleCycle(w.cycle)
}

func (t *tracker) settleCycle(c *cycle) {
	if c.open || c.pending > 0 || c.n <= t.judged {
		return
	}
	t.judged = c.n
	if c.ok {
		t.series.Success.Set(1)
	} else {
		t.series.Success.Set(0)
	}
}

func arrivalAttrs(path attribute.KeyValue, latency time.Duration, obj metav1.Object) []attribute.KeyValue {
	return []attribute.KeyValue{path,
		attribute.Float64("watchprobe.latency_seconds", latency.Seconds()),
		attribute.String("k8s.resource_version", obj.GetResourceVersion()),
	}
}

// spanEvent records an anomaly on the write's span, or, once that span has
// ended, on a short span of its own that links to it.
func (t *tracker) spanEvent(w *pendingWrite, name string, at time.Time, attrs ...attribute.KeyValue) {
	if !w.span.SpanContext().IsSampled() && !w.span.IsRecording() {
		return // tracing is off: build nothing
	}
	if !w.done {
		w.span.AddEvent(name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
		return
	}
	if !w.span.SpanContext().IsValid() {
		return
	}
	_, span := t.tracer.Start(context.Background(), name,
		trace.WithTimestamp(at),
		trace.WithLinks(trace.Link{SpanContext: w.span.SpanContext()}),
		trace.WithAttributes(append(attrs, attribute.String("watchprobe.marker", w.key.name), attribute.Int64("watchprobe.seq", int64(w.key.seq)))...))
	span.End(trace.WithTimestamp(at))
}

// observe records d, with the write's trace ID as an exemplar when its span
// is sampled, so a latency point on a dashboard leads to its trace.
func observe(o prometheus.Observer, d time.Duration, span trace.Span) {
	if sc := span.SpanContext(); sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(d.Seconds())
}
