package judge

import (
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// WriteKey identifies one marker write: the marker's name (unique per run,
// replica and cycle) and the writer's sequence number.
type WriteKey struct {
	Name string
	Seq  uint64
}

// PendingWrite is one write whose events the paths are expected to deliver,
// from just before it is sent until it is settled and past its deadline.
// For the rest of the retention it keeps only a settledWrite, and is made
// again from that for the rare delivery that still comes.
type PendingWrite struct {
	key WriteKey
	// sent is when the request left, with Go's monotonic reading, so an
	// arrival's latency is immune to wall-clock steps and is positive even
	// when the event beats the write's response. The ledger stamps it; the
	// transport's stamp of each attempt, in wire, replaces it under the
	// lock.
	sent time.Time
	// wire is the latest attempt's send instant, in nanoseconds after the
	// ledger's base, 0 for none yet. The transport stores it without the
	// lock, at the last moment before the request goes out: a wait for the
	// lock there (held while the paths judge the previous write's
	// arrivals) would count as delivery latency, and so would anything the
	// client does before its transport (encoding, a credential plugin, a
	// client-side rate limiter). Whatever reads sent folds it in first.
	wire atomic.Int64
	// attempts counts the attempts the transport stamped: with more than
	// one, an earlier attempt may have committed the write, so its event
	// may precede the latest attempt's send.
	attempts atomic.Int32
	// first is when the write was first about to be sent, in nanoseconds
	// after the base: its round trip counts from it, retries and all (the
	// write did take that long).
	first int64
	// answered is when the apiserver's answer came, in nanoseconds after
	// the base: the write was committed by then, and its lost horizon
	// counts from it, so that a slow write (a webhook, a busy apiserver) is
	// never taken for a lost event.
	answered int64
	// rv is the resourceVersion the apiserver answered the write with: the
	// one its own event carries. A later resourceVersion that carries the
	// write's sequence number is someone else's change of the marker. For
	// a delete, whose answer (a Status for a ConfigMap or a Lease) names
	// no resourceVersion, it is that of the state the delete removed,
	// which its precondition made certain (kube.MarkerAPI.Delete), or the
	// one its finalizers' hold marked deleting: its DELETED carries a
	// later one, and a DELETED at this one or before is another client's
	// change (a selector leave). 0 while no answer has come, and for a
	// delete sent without a precondition.
	rv uint64
	// marks is indexed by the tracker's path slots as they were when the
	// write was sent: a path added later expects nothing of it.
	marks []pathMark
	cycle *Cycle
	// trace is the write's trace context, when it is traced: its
	// outcomes carry it.
	trace  trace.SpanContext
	event  eventKind // the watch event this write must cause
	acked  bool      // the apiserver answered with success
	failed bool      // the apiserver answered with an error, or none came
	done   bool      // every path has seen or missed it, or it failed
	// held: a delete the apiserver answered with the marker, its deletion
	// held by another client's finalizers: no path owes its DELETED by a
	// deadline, since it comes when they go (heldDelete).
	held bool
}

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

// eventVerbs are the writes that cause each event.
var eventVerbs = [...]string{eventAdded: metrics.VerbCreate, eventModified: metrics.VerbUpdate, eventDeleted: metrics.VerbDelete}

// pathMark is what one path has shown of one write.
type pathMark struct {
	// latency is its first delivery's arrival minus the write's send time,
	// on the monotonic clock. An event usually arrives before the write's
	// response. Until the response says the write succeeded, the arrival
	// is held here and judged only then: a write that failed gets no
	// latency, no observation and no ordering verdict.
	latency  time.Duration
	afterSeq uint64 // nonzero: it arrived after this later write
	// rv is the resourceVersion of the delivery held in latency: until the
	// write's answer names its own, the lowest one delivered, since nobody
	// else can change the marker before the write is committed.
	rv uint64
	// foreign is the newest resourceVersion of someone else's change of the
	// marker delivered on the path, so that the same change delivered again
	// is a duplicate and not another change.
	foreign uint64
	// epoch is the path's relist epoch at the latest delivery, its low 25
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
	// held: not delivered by the deadline while the exporter was starved
	// near the send or the deadline (the self-monitor's verdict), so not
	// counted missed: its arrival, or its lost horizon, decides.
	held bool
	// unmeasurable: judged Unmeasurable on the path (Outcome.Reason says
	// why: the exporter's own starvation could have moved the verdict, its
	// path was refused, a delete another client's finalizers hold, or one
	// of a marker another client took out of the path's selector); final,
	// so the write is neither timed, missed, late nor lost there, and a
	// delivery after it is no verdict.
	unmeasurable bool
	// untimed: judged before its write settled, whose latency was not
	// kept (no path could still deliver it), so it pairs with nothing.
	untimed bool
}

// arrival is when m's first delivery arrived.
func (m *pathMark) arrival(w *PendingWrite) time.Time { return w.sent.Add(m.latency) }

// Cycle groups the writes of one create-update-delete Cycle, so the probe's
// success can be judged once all of them are settled.
type Cycle struct {
	n       uint64 // cycles start in increasing order
	open    bool   // the writer may still add writes
	pending int
	ok      bool
	// abandoned: the exporter's own shutdown cut the cycle short, which
	// says nothing about the cluster, so it is not judged.
	abandoned bool
	// unmeasurable: a write of the cycle could not be judged on a path (the
	// exporter was starved): unless something else failed it, the cycle
	// has no verdict.
	unmeasurable bool
}

// ledger holds a probe's writes from just before they are sent until the
// retention has passed: what matching a delivery to its write, and judging
// it late, repeated or replayed, needs.
type ledger struct {
	// base is what stamps count from (pendingWrite.wire and answered,
	// settledWrite.sent and answered).
	base time.Time
	// retain keeps settled writes so that a late or repeated arrival is
	// still matched and judged rather than mistaken for a foreign object.
	retain time.Duration
	// byKey finds a write by its sequence number, unique in a probe; the
	// marker's name must match too. deletes finds a delete by the marker's
	// name.
	byKey   map[uint64]*PendingWrite
	deletes map[string]*PendingWrite
	// order holds the writes not yet settled or not yet past their
	// deadline, in the order they were sent, which is the order of their
	// deadlines: the sweep looks only at its head, so its work under the
	// lock is proportional to the writes that fall due, not to the minutes
	// of writes retained. order[:due] are past their deadline.
	order []*PendingWrite
	due   int
	// settled holds, after order, the settled writes past their deadline,
	// in what little they keep, until the retention has passed.
	settled settledRing
	// pairs: an etcd path is configured, so a settled write that a path
	// missed keeps its paths' latencies, for the apiserver's share of an
	// arrival that is still to come.
	pairs bool
}

func newLedger(base time.Time, retain time.Duration) ledger {
	return ledger{base: base, retain: retain, byKey: map[uint64]*PendingWrite{}, deletes: map[string]*PendingWrite{}}
}

// add registers w, about to be sent.
func (l *ledger) add(w *PendingWrite) {
	l.byKey[w.key.Seq] = w
	if w.event == eventDeleted {
		l.deletes[w.key.Name] = w
	}
	l.order = append(l.order, w)
}

// attempted records, without the lock, that an attempt of w is being sent
// at at; a later attempt's stamp wins.
func (l *ledger) attempted(w *PendingWrite, at time.Time) {
	w.attempts.Add(1)
	d := max(int64(at.Sub(l.base)), 1)
	for {
		old := w.wire.Load()
		if old >= d || w.wire.CompareAndSwap(old, d) {
			return
		}
	}
}

// fold moves the transport's stamp of w into its send time; now is any
// reading of the tracker's clock taken since.
func (l *ledger) fold(w *PendingWrite, now time.Time) {
	if d := w.wire.Swap(0); d != 0 {
		// Counted back from now rather than forward from base, so that the
		// wall-clock reading spans and logs show is the send's even after
		// the wall clock stepped since the tracker started.
		l.restamp(w, now.Add(l.base.Add(time.Duration(d)).Sub(now)))
	}
}

// restamp makes at, if later, w's send time.
func (l *ledger) restamp(w *PendingWrite, at time.Time) {
	if w.done || !at.After(w.sent) {
		return
	}
	// Arrivals are kept relative to the send time: keep them where they were.
	for i := range w.marks {
		if w.marks[i].seen {
			w.marks[i].latency -= at.Sub(w.sent)
		}
	}
	w.sent = at
}

// answer records when the apiserver answered w.
func (l *ledger) answer(w *PendingWrite, now time.Time) { w.answered = int64(now.Sub(l.base)) }

// answeredAt is when the apiserver answered w.
func (l *ledger) answeredAt(w *PendingWrite) time.Time { return l.base.Add(time.Duration(w.answered)) }

// forget drops w from the lookups: events that name it are foreign now.
func (l *ledger) forget(w *PendingWrite) {
	if l.byKey[w.key.Seq] == w {
		delete(l.byKey, w.key.Seq)
	}
	if l.deletes[w.key.Name] == w {
		delete(l.deletes, w.key.Name)
	}
}

// find returns the write an event of obj belongs to, or nil. A settled
// write past its deadline comes expanded, with where to keep what its
// judgement changes.
func (l *ledger) find(event string, obj metav1.Object, now time.Time) (*PendingWrite, *settledWrite) {
	name := obj.GetName()
	seq, hasSeq := Seq(obj)
	if event == metrics.EventDeleted || obj.GetDeletionTimestamp() != nil {
		// A deleted object carries its last state, and one whose
		// finalizers hold its deletion the state the delete found: the
		// delete is found by name. That state's sequence number, if it has
		// one, bounds the search among settled deletes: the delete was sent
		// after it. Without a delete, the object belongs to the write whose
		// state it carries: another client deleted the marker, or took it
		// out of the path's label selector.
		if w := l.deletes[name]; w != nil {
			return l.found(w, name, now), nil
		}
		if s := l.settled.findDelete(name, seq); s != nil {
			return l.expand(s, now), s
		}
	}
	if !hasSeq {
		return nil, nil
	}
	if w := l.byKey[seq]; w != nil {
		return l.found(w, name, now), nil
	}
	s := l.settled.find(seq)
	if s == nil || s.name != name {
		return nil, nil
	}
	return l.expand(s, now), s
}

// found is w, the write a delivery of the marker name names, its
// transport's stamp folded in; nil when w is another marker's.
func (l *ledger) found(w *PendingWrite, name string, now time.Time) *PendingWrite {
	l.fold(w, now)
	if w.key.Name != name {
		return nil
	}
	return w
}

// fallDue calls each, in send order, for every write whose deadline
// (after, from its send) has passed by now and that has not fallen due yet,
// until each returns false: that write is not judged yet, and it and the
// writes after it fall due again at the next call.
func (l *ledger) fallDue(now time.Time, after time.Duration, each func(*PendingWrite) bool) {
	for ; l.due < len(l.order); l.due++ {
		w := l.order[l.due]
		l.fold(w, now)
		if now.Sub(w.sent) <= after || !each(w) {
			return
		}
	}
}

// compactDue moves the settled writes past their deadline to the settled
// ring, in the order sent, behind any write before them still waiting for
// its response; a write refused (forgotten) goes.
func (l *ledger) compactDue() {
	moved := 0
	for ; moved < l.due; moved++ {
		w := l.order[moved]
		if !w.done {
			break
		}
		if l.byKey[w.key.Seq] == w {
			name := w.key.Name
			if newest := l.settled.newestName(); newest == name {
				name = newest // one copy of the name per marker
			}
			l.settled.push(l.compact(w, name))
		}
		l.forget(w)
		l.order[moved] = nil
	}
	l.order, l.due = l.order[moved:], l.due-moved
}

// pastHorizon calls each for every settled write whose horizon (from its
// answer) has passed by now and that has not been passed before, until each
// returns false: that write is passed again at the next call. Writes are
// answered in the order they were sent, one at a time, so the first not yet
// due ends the pass.
func (l *ledger) pastHorizon(now time.Time, horizon time.Duration, each func(*settledWrite) bool) {
	for ; l.settled.lostFrom < l.settled.n; l.settled.lostFrom++ {
		s := l.settled.at(l.settled.lostFrom)
		if now.Sub(l.base.Add(time.Duration(s.answered))) <= horizon || !each(s) {
			return
		}
	}
}

// dropRetained forgets settled writes older than the retention, once their
// horizon has passed.
func (l *ledger) dropRetained(now time.Time) {
	for l.settled.lostFrom > 0 && now.Sub(l.sentOf(l.settled.at(0))) > l.retain {
		l.settled.popFront()
	}
}

// oldestToJudge is the send time of the oldest write that may still be
// judged missed or lost, if there is one.
func (l *ledger) oldestToJudge(now time.Time) (time.Time, bool) {
	if l.settled.lostFrom < l.settled.n {
		return l.sentOf(l.settled.at(l.settled.lostFrom)), true
	}
	if len(l.order) > 0 {
		l.fold(l.order[0], now)
		return l.order[0].sent, true
	}
	return time.Time{}, false
}

// pending counts the writes not settled yet.
func (l *ledger) pending() int {
	n := 0
	for _, w := range l.byKey {
		if !w.done {
			n++
		}
	}
	return n
}
