package judge

import (
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Tracker is where a probe's writes, the paths' deliveries and the paths'
// health meet: the probe and its paths call it, it holds the one lock over
// the ledger and the judgement, and it hands the judgement's outcomes to
// the sinks once the lock is released.
type Tracker struct {
	mu     sync.Mutex
	ledger ledger
	judge  judge
	// sinks hear every outcome, in order. Each lock holder queues what it
	// concluded before it lets go of mu, so the queue is in the order of
	// the conclusions; whoever then holds emitting delivers the whole
	// queue, and the others go on at once. A sink that is slow holds up
	// the one goroutine delivering, never the paths, the writer and the
	// sweeper waiting for mu.
	sinks    []Sink
	queueMu  sync.Mutex
	queue    []*[]Outcome
	emitting sync.Mutex
	// controllers are the reactions of the probe's controllers, in the
	// order of its controllers setting.
	controllers []*reactionState
	// spare is a queue of outcomes for the next lock holder, so that
	// delivering them allocates nothing in the steady state.
	spare atomic.Pointer[[]Outcome]
}

// Settings are what a tracker judges by: its configured paths, in
// slot order, the probe's deadline, stall bound, retention and lost
// horizon, and the instant its stamps count from.
type Settings struct {
	Paths                                   []string
	Deadline, StallAfter, Retain, LostAfter time.Duration
	Base                                    time.Time
	// Monitor is the exporter's self-monitor; nil: none, and every verdict
	// is concluded as soon as it is due.
	Monitor Monitor
}

// Monitor is what the exporter knows of its own starvation
// (pkg/selfhealth): a verdict on a write is concluded only once the
// monitor has covered its instant, and the write is unmeasurable if the
// exporter was starved where that could have moved the verdict.
type Monitor interface {
	// Covered is the instant through which every starved stretch is known.
	Covered() time.Time
	// Starved reports whether the exporter was starved where it could have
	// moved a verdict concluded at at on a write sent at sent (at before
	// Covered): near the send, or at or shortly before at.
	Starved(sent, at time.Time) bool
	// Resumed is the instant by which the exporter has stamped whatever
	// was delivered to it before at (at before Covered): at itself unless
	// it was starved at at, else once the starvation has passed or as long
	// after at as it delayed anything, and a margin. A lost horizon waits
	// for it: starvation delays a stamp, it never takes an event away.
	Resumed(at time.Time) time.Time
	// Watch says that delta more writes are pending (fewer, if negative):
	// from just before their send until every path has delivered or
	// missed them, the verdicts that need the monitor closest. A tracker
	// also counts one while a miss held at its deadline waits for its
	// arrival, or a lost horizon is near (judge.watchClosely): those
	// verdicts ask the monitor about instants still to come.
	Watch(delta int)
}

// newTracker returns a tracker as s says, telling sinks its outcomes.
func New(s Settings, sinks ...Sink) *Tracker {
	t := &Tracker{ledger: newLedger(s.Base, s.Retain), sinks: sinks}
	t.judge = judge{
		ledger: &t.ledger, deadline: s.Deadline, stallAfter: s.StallAfter,
		lostAfter: s.LostAfter, etcd: -1, out: new([]Outcome), monitor: s.Monitor,
	}
	for i, p := range s.Paths {
		if p == metrics.PathEtcd {
			t.judge.etcd = i
		}
		t.judge.paths = append(t.judge.paths, newPathState(&PathInfo{Name: p}))
	}
	t.ledger.pairs = t.judge.etcd >= 0
	return t
}

func (t *Tracker) lock() { t.mu.Lock() }

// unlock releases the lock, then hands what was concluded under it to the
// sinks, in order, unless another goroutine is doing so: that one hands
// this on too.
func (t *Tracker) unlock() {
	out := t.judge.out
	if len(*out) == 0 {
		t.mu.Unlock()
		return
	}
	next := t.spare.Swap(nil)
	if next == nil {
		next = new([]Outcome)
	}
	t.judge.out = next
	t.queueMu.Lock()
	t.queue = append(t.queue, out)
	t.queueMu.Unlock()
	t.mu.Unlock()
	t.emit()
}

// emit delivers the queued outcomes while no other goroutine does. After
// letting go of emitting it looks again: a batch queued while it was
// delivering, by a goroutine that found emitting held, would otherwise wait
// for the next conclusion.
func (t *Tracker) emit() {
	for t.emitting.TryLock() {
		for {
			t.queueMu.Lock()
			if len(t.queue) == 0 {
				t.queueMu.Unlock()
				break
			}
			// Shifted down, not sliced off, so that the queue's array is
			// reused: it rarely holds more than one batch.
			out := t.queue[0]
			n := copy(t.queue, t.queue[1:])
			t.queue[n] = nil
			t.queue = t.queue[:n]
			t.queueMu.Unlock()
			for i := range *out {
				for _, s := range t.sinks {
					s.Outcome((*out)[i])
				}
				(*out)[i] = Outcome{} // let go of what it points to
			}
			*out = (*out)[:0]
			t.spare.Store(out)
		}
		t.emitting.Unlock()
		t.queueMu.Lock()
		empty := len(t.queue) == 0
		t.queueMu.Unlock()
		if empty {
			return
		}
	}
}

// Handle is path slot's line to the judgement.
func (t *Tracker) Handle(slot int) Handle {
	t.lock()
	defer t.unlock()
	return Handle{tracker: t, slot: slot, flight: &t.judge.paths[slot].flight}
}

// stamp reads the clock for an arrival that f will hand over: first marks
// the flight, then reads the clock, then records the stamp, so that a sweep
// never misses what was stamped before its verdict and not yet handed over.
func (t *Tracker) stamp(f *inFlight, now func() time.Time) time.Time {
	f.begin()
	at := now()
	f.stamped(at.Sub(t.ledger.base))
	return at
}

// AddPath adds a path, pinned to one apiserver, and returns its slot.
// Writes already sent are not expected on it.
func (t *Tracker) AddPath(name, apiserver string, now time.Time) int {
	t.lock()
	defer t.unlock()
	ps := newPathState(&PathInfo{Name: name, APIServer: apiserver})
	ps.added = now
	t.judge.emit(Outcome{Kind: PathAdded, Path: ps.info, At: now})
	for i, s := range t.judge.paths {
		if s == nil {
			t.judge.paths[i] = ps
			return i
		}
	}
	t.judge.paths = append(t.judge.paths, ps)
	return len(t.judge.paths) - 1
}

// RemovePath removes the path in slot i, whose goroutines have all
// returned: no write is expected on it any more, and writes that waited
// only for it settle. What it missed and has not delivered is lost there.
func (t *Tracker) RemovePath(i int, now time.Time) {
	t.lock()
	defer t.unlock()
	j, l := &t.judge, &t.ledger
	j.dropHeld(i, now)
	j.dropChecks(i, now)
	for _, w := range l.order {
		if i < len(w.marks) {
			j.removed(w, i)
			w.marks[i] = pathMark{}
		}
	}
	for k := range l.settled.n {
		if s := l.settled.at(k); i < int(s.paths) {
			if m := s.mark(i).unpack(s.rv); (undelivered(m) || heldUndelivered(m)) && !s.failed {
				j.removed(l.expand(s, now), i)
			}
			*s.mark(i) = 0
		}
	}
	if ps := j.paths[i]; ps != nil {
		j.emit(Outcome{Kind: PathRemoved, Path: ps.info})
	}
	j.paths[i] = nil
	for _, w := range l.order {
		if !w.done && w.acked && allSeen(w) && allJudged(w) {
			j.settle(w)
		}
	}
}

func (t *Tracker) NewCycle() *Cycle {
	t.lock()
	defer t.unlock()
	t.judge.cycles++
	return &Cycle{n: t.judge.cycles, open: true, ok: true}
}

// CloseCycle tells the tracker no more writes join c.
func (t *Tracker) CloseCycle(c *Cycle) {
	t.lock()
	defer t.unlock()
	c.open = false
	// What the paths said of the marker's selector is the cycle's.
	t.judge.marker = ""
	for _, ps := range t.judge.paths {
		if ps != nil {
			ps.left, ps.tomb = leftMarker{}, tombstone{}
		}
	}
	t.judge.settleCycle(c)
}

// Expect registers a write before it is sent, so that an event arriving
// before the write's response still finds it. It stamps the send time as its
// very last step; the caller sends immediately after. span is the write's
// span, which ends when the write settles.
func (t *Tracker) Expect(c *Cycle, key WriteKey, event string, trace trace.SpanContext, now func() time.Time) *PendingWrite {
	w := &PendingWrite{key: key, event: eventKindOf(event), cycle: c, trace: trace}
	t.lock()
	defer t.unlock()
	w.marks = make([]pathMark, len(t.judge.paths))
	if j := &t.judge; j.monitor != nil {
		j.monitor.Watch(1)
		j.watching++
	}
	at := now()
	for i, ps := range t.judge.paths {
		w.marks[i].expected = ps != nil && ps.owes(at)
	}
	t.ledger.add(w)
	t.judge.marker = key.Name
	c.pending++
	w.sent = now()
	w.first = int64(w.sent.Sub(t.ledger.base))
	t.judge.emit(t.judge.about(Sent, w, -1, w.sent))
	return w
}

// Attempted records, without the lock, that an attempt of w is being sent
// at at; a later attempt's stamp wins.
func (t *Tracker) Attempted(w *PendingWrite, at time.Time) { t.ledger.attempted(w, at) }

// RemovedUnknown is a delete's removed resourceVersion when the delete
// went without a precondition after conflicts: the state it removed, and
// so which DELETED is its own, is unknown.
const RemovedUnknown = ^uint64(0)

// Ack records the apiserver's answer to w, at now, with the
// resourceVersion it names: for a delete, that of the state it removed
// (0 for none; see PendingWrite.rv; RemovedUnknown).
func (t *Tracker) Ack(w *PendingWrite, rv uint64, err error, now time.Time) {
	t.lock()
	defer t.unlock()
	t.ledger.fold(w, now)
	t.ledger.answer(w, now)
	t.judge.answered(w, rv, err, now)
}

// AckHeld records the apiserver's answer to the delete w, at now: success,
// with the marker held, whose deletion waits for other clients'
// finalizers. The delete is Unmeasurable on every path, and the DELETED
// that comes when the finalizers go is Released: no path owes it until
// a path or the cleaner (MarkerGone) shows the marker gone, and then
// every other path owes it within the lost horizon (heldDelete).
func (t *Tracker) AckHeld(w *PendingWrite, held metav1.Object, now time.Time) {
	t.lock()
	defer t.unlock()
	t.ledger.fold(w, now)
	t.ledger.answer(w, now)
	t.judge.blocked(w, held, now)
	t.judge.answered(w, RV(held), nil, now)
	t.judge.hold(w)
}

// Close lets the self-monitor stop watching closely for the writes still
// pending: the probe has stopped, and they will not settle.
func (t *Tracker) Close() {
	t.lock()
	defer t.unlock()
	t.judge.closeWatch()
}

// Abandon records that the exporter's own shutdown cancelled w: neither a
// success nor a failure of the cluster, so its cycle is not judged.
func (t *Tracker) Abandon(w *PendingWrite) {
	t.lock()
	defer t.unlock()
	w.failed = true
	w.cycle.abandoned = true
	t.judge.settle(w)
}

// Throttled records a request answered 429: path i's, or a write's when i
// is negative.
func (t *Tracker) Throttled(i int, request string) {
	t.lock()
	defer t.unlock()
	o := Outcome{Kind: Throttled, Request: request}
	if i >= 0 {
		o.Path = t.judge.paths[i].info
	}
	t.judge.emit(o)
}

// Resumed hands a resume check's verdict to the sinks.
func (t *Tracker) Resumed(v ResumeVerdict) {
	t.lock()
	defer t.unlock()
	t.judge.emit(Outcome{Kind: ResumeChecked, Path: &PathInfo{Name: v.Path, APIServer: v.APIServer}, Reason: v.Outcome, Limit: v.Age, Resume: &v})
}

// ResumeWindow hands the resume window a round measured on a path to the
// sinks.
func (t *Tracker) ResumeWindow(path, apiserver string, window time.Duration) {
	t.lock()
	defer t.unlock()
	t.judge.emit(Outcome{Kind: ResumeWindow, Path: &PathInfo{Name: path, APIServer: apiserver}, Limit: window})
}

// WasLive reports whether path i has been live once.
func (t *Tracker) WasLive(i int) bool {
	t.lock()
	defer t.unlock()
	return t.judge.paths[i].everLive
}

// PathErr reports why path i is not usable, or nil: it has never been live,
// or its latest list or watch request failed.
func (t *Tracker) PathErr(i int) error {
	t.lock()
	defer t.unlock()
	ps := t.judge.paths[i]
	switch {
	case ps.lastErr != nil:
		return t.judge.lastErr(i)
	case !ps.everLive:
		return ErrNotSynced
	}
	return nil
}

// DownPaths describes each path that has no stream open and caught up:
// its label, and the error of its latest failed request if it has one.
func (t *Tracker) DownPaths() []string {
	t.lock()
	defer t.unlock()
	var down []string
	for i, ps := range t.judge.paths {
		switch {
		case ps == nil || ps.live:
		case ps.refused != "":
			down = append(down, ps.info.Label()+": refused ("+ps.refused+"): "+ps.lastErr.Error())
		case ps.lastErr != nil:
			down = append(down, ps.info.Label()+": "+t.judge.lastErr(i).Error())
		case !ps.everLive:
			down = append(down, ps.info.Label()+": "+ErrNotSynced.Error())
		default:
			down = append(down, ps.info.Label()+": no stream open")
		}
	}
	return down
}

// sweep declares missed, on each path, every acknowledged write older than
// the deadline that the path has not delivered; lost, every write missed
// and still undelivered past its horizon; marks paths stalled; and forgets
// settled writes older than the retention.
func (t *Tracker) sweep(now time.Time) {
	t.lock()
	defer t.unlock()
	j, l := &t.judge, &t.ledger
	// The arrivals held for the self-monitor first: a write's miss waits
	// for them.
	j.concludeHeld(now)
	j.concludeChecks(now)
	l.fallDue(now, j.deadline, func(w *PendingWrite) bool {
		switch {
		case w.done:
			return true
		case w.acked:
			return j.missAll(w, w.sent.Add(j.deadline), now)
		}
		// Its answer has not come: the writer sends one write at a time,
		// so none after it is due, and it is judged once answered.
		return false
	})
	l.compactDue()
	l.pastHorizon(now, j.horizon(), func(s *settledWrite) bool {
		if s.failed || !s.undelivered() {
			return true
		}
		// Until the exporter has stamped whatever was delivered by the
		// horizon: its end, or later if the exporter was starved at it.
		until := time.Duration(s.answered) + j.horizon()
		if j.monitor != nil {
			end := l.base.Add(until)
			if !end.Before(j.monitor.Covered()) {
				return false
			}
			resumed := j.monitor.Resumed(end)
			if !resumed.Before(j.monitor.Covered()) {
				return false
			}
			until = resumed.Sub(l.base)
		}
		for i := range int(s.paths) {
			m := s.mark(i).unpack(s.rv)
			if ps := j.paths[i]; ps != nil && (undelivered(m) || heldUndelivered(m)) && ps.flight.holds(until) {
				return false
			}
			// An arrival still waiting for the self-monitor decides a
			// held miss first, and needs the outages kept for it.
			if m.held && m.seen {
				return false
			}
		}
		w := l.expand(s, now)
		j.loseUndelivered(w, now)
		s.keep(w)
		return true
	})
	l.dropRetained(now)
	j.pruneHeld()
	j.sweepHolds(now)
	for _, r := range t.controllers {
		j.sweepReactions(r, now)
	}
	// Outages that ended before the oldest write still to be judged was
	// sent explain nothing any more.
	from, judging := l.oldestToJudge(now)
	if gone, ok := j.oldestHold(); ok && (!judging || gone.Before(from)) {
		from, judging = gone, true
	}
	for _, ps := range j.paths {
		if ps == nil {
			continue
		}
		if ps.stallsAt(now, j.stallAfter, j.deadline) {
			ps.stalled = true
			j.emit(Outcome{Kind: Stalled, Path: ps.info, At: now, Limit: now.Sub(ps.unansweredSince)})
		}
		if !judging {
			from = now
		}
		ps.trimOutages(from)
	}
	j.watchClosely(now)
}

// Pending reports how many writes are not settled yet, how many misses
// wait for a path's refusal check to say whether they are misses, and how
// many changes still wait for their controller's reaction within the
// deadline.
func (t *Tracker) Pending() int {
	t.lock()
	defer t.unlock()
	n := t.ledger.pending()
	for _, h := range t.judge.heldMisses {
		if h.check && t.judge.stillHeld(h) {
			n++
		}
	}
	for _, r := range t.controllers {
		for _, c := range r.pending {
			if !c.missed {
				n++
			}
		}
	}
	return n
}

// MarkersPending says how many markers wait for deletion, and how many of
// them other clients' finalizers hold.
func (t *Tracker) MarkersPending(n, held int) {
	t.lock()
	defer t.unlock()
	t.judge.emit(Outcome{Kind: MarkersPending, Count: n, Held: held})
}
