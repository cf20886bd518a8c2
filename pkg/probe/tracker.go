package probe

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// pendingWrite is one write whose events the paths are expected to deliver,
// from just before it is sent until it is settled and past its deadline:
// 104 bytes, and 24 per path in marks. For the rest of the retention
// (minutes of writes, tens of thousands at 100 probes) it keeps only a
// settledWrite, and is made again from that for the rare delivery that
// still comes.
type pendingWrite struct {
	key writeKey
	// sent is when the request left, with Go's monotonic reading, so an
	// arrival's latency is immune to wall-clock steps and is positive even
	// when the event beats the write's response. expect stamps it; the
	// transport's stamp of each attempt, in wire, replaces it under the
	// lock.
	sent time.Time
	// wire is the latest attempt's send instant, in nanoseconds after the
	// tracker's base, 0 for none yet. The transport stores it without the
	// lock, at the last moment before the request goes out: a wait for the
	// lock there (the paths hold it while they judge the previous write's
	// arrivals) would count as delivery latency, and so would anything the
	// client does before its transport (encoding, a credential plugin, a
	// client-side rate limiter). Whatever reads sent folds it in first.
	wire atomic.Int64
	// marks is indexed by the tracker's path slots as they were when the
	// write was sent: a path added later expects nothing of it.
	marks []pathMark
	cycle *cycle
	// trace is nil unless the write is traced (see writeTrace).
	trace *writeTrace
	event eventKind // the watch event this write must cause
	acked bool      // the apiserver answered with success
	// answered is when the apiserver's answer came, in nanoseconds after
	// the tracker's base: the write was committed by then, and its lost
	// horizon counts from it, so that a slow write (a webhook, a busy
	// apiserver) is never taken for a lost event.
	answered int64
	failed   bool // the apiserver answered with an error, or none came
	done     bool // every path has seen or missed it, or it failed
	// overdue: the sweep passed it while its response was outstanding; the
	// response, when it comes, judges it.
	overdue bool
}

// writeTrace is what only a traced write keeps.
type writeTrace struct {
	// span covers the write from just before it is sent until it is
	// settled on every path; arrivals, misses and anomalies are its events.
	span trace.Span
	// rv is the resourceVersion each path delivered, by path slot, for the
	// span's events; nil until one is delivered while the span records.
	rv []string
}

// span is the write's span; one that does nothing for a write not traced.
func (w *pendingWrite) span() trace.Span {
	if w.trace == nil {
		return noopSpan
	}
	return w.trace.span
}

// noopSpan is what trace.SpanFromContext returns without a span: every
// method does nothing, as on the untraced spans that writes do not keep.
var noopSpan = trace.SpanFromContext(context.Background())

// eventKind is a watch event type, stored in a byte rather than as its
// label value's string header.
type eventKind uint8

const (
	eventAdded eventKind = iota
	eventModified
	eventDeleted
)

var eventNames = [...]string{eventAdded: metrics.EventAdded, eventModified: metrics.EventModified, eventDeleted: metrics.EventDeleted}

func eventKindOf(event string) eventKind {
	for i, e := range eventNames {
		if e == event {
			return eventKind(i)
		}
	}
	panic("watch event " + event + " is not one a write causes")
}

func (e eventKind) String() string { return eventNames[e] }

// pathMark is what one path has shown of one write.
type pathMark struct {
	// latency is its first delivery's arrival minus the write's send time,
	// on the monotonic clock. An event usually arrives before the write's
	// response. Until the response says the write succeeded, the arrival
	// is held here and judged only then: a write that failed gets no
	// latency, no observation and no ordering verdict.
	latency  time.Duration
	afterSeq uint64 // nonzero: it arrived after this later write
	// epoch is the path's relist epoch at the latest delivery, its low 27
	// bits (epochOf): it only tells apart the epoch of a delivery from
	// later ones.
	epoch uint32
	// expected: the path existed when the write was sent, and still does.
	expected bool
	seen     bool
	missed   bool
	// lost: not delivered by the lost horizon; final, so a delivery after
	// it is neither timed nor counted late.
	lost   bool
	judged bool // its first arrival on the path has been judged
}

// arrival is when m's first delivery arrived.
func (m *pathMark) arrival(w *pendingWrite) time.Time { return w.sent.Add(m.latency) }

// cycle groups the writes of one create-update-delete cycle, so the probe's
// success can be judged once all of them are settled.
type cycle struct {
	n       uint64 // cycles start in increasing order
	open    bool   // the writer may still add writes
	pending int
	ok      bool
	// abandoned: the exporter's own shutdown cut the cycle short, which
	// says nothing about the cluster, so it is not judged.
	abandoned bool
}

// outage is a stretch of time in which a path had no live stream: from a
// stream's end (or the path's start) until a stream is open and caught up
// again. What happened inside it explains a miss of an event due then.
type outage struct {
	from, to time.Time // to is zero while the outage lasts
	relist   bool      // a relist began: after it only final state is delivered
	failed   bool      // a list or watch request failed
	// initial: the path had never been live. Its first relist is where it
	// starts, not a restart that lost events: what it misses meanwhile it
	// was not there to receive.
	initial bool
}

// pathState is what the tracker knows about one path's streams.
type pathState struct {
	name      string // the path label
	apiserver string // the apiserver it is pinned to, or empty
	attrs     []attribute.KeyValue
	series    *metrics.PathSeries
	// epoch counts relists. A write delivered again in a later epoch is a
	// replay, which a relist is expected to cause; in the same epoch it is a
	// duplicate, which nothing should cause.
	epoch uint64
	// lastSeq is the highest sequence number delivered in this epoch; a
	// lower one arriving after it is out of order.
	lastSeq uint64
	// live is true while a stream is open and caught up. liveSince is when
	// the path last started: first, or after failed requests or a relist.
	// outages holds the recent stretches when it was not live, the last one
	// open while !live.
	live      bool
	everLive  bool
	liveSince time.Time
	outages   []outage
	// lastErr is the error of the latest failed list or watch request,
	// cleared when the path is live again.
	lastErr error
	// unansweredSince is the send time of the oldest acknowledged write that
	// nothing on this path has answered: no event, no bookmark since. A
	// stall is a live stream that stays silent past stallAfter of it (or
	// of liveSince, if later), across resumes from its resourceVersion: a
	// path whose requests fail is down, not stalled.
	unansweredSince time.Time
	stalled         bool
	// added is when a path pinned to an apiserver was added mid-run; zero
	// for the configured paths.
	added time.Time
}

// owes reports whether a write sent at sent is expected on the path. A path
// added mid-run owes nothing for writes sent before its first stream was
// live: its initial list holds them, and the watch from that list's version
// never delivers them. One not live within syncTimeout of being added owes
// every later write, so that an apiserver that never answers shows.
func (ps *pathState) owes(sent time.Time) bool {
	return ps.added.IsZero() || ps.everLive || sent.Sub(ps.added) > syncTimeout
}

// tracker matches events arriving on each path to the writes that caused
// them and judges what they show: latency, misses and their reason,
// duplicates, replays, reordering, lateness and stalls. It takes every time
// as an argument so that its logic can be tested without a clock.
type tracker struct {
	mu sync.Mutex
	// state is indexed by path slot. Paths pinned to an apiserver come and
	// go; a removed path leaves a nil slot that a later path may take.
	state  []*pathState
	series *metrics.ProbeSeries
	// base is what the transport's stamps (pendingWrite.wire) count from.
	base       time.Time
	deadline   time.Duration
	stallAfter time.Duration
	// lostAfter is how long after its send a write a path has not
	// delivered is counted lost there; at most retain.
	lostAfter time.Duration
	// retain keeps settled writes so a late or repeated arrival is still
	// matched and judged rather than mistaken for a foreign object.
	retain time.Duration
	// byKey finds a write in order by its sequence number, unique in a
	// probe; the marker's name must match too. deletes finds a delete by
	// the marker's name.
	byKey   map[uint64]*pendingWrite
	deletes map[string]*pendingWrite
	// order holds the writes not yet settled or not yet past their
	// deadline, in the order they were sent, which is the order of their
	// deadlines: the sweep looks only at its head, so its work under the
	// lock is proportional to the writes that fall due, not to the minutes
	// of writes retained. order[:due] are past their deadline.
	order []*pendingWrite
	due   int
	// settled holds, after order, the settled writes past their deadline,
	// in what little they keep, until the retention has passed.
	settled  settledRing
	logger   *slog.Logger
	logs     []logRecord // written under mu, logged after it is released
	tracer   trace.Tracer
	recorder Recorder // nil unless benchmarking
	// cycles counts cycles started; judged is the newest cycle whose result
	// probe_success shows. An older cycle settling later (its misses wait
	// for the deadline, which may be longer than the interval) is in the
	// counters, but must not overwrite the newer cycle's verdict.
	cycles, judged uint64
	// etcd is the index of the etcd path, -1 without one: the apiserver's
	// share of a write's latency is an apiserver path's arrival minus its.
	etcd int
}

type logRecord struct {
	level slog.Level
	msg   string
	args  []any
}

// sweepGrace is how long past its deadline the sweep waits before declaring
// a write missed: an event stamped on time may still be on its way to the
// tracker's lock. An arrival is judged by its own stamp, so the grace only
// delays a miss, it never excuses a late event.
const sweepGrace = 100 * time.Millisecond

func newTracker(paths []string, series *metrics.ProbeSeries, deadline, stallAfter time.Duration, tracer trace.Tracer, logger *slog.Logger) *tracker {
	retain := defaultRetention(deadline)
	t := &tracker{
		tracer:     tracer,
		series:     series,
		base:       time.Now(),
		deadline:   deadline,
		stallAfter: stallAfter,
		lostAfter:  defaultLostAfter(deadline, retain),
		retain:     retain,
		byKey:      map[uint64]*pendingWrite{},
		deletes:    map[string]*pendingWrite{},
		logger:     logger,
		etcd:       slices.Index(paths, metrics.PathEtcd),
	}
	for _, p := range paths {
		t.state = append(t.state, newPathState(p, "", series.Paths[p]))
	}
	return t
}

func newPathState(name, apiserver string, series *metrics.PathSeries) *pathState {
	ps := &pathState{
		name: name, apiserver: apiserver, series: series,
		attrs: []attribute.KeyValue{attribute.String("watchprobe.path", name)},
		// A path is out from the beginning of time until its first stream.
		outages: []outage{{initial: true}},
	}
	if apiserver != "" {
		ps.attrs = append(ps.attrs, attribute.String("watchprobe.apiserver", apiserver))
	}
	return ps
}

// addPath adds a path, pinned to one apiserver, and returns its slot.
// Writes already sent are not expected on it.
func (t *tracker) addPath(name, apiserver string, series *metrics.PathSeries, now time.Time) int {
	t.lock()
	defer t.unlock()
	ps := newPathState(name, apiserver, series)
	ps.added = now
	for i, s := range t.state {
		if s == nil {
			t.state[i] = ps
			return i
		}
	}
	t.state = append(t.state, ps)
	return len(t.state) - 1
}

// removePath removes the path in slot i, whose goroutines have all
// returned: no write is expected on it any more, and writes that waited
// only for it settle.
//
// A write it missed and has not delivered since is lost there as
// unavailable: the path is gone before its horizon, and its counts must
// still add up (missed = late + lost) for as long as its series stay.
func (t *tracker) removePath(i int) {
	t.lock()
	defer t.unlock()
	ps := t.state[i]
	gone := func(m pathMark) bool { return m.expected && m.missed && !m.seen && !m.lost }
	for _, w := range t.order {
		if i < len(w.marks) {
			if gone(w.marks[i]) {
				t.loseGone(ps, w)
			}
			w.marks[i] = pathMark{}
		}
	}
	for j := range t.settled.n {
		if s := t.settled.at(j); i < int(s.paths) {
			if m := s.mark(i).unpack(); gone(m) && !s.failed {
				t.loseGone(ps, t.expand(s))
			}
			*s.mark(i) = 0
		}
	}
	t.state[i] = nil
	for _, w := range t.order {
		if !w.done && w.acked && t.allSeen(w) {
			t.settle(w)
		}
	}
}

// loseGone counts w lost as unavailable on ps, a path being removed.
func (t *tracker) loseGone(ps *pathState, w *pendingWrite) {
	ps.series.Lost[metrics.MissedUnavailable].Inc()
	t.logLater(slog.LevelInfo, "event lost: its path was removed", ps.logArgs("marker", w.key.name, "seq", w.key.seq, "event", w.event.String())...)
}

func (t *tracker) lock() { t.mu.Lock() }

// unlock releases the lock, then logs what was noted under it: a slow log
// sink must not delay the arrival stamps of other paths.
func (t *tracker) unlock() {
	logs := t.logs
	t.logs = nil
	t.mu.Unlock()
	for _, r := range logs {
		t.logger.Log(context.Background(), r.level, r.msg, r.args...)
	}
}

func (t *tracker) logLater(level slog.Level, msg string, args ...any) {
	t.logs = append(t.logs, logRecord{level, msg, args})
}

func (t *tracker) newCycle() *cycle {
	t.lock()
	defer t.unlock()
	t.cycles++
	return &cycle{n: t.cycles, open: true, ok: true}
}

// closeCycle tells the tracker no more writes join c.
func (t *tracker) closeCycle(c *cycle) {
	t.lock()
	defer t.unlock()
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
		event: eventKindOf(event),
		cycle: c,
	}
	if span.IsRecording() || span.SpanContext().IsValid() {
		w.trace = &writeTrace{span: span}
	}
	t.lock()
	defer t.unlock()
	w.marks = make([]pathMark, len(t.state))
	at := now()
	for i, ps := range t.state {
		w.marks[i].expected = ps != nil && ps.owes(at)
	}
	t.byKey[key.seq] = w
	if event == metrics.EventDeleted {
		t.deletes[key.name] = w
	}
	c.pending++
	t.order = append(t.order, w)
	w.sent = now()
	return w
}

// resent restamps w's send time: client-go sent it again after a 429, and
// the apiserver took only the last attempt.
func (t *tracker) resent(w *pendingWrite, at time.Time) {
	t.lock()
	defer t.unlock()
	t.restamp(w, at)
}

// attempted records, without the lock, that an attempt of w is being sent
// at at; a later attempt's stamp wins.
func (t *tracker) attempted(w *pendingWrite, at time.Time) {
	d := max(int64(at.Sub(t.base)), 1)
	for {
		old := w.wire.Load()
		if old >= d || w.wire.CompareAndSwap(old, d) {
			return
		}
	}
}

// fold moves the transport's stamp of w into its send time. Under the lock.
func (t *tracker) fold(w *pendingWrite) {
	if d := w.wire.Swap(0); d != 0 {
		// Counted back from now rather than forward from base, so that the
		// wall-clock reading spans and logs show is the send's even after
		// the wall clock stepped since the tracker started.
		now := time.Now()
		t.restamp(w, now.Add(t.base.Add(time.Duration(d)).Sub(now)))
	}
}

// restamp makes at, if later, w's send time. Under the lock.
func (t *tracker) restamp(w *pendingWrite, at time.Time) {
	if !w.done && at.After(w.sent) {
		// Arrivals are kept relative to the send time: keep them where they were.
		for i := range w.marks {
			if w.marks[i].seen {
				w.marks[i].latency -= at.Sub(w.sent)
			}
		}
		w.sent = at
		// The sweep may have passed it by on the earlier stamp, while it was
		// still in the client or waiting out a 429; on this one it may not
		// be due yet, and its response would otherwise judge as missed the
		// paths that have not delivered it so far. The writer sends one
		// write at a time, so an unanswered write is the newest.
		if last := len(t.order) - 1; w.overdue && !w.acked && last >= 0 && t.order[last] == w && t.due > last {
			w.overdue = false
			t.due = last
		}
	}
}

// ack records the apiserver's answer to w, at now: success judges the
// arrivals held for it, failure discards them.
func (t *tracker) ack(w *pendingWrite, err error, now time.Time) {
	t.lock()
	defer t.unlock()
	t.fold(w)
	w.answered = int64(now.Sub(t.base))
	if err != nil {
		w.failed = true
		w.cycle.ok = false
		w.span().RecordError(err)
		w.span().SetStatus(codes.Error, "write failed")
		for i, m := range w.marks {
			if m.seen {
				t.state[i].series.AfterFailedWrite.Inc()
			}
		}
		if code := statusCode(err); code >= 400 && code < 500 {
			// Refused, so never committed: no event can follow, and the
			// cleaner's later delete of the marker is not this write's.
			t.forget(w)
		}
		t.settle(w)
		return
	}
	w.acked = true
	for i, m := range w.marks {
		switch ps := t.state[i]; {
		case !m.expected:
		case m.seen:
			t.judgeArrival(w, i)
		case ps.unansweredSince.IsZero():
			ps.unansweredSince = w.sent
		}
	}
	switch {
	case t.allSeen(w):
		t.settle(w)
	case w.overdue || now.Sub(w.sent) > t.deadline:
		// The sweep passed it by while the response was outstanding.
		t.judgeMisses(w, now)
	}
}

// forget drops w from the lookups: events that name it are foreign now.
func (t *tracker) forget(w *pendingWrite) {
	if t.byKey[w.key.seq] == w {
		delete(t.byKey, w.key.seq)
	}
	if t.deletes[w.key.name] == w {
		delete(t.deletes, w.key.name)
	}
}

// abandon records that the exporter's own shutdown cancelled w: neither a
// success nor a failure of the cluster, so its cycle is not judged.
func (t *tracker) abandon(w *pendingWrite) {
	t.lock()
	defer t.unlock()
	w.failed = true
	w.cycle.abandoned = true
	t.settle(w)
}

// observe matches one event that arrived on path i. It returns false for an
// event that belongs to no write this tracker knows.
func (t *tracker) observe(i int, event string, obj metav1.Object, arrival time.Time) bool {
	t.lock()
	defer t.unlock()
	w, settled := t.find(event, obj)
	if w == nil {
		return false
	}
	if settled != nil {
		defer settled.keep(w)
	}
	ps := t.state[i]
	t.touch(ps, arrival)
	ps.series.LastEvent.Set(float64(arrival.UnixNano()) / 1e9)
	if i >= len(w.marks) || !w.marks[i].expected {
		return true // sent before the path existed: it owes nothing
	}
	m := &w.marks[i]
	if w.failed {
		ps.series.AfterFailedWrite.Inc()
		return true
	}
	if m.seen {
		if epochOf(ps.epoch) != m.epoch {
			ps.series.Replayed.Inc()
			m.epoch = epochOf(ps.epoch)
			t.spanEvent(w, "watchprobe.replayed", arrival, ps.attrs...)
		} else {
			ps.series.Duplicate.Inc()
			t.spanEvent(w, "watchprobe.duplicate", arrival, ps.attrs...)
			t.logLater(slog.LevelWarn, "event delivered twice without a relist", ps.logArgs("marker", w.key.name, "seq", w.key.seq, "event", w.event.String())...)
		}
		return true
	}
	if m.lost {
		// Counted lost when its horizon passed: a delivery now is neither
		// timed nor late, but worth a word.
		m.seen = true
		m.epoch = epochOf(ps.epoch)
		t.arrivedAfterLost(w, i, arrival)
		return true
	}
	m.seen = true
	m.epoch = epochOf(ps.epoch)
	m.latency = arrival.Sub(w.sent)
	if w.span().IsRecording() || w.span().SpanContext().IsSampled() {
		// Only a span shows it: without tracing, a retained write keeps no
		// string of its own per path.
		if w.trace.rv == nil {
			w.trace.rv = make([]string, len(w.marks))
		}
		w.trace.rv[i] = obj.GetResourceVersion()
	}
	if w.key.seq < ps.lastSeq {
		m.afterSeq = ps.lastSeq
	} else {
		ps.lastSeq = w.key.seq
	}
	if t.recorder != nil {
		t.recorder.Arrived(ps.name, w.key.name, w.key.seq, arrival)
	}
	if !w.acked {
		return true // judged when the response comes
	}
	t.judgeArrival(w, i)
	if !w.done && t.allSeen(w) {
		t.settle(w)
	}
	return true
}

// find returns the write an event of obj belongs to, or nil. A settled
// write past its deadline comes expanded, with where to keep what its
// judgement changes. Under the lock.
func (t *tracker) find(event string, obj metav1.Object) (*pendingWrite, *settledWrite) {
	name := obj.GetName()
	deleted := event == metrics.EventDeleted
	var w *pendingWrite
	var seq uint64
	var hasSeq bool
	if deleted {
		// A deleted object carries its last state, so the delete is found by
		// name rather than by the sequence number on the object.
		w = t.deletes[name]
	} else if seq, hasSeq = seqOf(obj); hasSeq {
		w = t.byKey[seq]
	}
	if w != nil {
		t.fold(w)
		if w.key.name != name {
			return nil, nil
		}
		return w, nil
	}
	var s *settledWrite
	if deleted {
		// That last state's sequence number, if it has one, bounds the
		// search: the delete was sent after it.
		last, _ := seqOf(obj)
		s = t.settled.findDelete(name, last)
	} else if hasSeq {
		s = t.settled.find(seq)
	}
	if s == nil || s.name != name {
		return nil, nil
	}
	return t.expand(s), s
}

// judgeArrival records the first arrival of the acknowledged write w on
// path i: its latency, and whether it came out of order or after its
// deadline. An arrival after the deadline is late, and the write missed on
// that path, whenever the sweep happens to run.
func (t *tracker) judgeArrival(w *pendingWrite, i int) {
	m := &w.marks[i]
	if m.judged {
		return
	}
	m.judged = true
	ps := t.state[i]
	latency, arrival := m.latency, m.arrival(w)
	if arrival.Sub(t.answeredAt(w)) > t.horizon() {
		// Past the lost horizon, which the sweep has not reached yet: the
		// verdict is the one it would have given.
		if !m.missed {
			t.miss(w, i, arrival)
		}
		t.lose(w, i, arrival)
		t.arrivedAfterLost(w, i, arrival)
		return
	}
	if m.afterSeq != 0 {
		ps.series.OutOfOrder.Inc()
		if w.span().IsRecording() || w.span().SpanContext().IsSampled() {
			t.spanEvent(w, "watchprobe.out_of_order", arrival, append(slices.Clip(ps.attrs), attribute.Int64("watchprobe.after_seq", int64(m.afterSeq)))...)
		}
		t.logLater(slog.LevelWarn, "event delivered after a later one", ps.logArgs("marker", w.key.name, "seq", w.key.seq, "after_seq", m.afterSeq)...)
	}
	observe(ps.series.Latency[w.event.String()], latency, w.span())
	t.recordLatency(ps.series.Latency[w.event.String()], latency)
	ps.series.Observed[w.event.String()].Inc()
	if latency > t.deadline && !m.missed {
		t.miss(w, i, arrival)
	}
	if m.missed {
		ps.series.Late.Inc()
		t.spanEvent(w, "watchprobe.late", arrival, arrivalAttrs(ps.attrs, latency, w.rv(i))...)
		t.logLater(slog.LevelInfo, "event arrived after its deadline", ps.logArgs("marker", w.key.name, "seq", w.key.seq, "latency", latency)...)
	} else if w.span().IsRecording() {
		w.span().AddEvent("watchprobe.arrived", trace.WithTimestamp(arrival), trace.WithAttributes(arrivalAttrs(ps.attrs, latency, w.rv(i))...))
	}
	t.apiserverLag(w, i)
}

// logArgs prefixes args with what names the path in a log line.
func (ps *pathState) logArgs(args ...any) []any {
	if ps.apiserver != "" {
		return append([]any{"path", ps.name, "apiserver", ps.apiserver}, args...)
	}
	return append([]any{"path", ps.name}, args...)
}

// apiserverLag records, once w's arrival on path i is judged, the
// apiserver's share of its latency on every apiserver path that can be
// paired with the etcd path's arrival. A late arrival on either side is an
// outage's share, not the apiserver's, and is left out. Both arrivals are
// stamped on their own goroutines, so a lag within scheduling noise can be
// slightly negative; it is recorded as it is.
func (t *tracker) apiserverLag(w *pendingWrite, i int) {
	if t.etcd < 0 {
		return
	}
	e := &w.marks[t.etcd]
	lag := func(j int) {
		m := &w.marks[j]
		if m.expected && m.judged && e.judged && !m.missed && !e.missed {
			t.state[j].series.APIServerLag.Observe((m.latency - e.latency).Seconds())
		}
	}
	if i != t.etcd {
		lag(i)
		return
	}
	for j := range w.marks {
		if j != t.etcd {
			lag(j)
		}
	}
}

// judgeMisses declares the acknowledged write w missed on every path that
// has not delivered it, and settles it.
func (t *tracker) judgeMisses(w *pendingWrite, now time.Time) {
	for i, m := range w.marks {
		if m.expected && !m.seen && !m.missed {
			t.miss(w, i, now)
		}
	}
	t.settle(w)
}

// miss counts w missed on path i, with the reason the path's outages give.
func (t *tracker) miss(w *pendingWrite, i int, now time.Time) {
	ps := t.state[i]
	reason := missReason(ps.outages, w.sent, w.sent.Add(t.deadline))
	w.marks[i].missed = true
	w.cycle.ok = false
	ps.series.Missed[reason].Inc()
	if w.span().IsRecording() {
		w.span().AddEvent("watchprobe.missed", trace.WithTimestamp(now), trace.WithAttributes(
			append(slices.Clip(ps.attrs), attribute.String("watchprobe.reason", reason))...))
	}
	t.logLater(slog.LevelWarn, "event missed", ps.logArgs("reason", reason, "marker", w.key.name, "seq", w.key.seq, "event", w.event.String(), "deadline", t.deadline)...)
}

// horizon is how long after the apiserver answered a write that a path has
// not delivered it is counted lost there: lostAfter, within the retention.
func (t *tracker) horizon() time.Duration { return min(t.lostAfter, t.retain) }

// answeredAt is when the apiserver answered w.
func (t *tracker) answeredAt(w *pendingWrite) time.Time {
	return t.base.Add(time.Duration(w.answered))
}

// lose counts w lost on path i, which has missed it, with the reason the
// path's outages between the send and the horizon give.
func (t *tracker) lose(w *pendingWrite, i int, now time.Time) {
	ps := t.state[i]
	reason := lostReason(ps.outages, w.sent, t.answeredAt(w).Add(t.horizon()), t.deadline)
	w.marks[i].lost = true
	ps.series.Lost[reason].Inc()
	t.spanEvent(w, "watchprobe.lost", now, append(slices.Clip(ps.attrs), attribute.String("watchprobe.reason", reason))...)
	t.logLater(slog.LevelWarn, "event lost: not delivered within lost_after", ps.logArgs("reason", reason, "marker", w.key.name, "seq", w.key.seq, "event", w.event.String(), "lost_after", t.horizon())...)
}

// loseUndelivered counts w lost on every path that missed it and has not
// delivered it since: its horizon has passed.
func (t *tracker) loseUndelivered(w *pendingWrite, now time.Time) {
	for i, m := range w.marks {
		if m.expected && m.missed && !m.seen && !m.lost && t.state[i] != nil {
			t.lose(w, i, now)
		}
	}
}

// arrivedAfterLost notes a delivery of w on path i after w was counted
// lost there.
func (t *tracker) arrivedAfterLost(w *pendingWrite, i int, arrival time.Time) {
	ps := t.state[i]
	t.spanEvent(w, "watchprobe.arrived_after_lost", arrival, ps.attrs...)
	t.logLater(slog.LevelWarn, "event arrived after it was counted lost", ps.logArgs("marker", w.key.name, "seq", w.key.seq, "event", w.event.String(), "latency", arrival.Sub(w.sent), "lost_after", t.horizon())...)
}

// lostReason explains a write that a path has not delivered between its send
// and end, its horizon. A stream resumed from a resourceVersion owes every
// event after it, so failed requests and reconnects explain nothing once the
// path is live again: only a path not yet live when the write was sent (it
// was not there to receive it), a relist (after which a client gets final
// state only), or a path not live again by replay before the end (too
// little time to deliver what the resume owes) explains it. Else it is
// silent: a delivery bug.
func lostReason(outages []outage, sent, end time.Time, replay time.Duration) string {
	initial, relist, down := false, false, false
	for _, o := range outages {
		if o.from.After(end) || (!o.to.IsZero() && o.to.Before(sent)) {
			continue
		}
		initial = initial || o.initial
		relist = relist || o.relist
		down = down || o.to.IsZero() || o.to.After(end.Add(-replay))
	}
	switch {
	case initial:
		return metrics.MissedUnavailable
	case relist:
		return metrics.MissedRelist
	case down:
		return metrics.MissedUnavailable
	}
	return metrics.MissedSilent
}

// missReason explains a miss of an event that was due between sent and due,
// from the path's outages that overlap that window. Failed list or watch
// requests in one, or a path not yet live once, make it unavailable; else a
// relist begun in one makes it relist (after a relist a client sees only
// final state); else a path with no stream open when the event was due
// makes it unavailable too (the path could not receive it: a reconnect
// still under way). Else nothing explains it: a stream that ended and
// resumed from its resourceVersion before the event was due loses no event.
func missReason(outages []outage, sent, due time.Time) string {
	failed, relist, down := false, false, false
	for _, o := range outages {
		if o.from.After(due) || (!o.to.IsZero() && o.to.Before(sent)) {
			continue
		}
		failed = failed || o.failed || o.initial
		relist = relist || o.relist
		down = down || o.to.IsZero() || o.to.After(due)
	}
	switch {
	case failed:
		return metrics.MissedUnavailable
	case relist:
		return metrics.MissedRelist
	case down:
		return metrics.MissedUnavailable
	}
	return metrics.MissedSilent
}

// bookmark records a BOOKMARK on path i: proof that the stream is alive.
func (t *tracker) bookmark(i int, now time.Time) {
	t.lock()
	defer t.unlock()
	t.state[i].series.Bookmarks.Inc()
	t.touch(t.state[i], now)
}

// live records that path i has a stream open and caught up: a watch that
// resumed from a resourceVersion, or a relist completed.
func (t *tracker) live(i int, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.state[i]
	if ps.live {
		return
	}
	ps.live, ps.everLive, ps.lastErr = true, true, nil
	o := &ps.outages[len(ps.outages)-1]
	o.to = now
	// A stream resumed from the resourceVersion after a plain end is the
	// same stream to a client, silence and all: only a path that starts
	// again (first, after failures, or from a relist) gets stallAfter anew.
	if o.initial || o.failed || o.relist {
		ps.liveSince = now
	}
	ps.series.Up.Set(1)
}

// down opens an outage on path i, if none is open.
func (t *tracker) down(ps *pathState, now time.Time) *outage {
	if ps.live {
		ps.live = false
		ps.series.Up.Set(0)
		ps.outages = append(ps.outages, outage{from: now})
	}
	return &ps.outages[len(ps.outages)-1]
}

// unstall ends a stall of a path that cannot list or watch, or relists: it
// is down or starting again, not stalled.
func (t *tracker) unstall(ps *pathState) {
	if ps.stalled {
		ps.stalled = false
		ps.series.Stalled.Set(0)
	}
}

// streamEnded records the end of a watch stream on path i, why, and the
// error that ended it if there was one.
func (t *tracker) streamEnded(i int, reason string, lifetime time.Duration, err error, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.state[i]
	t.down(ps, now)
	ps.series.Restarts[reason].Inc()
	ps.series.WatchDuration.Observe(lifetime.Seconds())
	if reason != metrics.EndTimeout && reason != metrics.EndClient {
		t.logLater(slog.LevelInfo, "watch ended", ps.logArgs("reason", reason, "lifetime", lifetime, "err", err)...)
	}
}

// requestFailed records a list or watch request of path i that failed
// before any stream existed: not a stream's end, and the path is out.
func (t *tracker) requestFailed(i int, request string, err error, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.state[i]
	t.down(ps, now).failed = true
	t.unstall(ps)
	ps.lastErr = err
	ps.series.RequestFailed(request, statusCode(err))
	t.logLater(slog.LevelWarn, "list or watch request failed", ps.logArgs("request", request, "err", err)...)
}

// relisted records that path i began fetching its whole state again.
func (t *tracker) relisted(i int, reason, mode string, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.state[i]
	t.down(ps, now).relist = true
	t.unstall(ps)
	ps.epoch++
	ps.lastSeq = 0
	ps.series.Relist(reason, mode)
	if reason != metrics.RelistInitial {
		t.logLater(slog.LevelInfo, "relisting", ps.logArgs("reason", reason, "mode", mode)...)
	}
}

// wasLive reports whether path i has been live once.
func (t *tracker) wasLive(i int) bool {
	t.lock()
	defer t.unlock()
	return t.state[i].everLive
}

// pathErr reports why path i is not usable, or nil: it has never been live,
// or its latest list or watch request failed.
func (t *tracker) pathErr(i int) error {
	t.lock()
	defer t.unlock()
	ps := t.state[i]
	switch {
	case ps.lastErr != nil:
		return ps.lastErr
	case !ps.everLive:
		return errNotSynced
	}
	return nil
}

// downPaths describes each path that has no stream open and caught up:
// its label, and the error of its latest failed request if it has one.
func (t *tracker) downPaths() []string {
	t.lock()
	defer t.unlock()
	var down []string
	for _, ps := range t.state {
		switch {
		case ps == nil || ps.live:
		case ps.lastErr != nil:
			down = append(down, ps.label()+": "+ps.lastErr.Error())
		case !ps.everLive:
			down = append(down, ps.label()+": "+errNotSynced.Error())
		default:
			down = append(down, ps.label()+": no stream open")
		}
	}
	return down
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
	t.lock()
	defer t.unlock()
	for ; t.due < len(t.order); t.due++ {
		w := t.order[t.due]
		t.fold(w)
		if now.Sub(w.sent) <= t.deadline+sweepGrace {
			break
		}
		switch {
		case w.done:
		case w.acked:
			t.judgeMisses(w, now)
		case !w.failed:
			w.overdue = true // judged by ack
		}
	}
	// Settled writes past their deadline move to settled, in the order
	// sent, behind any write before them still waiting for its response;
	// a write refused (forgotten) or older than the retention goes.
	moved := 0
	for ; moved < t.due; moved++ {
		w := t.order[moved]
		if !w.done {
			break
		}
		// Even one older than the retention: it goes once judged for loss.
		if t.byKey[w.key.seq] == w {
			name := w.key.name
			if newest := t.settled.newestName(); newest == name {
				name = newest // one copy of the name per marker
			}
			t.settled.push(t.compact(w, name))
		}
		t.forget(w)
		t.order[moved] = nil
	}
	t.order, t.due = t.order[moved:], t.due-moved
	// Settled writes past their horizon are counted lost on the paths
	// that missed them and have not delivered them since; only then may
	// the retention drop them. Writes are answered in the order they were
	// sent (one at a time), so the first not yet due ends the pass.
	for horizon := t.horizon(); t.settled.lostFrom < t.settled.n; t.settled.lostFrom++ {
		s := t.settled.at(t.settled.lostFrom)
		if now.Sub(t.base.Add(time.Duration(s.answered))) <= horizon+sweepGrace {
			break
		}
		if !s.failed && s.undelivered() {
			w := t.expand(s)
			t.loseUndelivered(w, now)
			s.keep(w)
		}
	}
	for t.settled.lostFrom > 0 && now.Sub(t.sentOf(t.settled.at(0))) > t.retain {
		t.settled.popFront()
	}
	for _, ps := range t.state {
		if ps == nil {
			continue
		}
		if !ps.stalled && ps.live && !ps.unansweredSince.IsZero() && now.Sub(later(ps.unansweredSince, ps.liveSince)) > t.stallAfter {
			ps.stalled = true
			ps.series.Stalled.Set(1)
			t.logLater(slog.LevelWarn, "watch stalled: a stream is open and writes are acknowledged, but nothing arrives", ps.logArgs("since", now.Sub(ps.unansweredSince))...)
		}
		// Outages that ended before any retained write was sent explain
		// nothing any more.
		keep := 0
		for keep < len(ps.outages)-1 && !ps.outages[keep].to.IsZero() && now.Sub(ps.outages[keep].to) > t.retain+t.deadline {
			keep++
		}
		ps.outages = ps.outages[keep:]
	}
}

// pending reports how many writes are not settled yet.
func (t *tracker) pending() int {
	t.lock()
	defer t.unlock()
	n := 0
	for _, w := range t.byKey {
		if !w.done {
			n++
		}
	}
	return n
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func (t *tracker) allSeen(w *pendingWrite) bool {
	for _, m := range w.marks {
		if m.expected && !m.seen {
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
	if w.span().IsRecording() {
		var missed []string
		for i, m := range w.marks {
			if ps := t.state[i]; m.expected && m.missed && ps != nil {
				missed = append(missed, ps.label())
			}
		}
		if len(missed) > 0 {
			w.span().SetStatus(codes.Error, "missed on "+strings.Join(missed, ", "))
		}
	}
	w.span().End()
	w.cycle.pending--
	t.settleCycle(w.cycle)
}

func (t *tracker) settleCycle(c *cycle) {
	if c.open || c.pending > 0 || c.abandoned {
		return
	}
	t.recordVerdict(c)
	if c.n <= t.judged {
		return
	}
	t.judged = c.n
	if c.ok {
		t.series.Success.Set(1)
	} else {
		t.series.Success.Set(0)
	}
}

// label names the path for a person: the apiserver's address for a path
// pinned to one.
func (ps *pathState) label() string {
	if ps.apiserver != "" {
		return ps.name + " " + ps.apiserver
	}
	return ps.name
}

// rv is the resourceVersion path i delivered w at, if w's span recorded it.
func (w *pendingWrite) rv(i int) string {
	if w.trace == nil || w.trace.rv == nil {
		return ""
	}
	return w.trace.rv[i]
}

func arrivalAttrs(path []attribute.KeyValue, latency time.Duration, rv string) []attribute.KeyValue {
	return append(slices.Clip(path),
		attribute.Float64("watchprobe.latency_seconds", latency.Seconds()),
		attribute.String("k8s.resource_version", rv),
	)
}

// spanEvent records an anomaly on the write's span, or, once that span has
// ended, on a short span of its own that links to it.
func (t *tracker) spanEvent(w *pendingWrite, name string, at time.Time, attrs ...attribute.KeyValue) {
	if !w.span().SpanContext().IsSampled() && !w.span().IsRecording() {
		return // tracing is off: build nothing
	}
	if !w.done {
		w.span().AddEvent(name, trace.WithTimestamp(at), trace.WithAttributes(attrs...))
		return
	}
	if !w.span().SpanContext().IsValid() {
		return
	}
	_, span := t.tracer.Start(context.Background(), name,
		trace.WithTimestamp(at),
		trace.WithLinks(trace.Link{SpanContext: w.span().SpanContext()}),
		trace.WithAttributes(append(slices.Clip(attrs), attribute.String("watchprobe.marker", w.key.name), attribute.Int64("watchprobe.seq", int64(w.key.seq)))...))
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
