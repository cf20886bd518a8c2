package judge

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

const verbUpdate = metrics.VerbUpdate

// The judgement of controller reactions: for each spec change of a
// controller's marker object, whether the controller's status answer
// (status.observedGeneration reaching the change's generation) arrived on
// the exporter's own watch, and when. It lives under the tracker's lock
// beside the writes' ledger, is swept by the same sweeper, and concludes
// Outcomes for the same sinks; the functions that decide take every time
// as an argument.

// change is one acknowledged spec change a controller owes a reaction to.
type change struct {
	uid       types.UID
	gen       int64
	sent      time.Time
	answered  time.Time
	delivered time.Time // the change itself on the exporter's watch; zero until then
	missed    bool
}

// seenAt is the first arrival of a value (a generation, an
// observedGeneration) on the exporter's watch of a controller's object.
type seenAt struct {
	value int64
	at    time.Time
}

// seenKept bounds the arrivals a controller keeps for changes not yet
// answered: an arrival matters only in the moment between a change's send
// and its answer, for the change's own event or a reaction that beat the
// response.
const seenKept = 16

// reactionState is one controller's: its object, the changes it owes and
// the latest arrivals on the exporter's watch of the object.
type reactionState struct {
	name string
	uid  types.UID
	// pending are the acknowledged changes not yet reacted to or lost, in
	// the order they were answered, so by generation.
	pending []*change
	// generations and observed are the first arrivals of each generation
	// and each observedGeneration of the object uid, oldest first.
	generations, observed []seenAt
	// flight is the stamp of an arrival on the exporter's watch of the
	// object on its way to the judgement, as for a path's.
	flight inFlight
}

// firstReaching returns the first arrival in seen of a value at least v:
// observedGeneration only grows, and a status that reached a later
// generation answers every earlier change too.
func firstReaching(seen []seenAt, v int64) (time.Time, bool) {
	for _, s := range seen {
		if s.value >= v {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// note records the first arrival of value at at, keeping seenKept.
func note(seen []seenAt, value int64, at time.Time) []seenAt {
	if n := len(seen); n > 0 && seen[n-1].value >= value {
		return seen // not new: only the first arrival counts
	}
	seen = append(seen, seenAt{value, at})
	if len(seen) > seenKept {
		seen = append(seen[:0], seen[len(seen)-seenKept:]...)
	}
	return seen
}

// reactionLatency is a reaction's latency, from the change's send, and
// whether it came after the deadline.
func reactionLatency(c *change, arrival time.Time, deadline time.Duration) (time.Duration, bool) {
	latency := arrival.Sub(c.sent)
	return latency, c.missed || latency > deadline
}

// controllerShare is a reaction's arrival minus the arrival of the change
// itself on the exporter's watch: what the controller added to the delivery
// every watcher of the object waited for. Negative (unknown) when the
// change was never seen there, as after a relist that showed only the
// object's final state.
func controllerShare(c *change, arrival time.Time) time.Duration {
	if c.delivered.IsZero() {
		return -1
	}
	return arrival.Sub(c.delivered)
}

// reactionReason is why c's reaction is missing: the controller's fault
// only if the change itself had reached the exporter's own watch of the
// object, which the controller's informer could then have seen too.
func reactionReason(c *change) string {
	if c.delivered.IsZero() {
		return metrics.ReactionUndelivered
	}
	return metrics.ReactionController
}

// reactionMissedAt reports whether, at now, an unreacted change has passed
// its deadline and not been counted missed yet.
func reactionMissedAt(c *change, now time.Time, deadline time.Duration) bool {
	return !c.missed && now.Sub(c.sent) > deadline
}

// reactionLostAt reports whether, at now, an unreacted change has passed
// its lost horizon, counted from its answer as for writes.
func reactionLostAt(c *change, now time.Time, lostAfter time.Duration) bool {
	return now.Sub(c.answered) > lostAfter
}

// changed judges a write of controller r's object uid, of verb (create or
// update) to generation gen, sent at sent and answered at answered, with
// err if it failed. A change (an update) that succeeded is owed a
// reaction; a reaction or the change's own event that arrived before the
// answer is matched here. A create is owed none: the controller's first
// sync of an object does more than a change's (the Deployment's
// ReplicaSet), and is not what is timed.
func (j *judge) changed(r *reactionState, verb string, uid types.UID, gen int64, sent, answered time.Time, err error) {
	if at, ok := firstReaching(r.observed, gen); ok && err == nil && verb == verbUpdate && uid == r.uid && at.Before(sent) {
		// Answered before this write was sent: the generation was an
		// earlier change's, whose answer was lost, and this write changed
		// nothing. It is no change, and owed nothing.
		return
	}
	j.emit(Outcome{Kind: ControllerChanged, Controller: r.name, Verb: verb, Seq: uint64(gen), At: answered,
		Latency: answered.Sub(sent), Err: err, Code: StatusCode(err)})
	if err != nil {
		return
	}
	if uid != r.uid {
		j.replaced(r, uid)
	}
	if verb != verbUpdate {
		return
	}
	c := &change{uid: uid, gen: gen, sent: sent, answered: answered}
	if at, ok := firstReaching(r.generations, gen); ok {
		c.delivered = at
	}
	if at, ok := firstReaching(r.observed, gen); ok {
		if !c.delivered.Before(at) {
			c.delivered = time.Time{} // seen first with its answer: no share
		}
		j.reacted(r, c, at)
		return
	}
	r.pending = append(r.pending, c)
}

// replaced forgets what was seen of a controller's previous object: a new
// one (recreated after it was deleted) counts its generations from 1. The
// changes still owed by the old one are dropped, not lost: no status of
// the new object can answer them, and their object's deletion is not the
// controller's failure.
func (j *judge) replaced(r *reactionState, uid types.UID) {
	r.uid, r.generations, r.observed = uid, nil, nil
	r.pending = r.pending[:0]
}

// seen judges an arrival of controller r's object uid, at generation gen
// and observedGeneration observed, on the exporter's watch.
func (j *judge) seen(r *reactionState, uid types.UID, gen, observed int64, at time.Time) {
	if uid != r.uid {
		if len(r.pending) > 0 {
			return // an older object's last events: not the changes owed
		}
		j.replaced(r, uid)
	}
	r.generations = note(r.generations, gen, at)
	r.observed = note(r.observed, observed, at)
	kept := r.pending[:0]
	for _, c := range r.pending {
		if observed >= c.gen {
			// A change first seen with its answer (after a relist, which
			// shows only the final state) has no share to tell.
			j.reacted(r, c, at)
			continue
		}
		if c.delivered.IsZero() && gen >= c.gen {
			c.delivered = at
		}
		kept = append(kept, c)
	}
	clear(r.pending[len(kept):])
	r.pending = kept
}

// reacted concludes the reaction to c, arrived at arrival.
func (j *judge) reacted(r *reactionState, c *change, arrival time.Time) {
	latency, late := reactionLatency(c, arrival, j.deadline)
	if late && !c.missed {
		c.missed = true
		j.emit(Outcome{Kind: ReactionMissed, Controller: r.name, Seq: uint64(c.gen), At: arrival, Limit: j.deadline, Reason: reactionReason(c)})
	}
	j.emit(Outcome{Kind: Reacted, Controller: r.name, Seq: uint64(c.gen), At: arrival, Latency: latency, Late: late || c.missed,
		Limit: j.deadline, Share: controllerShare(c, arrival)})
}

// sweepReactions counts, at now, the changes of r past their deadline as
// missed and those past their horizon as lost.
func (j *judge) sweepReactions(r *reactionState, now time.Time) {
	// An arrival stamped by a verdict's instant and still on its way may
	// be the reaction: the verdict waits for it.
	held := func(due time.Time) bool { return r.flight.holds(due.Sub(j.ledger.base)) }
	kept := r.pending[:0]
	for _, c := range r.pending {
		if reactionMissedAt(c, now, j.deadline) && !held(c.sent.Add(j.deadline)) {
			c.missed = true
			j.emit(Outcome{Kind: ReactionMissed, Controller: r.name, Seq: uint64(c.gen), At: now, Limit: j.deadline, Reason: reactionReason(c)})
		}
		if reactionLostAt(c, now, j.lostAfter) && !held(c.answered.Add(j.lostAfter)) {
			j.emit(Outcome{Kind: ReactionLost, Controller: r.name, Seq: uint64(c.gen), At: now, Limit: j.lostAfter, Reason: reactionReason(c)})
			continue
		}
		kept = append(kept, c)
	}
	clear(r.pending[len(kept):])
	r.pending = kept
}

// AddControllers gives the tracker the probe's controllers, before it runs.
func (t *Tracker) AddControllers(names []string) {
	for _, name := range names {
		t.controllers = append(t.controllers, &reactionState{name: name})
	}
}

// ControllerWrote records the apiserver's answer to a write of controller
// i's object (see judge.changed).
func (t *Tracker) ControllerWrote(i int, verb string, uid types.UID, gen int64, sent, answered time.Time, err error) {
	t.lock()
	defer t.unlock()
	t.judge.changed(t.controllers[i], verb, uid, gen, sent, answered, err)
}

// ControllerSeen records an arrival of controller i's object on the
// exporter's watch of it, stamped with controllerStamp.
func (t *Tracker) ControllerSeen(i int, uid types.UID, gen, observed int64, at time.Time) {
	t.lock()
	defer t.unlock()
	r := t.controllers[i]
	t.judge.seen(r, uid, gen, observed, at)
	r.flight.end()
}

// ControllerStamp stamps an arrival on controller i's watch (see stamp).
func (t *Tracker) ControllerStamp(i int) time.Time {
	return t.stamp(&t.controllers[i].flight, time.Now)
}

// ControllerHanded ends controller i's flight when nothing is handed over.
func (t *Tracker) ControllerHanded(i int) { t.controllers[i].flight.end() }
