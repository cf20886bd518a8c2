package judge

import (
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// judge concludes, from the ledger's writes and the paths' health, what
// became of each write on each path and of each cycle, and puts each
// conclusion in out as an Outcome. It changes the marks of writes and the
// health of paths as it judges, and nothing else; it takes every time as an
// argument.
type judge struct {
	ledger     *ledger
	deadline   time.Duration
	stallAfter time.Duration
	// lostAfter is how long after its answer a write a path has not
	// delivered is counted lost there; at most the retention.
	lostAfter time.Duration
	// paths is indexed by path slot. Paths pinned to an apiserver come and
	// go; a removed path leaves a nil slot that a later path may take.
	paths []*pathState
	// etcd is the slot of the etcd path, -1 without one: the apiserver's
	// share of a write's latency is an apiserver path's arrival minus its.
	etcd int
	// cycles counts cycles started; judged is the newest cycle whose verdict
	// is the probe's. An older cycle settling later (its misses wait for
	// the deadline, which may be longer than the interval) is counted, but
	// must not overwrite the newer cycle's verdict.
	cycles, judged uint64
	// marker is the marker of the cycle under way, "" between cycles: a
	// probe writes one marker per cycle, one cycle at a time.
	marker string
	// foreignRV is the marker's newest change by another client that the
	// etcd path delivered: a selector path's DELETED at its
	// resourceVersion is that change's leave, not the probe's delete.
	foreignRV leftMarker
	// checks are what the checks of the paths' list (0) and watch (1)
	// requests over fresh connections found (refusedReason).
	checks [2]freshCheck
	// out holds what was concluded under the tracker's lock, for the sinks.
	out *[]Outcome
	// monitor is the exporter's self-monitor, nil without one; held are
	// the first arrivals whose verdict waits for it to cover their instant;
	// watching counts the pending writes it was told of (Monitor.Watch).
	monitor  Monitor
	held     []heldArrival
	watching int
	// heldMisses are the misses held at their deadline, for the
	// self-monitor or a refusal check, until concluded.
	heldMisses []heldMiss
	// closely: the monitor was told of one more pending write
	// (watchClosely) for the verdicts that wait for it beyond the
	// writes' own; closed: Close gave back every count, and none is
	// taken again.
	closely, closed bool
	// holds are the deletes other clients' finalizers held, in the order
	// held, whose DELETED some path still owes once the marker is gone.
	holds []*heldDelete
}

// heldArrival is a write's first arrival on a path, at at, whose verdict
// waits for the self-monitor: found again by sequence number and name,
// whether the write is still pending or settled since.
type heldArrival struct {
	seq  uint64
	name string
	slot int
	at   time.Time
}

// horizon is how long after the apiserver answered a write that a path has
// not delivered it is counted lost there: lostAfter, within the retention.
func (j *judge) horizon() time.Duration { return min(j.lostAfter, j.ledger.retain) }

func (j *judge) emit(o Outcome) { *j.out = append(*j.out, o) }

// about is an outcome of kind about w, on path i unless i < 0.
func (j *judge) about(k Kind, w *PendingWrite, i int, at time.Time) Outcome {
	o := Outcome{Kind: k, Marker: w.key.Name, Seq: w.key.Seq, Event: w.event.String(), At: at}
	if i >= 0 {
		o.Path = j.paths[i].info
	}
	o.Trace = w.trace
	if i >= 0 && i < len(w.marks) {
		o.RV = w.marks[i].rv
	}
	return o
}

// delivery is what one delivery of a write's marker on a path is.
type delivery uint8

const (
	// firstDelivery: the write's own event, the first time on the path.
	firstDelivery delivery = iota
	// againDelivery: a resourceVersion the path delivered before, in the
	// same relist epoch: a duplicate.
	againDelivery
	// replayDelivery: a resourceVersion the path delivered before, again
	// after a relist, as a relist is expected to.
	replayDelivery
	// foreignDelivery: a resourceVersion that carries the write's sequence
	// number but is not the write's own: someone else changed the marker.
	foreignDelivery
	// earlierDelivery: before the write's answer, a resourceVersion lower
	// than the one held: it is the write's own, and the one held was
	// someone else's change.
	earlierDelivery
	// listedState: the marker as a relist's state holds it, not an event:
	// the write's event, if the path had not delivered it, was replaced by
	// that state, and the write is not timed.
	listedState
)

// deliveryOf says what a delivery on a path is, from the marker's
// resourceVersion on it (0 when not an integer: then it is taken for the
// write's own), whether it is a relist's state rather than an event, the
// path's mark of the write, the write's own resourceVersion (0 while
// unanswered, and for a delete) and whether an epoch has passed since the
// mark's latest delivery.
func deliveryOf(m pathMark, delete bool, rv, own uint64, listed, newEpoch bool) delivery {
	again := againDelivery
	if newEpoch {
		again = replayDelivery
	}
	switch {
	case listed:
		if m.seen {
			return replayDelivery
		}
		return listedState
	case delete || rv == 0:
		// A marker is deleted once: a delete's second delivery is a repeat.
		if m.seen {
			return again
		}
		return firstDelivery
	case own != 0 && rv != own, own == 0 && m.seen && rv > m.rv:
		// A change no newer than the newest foreign one delivered is that
		// one again, or an older one after it: watch order says the path
		// had it already.
		if rv <= m.foreign {
			return again
		}
		return foreignDelivery
	case own == 0 && m.seen && rv < m.rv:
		return earlierDelivery
	case m.seen:
		return again
	}
	return firstDelivery
}

// delivered judges one delivery of w's marker, of event, on path i at
// arrival, a relist's state if listed.
func (j *judge) delivered(w *PendingWrite, i int, event string, obj metav1.Object, listed bool, arrival time.Time) {
	ps := j.paths[i]
	j.emit(Outcome{Kind: Activity, Path: ps.info, At: arrival})
	if ps.answered() {
		j.emit(Outcome{Kind: Unstalled, Path: ps.info, At: arrival})
	}
	rv := RV(obj)
	deleted := event == metrics.EventDeleted
	if !deleted {
		ps.selects(w.key.Name, rv)
	}
	switch {
	case !deleted && w.event == eventDeleted:
		// The marker marked deleting, its finalizers holding it: the
		// delete's own change, not its DELETED. Whether the delete was
		// held is its answer's to say.
		return
	case deleted && w.event != eventDeleted:
		if j.leftEvidence(w, i, rv, listed) {
			j.leftSelector(w, i, rv, listed, arrival)
		} else if listed && w.key.Name == j.marker {
			// Evidence may still come from another path: a relist can
			// race the change it missed.
			ps.tomb = tombstone{w: w, rv: rv}
		}
		return
	case deleted && (j.leftElsewhere(w.key.Name, i, rv) ||
		!listed && leftBefore(w, i, rv)):
		// Another client's leave, which another path delivered before
		// the delete was sent, or at a resourceVersion no later than the
		// state the delete removed: not the delete's DELETED, which this
		// path will not deliver now.
		j.leftAfterMiss(w, i, rv, arrival)
		j.leftSelector(w, i, rv, listed, arrival)
		j.leftBeforeDelete(w, i, arrival)
		return
	}
	if i >= len(w.marks) || !w.marks[i].expected {
		return // sent before the path existed: it owes nothing
	}
	m := &w.marks[i]
	if w.failed {
		j.emit(j.about(AfterFailedWrite, w, i, arrival))
		return
	}
	epoch := epochOf(ps.epoch)
	switch deliveryOf(*m, w.event == eventDeleted, rv, w.rv, listed, m.seen && m.epoch != epoch) {
	case againDelivery:
		m.epoch = epoch
		j.emit(j.about(Duplicate, w, i, arrival))
		return
	case replayDelivery:
		m.epoch = epoch
		j.emit(j.about(Replayed, w, i, arrival))
		return
	case listedState:
		return
	case foreignDelivery:
		m.epoch = epoch
		m.foreign = max(m.foreign, rv)
		j.foreign(w, i, obj, arrival)
		if i == j.etcd {
			if w.key.Name == j.marker {
				if j.foreignRV.name != w.key.Name || rv > j.foreignRV.rv {
					j.foreignRV = leftMarker{name: w.key.Name, rv: rv}
				}
			}
			j.confirmTombs(w.key.Name, rv, i, arrival)
		}
		return
	case earlierDelivery:
		// The change held was someone else's, after the write's own.
		m.foreign = max(m.foreign, m.rv)
		j.foreign(w, i, nil, m.arrival(w))
		m.seen, m.afterSeq = false, 0
	}
	m.seen = true
	m.epoch = epoch
	m.rv = rv
	if m.unmeasurable {
		// Judged at the answer; the DELETED of a held delete comes when
		// the finalizers go, whenever that is, and times nothing.
		if w.held {
			j.emit(j.about(Released, w, i, arrival))
		}
		return
	}
	if m.lost {
		// Counted lost when its horizon passed: a delivery now is neither
		// timed nor late, but worth a word.
		j.arrivedAfterLost(w, i, arrival)
		return
	}
	m.latency = arrival.Sub(w.sent)
	if w.key.Seq < ps.lastSeq {
		m.afterSeq = ps.lastSeq
	} else {
		ps.lastSeq = w.key.Seq
	}
	if !w.acked {
		return // judged when the response comes
	}
	j.arrived(w, i)
	if !w.done && allSeen(w) && allJudged(w) {
		j.settle(w)
	}
}

// leftBefore reports whether a DELETED at rv on path i, not yet delivered
// there, is another client's change of the marker before the delete w
// removed it: at or before the state w's answer says it removed. A relist's
// tombstone holds the last state the path knew, which is before it too, so
// it shows nothing.
func leftBefore(w *PendingWrite, i int, rv uint64) bool {
	return w.rv != 0 && rv != 0 && rv <= w.rv && i < len(w.marks) && !w.marks[i].seen
}

// leftSelector judges a DELETED on path i of the marker whose last state
// was w's, which the probe has not deleted: in the cycle under way,
// another client took the marker out of the path's label selector (or
// deleted it). It is that client's change, counted foreign, without a
// name: the object is the state before it. The path delivers nothing more
// of the marker until it matches again, so a delete before then is
// unmeasurable there. After the cycle, a marker's deletion is the
// cleaner's or someone else's, and none of the judgement's, unless it is
// the leave that took the place of the probe's delete still pending: the
// cycle ends at the delete's answer, and the leave may be heard after it.
func (j *judge) leftSelector(w *PendingWrite, i int, rv uint64, listed bool, arrival time.Time) {
	if w.key.Name != j.marker && (w.event != eventDeleted || w.done) {
		return
	}
	ps := j.paths[i]
	if ps.left.name == w.key.Name && rv <= ps.left.rv {
		if !listed {
			j.emit(j.about(Duplicate, w, i, arrival))
		}
		return
	}
	ps.left, ps.tomb = leftMarker{name: w.key.Name, rv: rv}, tombstone{}
	o := j.about(ForeignChange, w, i, arrival)
	o.RV = rv
	j.emit(o)
	j.confirmTombs(w.key.Name, rv, i, arrival)
}

// leftAfterMiss concludes the delete w on path i, missed there at its
// deadline (or its miss held for the self-monitor), whose leave path i
// delivers only now, at arrival: the marker left the path's view after
// the deadline, so the path was late, and a late arrival it is (its
// latency from the delete's send, a lower bound of the leave's own, since
// the leave was committed first), never a loss for want of a DELETED that
// could not come. It pairs with no etcd arrival. The leave is counted
// foreign here when the cycle is over, where leftSelector no longer
// counts it.
func (j *judge) leftAfterMiss(w *PendingWrite, i int, rv uint64, arrival time.Time) {
	if i >= len(w.marks) || !w.acked || w.failed {
		return
	}
	m := &w.marks[i]
	if !m.expected || !(m.missed || m.held) || m.seen || m.lost || m.unmeasurable || m.judged {
		return
	}
	if w.key.Name != j.marker && w.done {
		o := j.about(ForeignChange, w, i, arrival)
		o.RV = rv
		j.emit(o)
	}
	m.seen, m.rv, m.untimed = true, rv, true
	m.epoch = epochOf(j.paths[i].epoch)
	m.latency = arrival.Sub(w.sent)
	j.arrived(w, i)
}

// leftBeforeDelete judges the delete w unmeasurable on path i, which the
// marker has left, if it is answered and still owed there: the path will
// not deliver its DELETED. Unanswered, its answer judges it
// (outOfSelector).
func (j *judge) leftBeforeDelete(w *PendingWrite, i int, at time.Time) {
	if i < len(w.marks) && w.acked && !w.done && owed(w.marks[i]) {
		j.unmeasurable(w, i, metrics.UnmeasurableLeftSelector, "", at)
		if allSeen(w) && allJudged(w) {
			j.settle(w)
		}
	}
}

// confirmTombs takes for a selector leave each other path's relist
// tombstone of the marker name older than rv, the state another client
// changed on path from: evidence that came after the tombstone was judged.
// The marker's delete, if it is owed there, is unmeasurable there: the
// path will not deliver it. Without such evidence a tombstone stays a
// List-Watch fault, and the delete owed.
func (j *judge) confirmTombs(name string, rv uint64, from int, at time.Time) {
	if rv == 0 {
		return
	}
	for k, ps := range j.paths {
		if k == from || ps == nil || ps.tomb.w == nil || ps.tomb.w.key.Name != name || ps.tomb.rv >= rv {
			continue
		}
		t := ps.tomb
		ps.tomb = tombstone{}
		j.leftSelector(t.w, k, t.rv, true, at)
		if d := j.ledger.deletes[name]; d != nil {
			j.leftBeforeDelete(d, k, at)
		}
	}
}

// leftEvidence reports whether a DELETED on path i of the marker whose
// last state was w's, at rv, a relist's state if listed, shows another
// client's change after w: an event at a resourceVersion past w's own (the
// watch cache stamps a selector leave with the change's). A relist's
// tombstone holds only the last state the path knew, the probe's own, so
// it shows nothing: a relist that drops a marker that still exists is a
// List-Watch fault, whose delete stays owed there. It is taken for a leave
// only when another path shows a change past that state: its own leave,
// or the etcd path's foreign change.
func (j *judge) leftEvidence(w *PendingWrite, i int, rv uint64, listed bool) bool {
	if !listed && (w.rv == 0 || rv == 0 || rv > w.rv) {
		return true
	}
	for k, ps := range j.paths {
		switch {
		case k == i || ps == nil:
		case ps.left.name == w.key.Name && ps.left.rv > rv:
			return true
		case k == j.etcd && k < len(w.marks) && w.marks[k].foreign > rv:
			return true
		}
	}
	return false
}

// leftElsewhere reports whether a path other than i has the marker name
// out of its selector at rv: a DELETED at rv is that leave, not a delete.
func (j *judge) leftElsewhere(name string, i int, rv uint64) bool {
	if rv == 0 {
		return false
	}
	if i != j.etcd && j.foreignRV.name == name && j.foreignRV.rv == rv {
		return true
	}
	for k, ps := range j.paths {
		if k != i && ps != nil && ps.left.name == name && ps.left.rv == rv {
			return true
		}
	}
	return false
}

// foreign concludes a delivery of someone else's change of w's marker on
// path i: never timed or judged, but counted, with the client that made it
// (obj's newest managedFields entry not the probe's) when obj is known.
func (j *judge) foreign(w *PendingWrite, i int, obj metav1.Object, at time.Time) {
	o := j.about(ForeignChange, w, i, at)
	if obj != nil {
		o.Manager = lastManager(obj)
	}
	j.emit(o)
}

// RV is obj's resourceVersion as an integer, 0 when it is not one.
func RV(obj metav1.Object) uint64 {
	rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	return rv
}

// lastManager names the client that changed obj last, other than the
// probe: the manager of its newest managedFields entry not the probe's,
// "" when none is known.
func lastManager(obj metav1.Object) string {
	var name string
	var newest time.Time
	for _, e := range obj.GetManagedFields() {
		if e.Manager == FieldManager {
			continue
		}
		var at time.Time // an entry without a time is older than any with one
		if e.Time != nil {
			at = e.Time.Time
		}
		if name == "" || !at.Before(newest) {
			name, newest = e.Manager, at
		}
	}
	return name
}

// arrived judges the first arrival of the acknowledged write w on path i:
// its latency, and whether it came out of order, after its deadline, or
// after its lost horizon. An arrival after the deadline is late, and the
// write missed on that path, whenever the sweep happens to run.
func (j *judge) arrived(w *PendingWrite, i int) {
	m := &w.marks[i]
	if m.judged {
		return
	}
	arrival := m.arrival(w)
	if m.latency < 0 && j.beforeSend(w, i, arrival) {
		return
	}
	end := j.ledger.answeredAt(w).Add(j.horizon())
	pastHorizon := arrival.After(end)
	// A write already counted missed (the exporter was not starved at its
	// deadline) arrives late whatever the exporter's state now: the miss
	// stands, and missed = late + lost must hold. Any other verdict waits
	// for the self-monitor, and is the exporter's if it was starved where
	// that could have moved it. After the horizon, starvation there may
	// only have delayed the stamp of an event delivered before it: such an
	// arrival is late, not lost.
	if j.monitor != nil && (pastHorizon || !m.missed) {
		if !arrival.Before(j.monitor.Covered()) {
			j.held = append(j.held, heldArrival{seq: w.key.Seq, name: w.key.Name, slot: i, at: arrival})
			return
		}
		if pastHorizon {
			pastHorizon = arrival.After(j.monitor.Resumed(end))
		} else if j.starvedArrival(w, i) {
			return
		}
	}
	m.judged, m.held = true, false
	latency := m.latency
	if pastHorizon {
		// Past the lost horizon, which the sweep has not reached yet: the
		// verdict is the one it would have given.
		if !m.missed {
			j.miss(w, i, arrival)
		}
		j.lose(w, i, arrival)
		j.arrivedAfterLost(w, i, arrival)
		return
	}
	if m.afterSeq != 0 {
		o := j.about(OutOfOrder, w, i, arrival)
		o.AfterSeq = m.afterSeq
		j.emit(o)
	}
	// Late is the arrival's own verdict: its stamp after the deadline.
	// The sweep waits for what is in flight, so a write it missed can only
	// arrive late.
	late := latency > j.deadline
	if late && !m.missed {
		// Held at the deadline too, if the exporter was starved then: the
		// arrival, stamped while it was not, shows the write was late.
		j.miss(w, i, arrival)
	}
	o := j.about(Arrived, w, i, arrival)
	o.Latency, o.Late = latency, late || m.missed
	j.emit(o)
	j.apiserverLag(w, i)
}

// beforeSend judges w's first arrival on path i, stamped at arrival before
// w's send (the transport's stamp of its latest attempt), and reports
// whether that concluded it. Sent once, the write cannot have caused it:
// for a delete, it is another client's leave committed just before, and
// the path will not deliver the delete's DELETED now. Sent more than once,
// an earlier attempt may have committed it, so it is timed from the
// write's first send. A latency is never negative.
func (j *judge) beforeSend(w *PendingWrite, i int, arrival time.Time) bool {
	if w.event == eventDeleted && w.attempts.Load() <= 1 {
		j.leftSelector(w, i, w.marks[i].rv, false, arrival)
		j.unmeasurable(w, i, metrics.UnmeasurableLeftSelector, "", arrival)
		return true
	}
	w.marks[i].latency = max(arrival.Sub(j.ledger.base.Add(time.Duration(w.first))), 0)
	return false
}

// starvedArrival concludes w's first arrival on path i, before its lost
// horizon, unmeasurable, and says so, if the exporter was starved where
// that could have moved its verdict: near the send or near the arrival's
// stamp.
func (j *judge) starvedArrival(w *PendingWrite, i int) bool {
	arrival := w.marks[i].arrival(w)
	starved := j.monitor.Starved(w.sent, arrival)
	if starved {
		j.starved(w, i, arrival)
	}
	return starved
}

// starved concludes w unmeasurable on path i at at: the exporter was
// starved where that could have moved its verdict. It is final: no
// latency, no miss, no loss, and the cycle has no verdict unless something
// else failed it.
func (j *judge) starved(w *PendingWrite, i int, at time.Time) {
	j.unmeasurable(w, i, metrics.UnmeasurableStarved, "", at)
	w.cycle.unmeasurable = true
}

// apiserverLag concludes, once w's arrival on path i is judged, the
// apiserver's share of its latency on every apiserver path that can be
// paired with the etcd path's arrival: both timed, on time or late. An
// arrival after the lost horizon has no latency, an unmeasurable write
// none to pair, and a path added after the write owes it nothing: none of
// them is paired. Both arrivals are stamped on their own goroutines, so a
// lag within scheduling noise can be slightly negative; it is kept as it
// is.
func (j *judge) apiserverLag(w *PendingWrite, i int) {
	if j.etcd < 0 || j.etcd >= len(w.marks) || !w.marks[j.etcd].timed() {
		return
	}
	e := &w.marks[j.etcd]
	lag := func(k int) {
		m := &w.marks[k]
		if m.timed() && j.paths[k] != nil {
			o := j.about(APIServerLag, w, k, w.sent.Add(m.latency))
			o.Latency = m.latency - e.latency
			j.emit(o)
		}
	}
	if i != j.etcd {
		lag(i)
		return
	}
	for k := range w.marks {
		if k != j.etcd {
			lag(k)
		}
	}
}

// timed reports whether m's first arrival was judged with a latency, on
// time or late.
func (m pathMark) timed() bool {
	return m.expected && m.judged && !m.lost && !m.unmeasurable && !m.untimed
}

// answered judges the apiserver's answer to w at now, rv the
// resourceVersion it names (for a delete, the state it removed; 0 for
// none; see PendingWrite.rv): success judges the arrivals held
// for it, failure discards them. A path that has not delivered it is judged
// by the sweep, however late the answer: an event stamped before the
// deadline may still be on its way to the lock.
func (j *judge) answered(w *PendingWrite, rv uint64, err error, now time.Time) {
	o := j.about(Answered, w, -1, now)
	o.Verb, o.Err, o.Code = eventVerbs[w.event], err, StatusCode(err)
	if err != nil {
		r := WriteRefusal(err)
		o.Reason, o.RefusedBy = r.Cause, r.By
	}
	o.Latency = now.Sub(j.ledger.base.Add(time.Duration(w.first)))
	j.emit(o)
	if err != nil {
		w.failed = true
		w.cycle.ok = false
		for i, m := range w.marks {
			if m.seen && j.paths[i] != nil {
				j.emit(j.about(AfterFailedWrite, w, i, now))
			}
		}
		if o.Code >= 400 && o.Code < 500 {
			// Refused, so never committed: no event can follow, and the
			// cleaner's later delete of the marker is not this write's.
			j.ledger.forget(w)
		}
		j.settle(w)
		return
	}
	if w.event == eventDeleted && rv == RemovedUnknown {
		// Another client changed the marker between each preconditioned
		// delete, and the last went without one: a DELETED a path holds
		// or gets may be that client's (a label strip) as well as the
		// probe's, so no path's timing of it is the delete's.
		rv = 0
		for i, m := range w.marks {
			if m.expected && !m.unmeasurable && j.paths[i] != nil {
				j.unmeasurable(w, i, metrics.UnmeasurableDeleteRaced, "", now)
			}
		}
	}
	w.acked, w.rv = true, rv
	if w.event == eventDeleted {
		if own := j.ownBefore(w); own != 0 && rv > own && !w.held {
			// The delete removed a state past the probe's last write:
			// another client changed the marker in between, evidence
			// for a relist's tombstone of an older state, whose path may
			// hear nothing more of that change before the cycle ends. A
			// held delete's state is its own marking.
			j.confirmTombs(w.key.Name, rv, -1, now)
		}
		j.outOfSelector(w, now)
	}
	for i := range w.marks {
		m := &w.marks[i]
		switch ps := j.paths[i]; {
		case !m.expected, m.unmeasurable:
		case m.seen && rv != 0 && m.rv != 0 && m.rv <= rv && w.event == eventDeleted:
			// A DELETED at or before the state the delete removed:
			// another client's leave, and the delete's own will not come.
			m.seen, m.afterSeq = false, 0
			j.leftSelector(w, i, m.rv, false, m.arrival(w))
			j.unmeasurable(w, i, metrics.UnmeasurableLeftSelector, "", now)
		case m.seen && rv != 0 && m.rv != 0 && m.rv != rv && w.event != eventDeleted:
			// What the path held was someone else's later change; the
			// write's own event has not arrived there.
			m.seen, m.afterSeq, m.foreign = false, 0, max(m.foreign, m.rv)
			j.foreign(w, i, nil, m.arrival(w))
			if ps.unansweredSince.IsZero() {
				ps.unansweredSince = w.sent
			}
		case m.seen:
			j.arrived(w, i)
		case ps.unansweredSince.IsZero():
			ps.unansweredSince = w.sent
		}
	}
	if allSeen(w) && allJudged(w) {
		j.settle(w)
	}
}

// ownBefore is the resourceVersion the probe's write before the delete w,
// of the same marker, was answered with: 0 when it is not known (failed,
// retained no longer).
func (j *judge) ownBefore(w *PendingWrite) uint64 {
	l := j.ledger
	if p := l.byKey[w.key.Seq-1]; p != nil && p.key.Name == w.key.Name && !p.failed {
		return p.rv
	}
	if s := l.settled.find(w.key.Seq - 1); s != nil && s.name == w.key.Name && !s.failed {
		return s.rv
	}
	return 0
}

// blocked judges the delete w, answered at now with the marker held: its
// deletion waits for other clients' finalizers, so no path owes its
// DELETED, which comes when they go. It is unmeasurable on every path,
// naming the finalizers' managers, and an arrival held for the answer is
// not timed.
func (j *judge) blocked(w *PendingWrite, held metav1.Object, now time.Time) {
	w.held = true
	manager := strings.Join(FinalizerManagers(held), ",")
	for i, m := range w.marks {
		if m.expected && j.paths[i] != nil {
			j.unmeasurable(w, i, metrics.UnmeasurableDeleteBlocked, manager, now)
		}
	}
}

// outOfSelector judges the delete w, answered at now, unmeasurable on
// every path the marker had left: they deliver no more of it.
func (j *judge) outOfSelector(w *PendingWrite, now time.Time) {
	for i, m := range w.marks {
		if ps := j.paths[i]; m.expected && !m.unmeasurable && ps != nil && ps.left.name == w.key.Name {
			j.unmeasurable(w, i, metrics.UnmeasurableLeftSelector, "", now)
		}
	}
}

// unmeasurable judges w unmeasurable on path i at now, for reason, with
// the client behind it when known.
func (j *judge) unmeasurable(w *PendingWrite, i int, reason, manager string, now time.Time) {
	m := &w.marks[i]
	m.unmeasurable, m.held, m.judged = true, false, true
	o := j.about(Unmeasurable, w, i, now)
	o.Reason, o.Manager = reason, manager
	j.emit(o)
}

// missAll declares the acknowledged write w, due at due, missed on every
// path that has not delivered it, and settles it; unless a path has
// something in flight stamped by then, which may be w's event, or (with a
// self-monitor) the monitor has not covered due yet or an arrival of w
// still waits for it: then it judges nothing more and returns false, to be
// called again. A path refused since before w was sent (refusedOver:
// the exporter's own configuration) could not have received it:
// there the write is unmeasurable, not missed. A path's miss is held
// instead, neither counted nor cleared, while the refusals it has had
// since before the send wait for their check over fresh connections
// (checkAwaited): the check's answer decides, whenever it comes
// (concludeChecks), or else the arrival or the lost horizon; and if the
// exporter was starved near the send or the deadline: its arrival or its
// lost horizon decides (arrived, loseUndelivered).
func (j *judge) missAll(w *PendingWrite, due, now time.Time) bool {
	for i, m := range w.marks {
		if owed(m) && j.paths[i] != nil && j.paths[i].flight.holds(due.Sub(j.ledger.base)) {
			return false
		}
	}
	if j.monitor != nil {
		if !due.Before(j.monitor.Covered()) {
			return false
		}
		for _, m := range w.marks {
			if m.expected && m.seen && !m.judged && w.acked {
				return false
			}
		}
	}
	for i, m := range w.marks {
		if !owed(m) {
			continue
		}
		ps := j.paths[i]
		if ps != nil && ps.refusedOver(w.sent) {
			// Its own permissions, not the cluster: the write is not
			// observed on every path, so its cycle fails.
			j.unmeasurable(w, i, metrics.UnmeasurablePathRefused, "", now)
			w.cycle.ok = false
			continue
		}
		starved := j.monitor != nil && j.monitor.Starved(w.sent, due)
		if check := ps != nil && j.checkAwaited(i, w.sent); check || starved {
			j.holdMiss(w, i, check, starved)
			continue
		}
		j.miss(w, i, now)
	}
	j.settle(w)
	return true
}

// miss counts w missed on path i, with the reason the path's outages give.
func (j *judge) miss(w *PendingWrite, i int, now time.Time) {
	ps := j.paths[i]
	w.marks[i].missed = true
	w.cycle.ok = false
	o := j.about(Missed, w, i, now)
	o.Reason, o.Limit = missReason(ps.outages, w.sent, w.sent.Add(j.deadline)), j.deadline
	j.emit(o)
}

// lose counts w lost on path i, which has missed it, with the reason the
// path's outages between the send and the horizon give.
func (j *judge) lose(w *PendingWrite, i int, now time.Time) {
	ps := j.paths[i]
	w.marks[i].lost = true
	o := j.about(Lost, w, i, now)
	o.Reason = lostReason(ps.outages, w.sent, j.ledger.answeredAt(w).Add(j.horizon()), j.deadline)
	o.Limit = j.horizon()
	j.emit(o)
}

// loseUndelivered counts w lost on every path that missed it and has not
// delivered it since: its horizon has passed, and the exporter has run
// since for long enough to have stamped anything delivered before it (the
// sweep waits for Monitor.Resumed). A path that held its miss at the
// deadline counts it missed and lost now, and holds it no more. A write
// that is never delivered is lost, however starved the exporter was: its
// starvation can delay a stamp, never take a delivered event away.
func (j *judge) loseUndelivered(w *PendingWrite, now time.Time) {
	for i, m := range w.marks {
		switch {
		case j.paths[i] == nil:
		case undelivered(m):
			j.lose(w, i, now)
		case heldUndelivered(m):
			w.marks[i].held = false
			j.miss(w, i, now)
			j.lose(w, i, now)
		}
	}
}

// undelivered: missed, and neither delivered since nor counted lost.
func undelivered(m pathMark) bool { return m.expected && m.missed && !m.seen && !m.lost }

// heldUndelivered: its miss held at the deadline, not delivered since, nor
// counted since.
func heldUndelivered(m pathMark) bool {
	return m.expected && m.held && !m.seen && !m.missed && !m.lost && !m.unmeasurable
}

// arrivedAfterLost concludes a delivery of w on path i after w was counted
// lost there.
func (j *judge) arrivedAfterLost(w *PendingWrite, i int, arrival time.Time) {
	o := j.about(ArrivedAfterLost, w, i, arrival)
	o.Latency, o.Limit = arrival.Sub(w.sent), j.horizon()
	j.emit(o)
}

// loseGone counts w, missed on path i and not delivered since, lost as
// unavailable there: the path is removed before its horizon, and its counts
// must still add up (missed = late + lost) for as long as its series stay.
func (j *judge) loseGone(w *PendingWrite, i int) {
	o := j.about(Lost, w, i, time.Time{})
	o.Reason, o.Gone = metrics.MissedUnavailable, true
	j.emit(o)
}

// owed: expected, and neither delivered, missed, judged unmeasurable nor
// held for the self-monitor.
func owed(m pathMark) bool {
	return m.expected && !m.seen && !m.missed && !m.unmeasurable && !m.held
}

// allSeen reports whether every path that owes w has delivered it.
func allSeen(w *PendingWrite) bool {
	for _, m := range w.marks {
		if m.expected && !m.seen && !m.unmeasurable {
			return false
		}
	}
	return true
}

// settle records that every path delivered, missed or lost w, or that it
// failed, and judges its cycle if that was the cycle's last.
func (j *judge) settle(w *PendingWrite) {
	if w.done {
		return
	}
	w.done = true
	// After Close, which told the monitor of every pending write at once
	// (a sweep under way may still settle one), there is nothing to take
	// back: the monitor's count is shared by every probe, and must not go
	// below what they are watching.
	if j.monitor != nil && j.watching > 0 {
		j.monitor.Watch(-1)
		j.watching--
	}
	j.emit(j.about(Settled, w, -1, time.Time{}))
	w.cycle.pending--
	j.settleCycle(w.cycle)
}

// settleCycle judges c once no write can join it and all of its writes are
// settled, unless the exporter's own shutdown cut it short.
func (j *judge) settleCycle(c *Cycle) {
	if c.open || c.pending > 0 || c.abandoned {
		return
	}
	if c.ok && c.unmeasurable {
		// Nothing the cluster did failed it, and not all of it could be
		// judged: no verdict, and the probe's stays the newest judged one.
		j.emit(Outcome{Kind: CycleJudged, Cycle: c.n, Reason: metrics.UnmeasurableStarved})
		return
	}
	newest := c.n > j.judged
	if newest {
		j.judged = c.n
	}
	j.emit(Outcome{Kind: CycleJudged, Cycle: c.n, OK: c.ok, Newest: newest})
}

// removed concludes w on path i, which is removed: what it missed and has
// not delivered is lost there, as unavailable; what it held at the
// deadline, unmeasurable, since its horizon will not come.
func (j *judge) removed(w *PendingWrite, i int) {
	switch m := w.marks[i]; {
	case undelivered(m):
		j.loseGone(w, i)
	case heldUndelivered(m):
		j.starved(w, i, time.Time{})
	}
}

// concludeHeld judges the arrivals held for the self-monitor that it has
// covered since, by now. Judging one may hold it again (an arrival after
// its horizon waits for the exporter to have resumed), so those due are
// taken out of held first.
func (j *judge) concludeHeld(now time.Time) {
	if len(j.held) == 0 {
		return
	}
	covered := j.monitor.Covered()
	var due []heldArrival
	kept := j.held[:0]
	for _, h := range j.held {
		if !h.at.Before(covered) {
			kept = append(kept, h)
			continue
		}
		due = append(due, h)
	}
	clear(j.held[len(kept):])
	j.held = kept
	for _, h := range due {
		j.concludeArrival(h, now, func(w *PendingWrite, i int) { j.arrived(w, i) })
	}
}

// dropHeld concludes the held arrivals of path i, which is removed: those
// the self-monitor has covered as they come out, the others unmeasurable
// (or lost as unavailable, if missed already), since the path's slot may
// be given to another path.
func (j *judge) dropHeld(i int, now time.Time) {
	if len(j.held) == 0 {
		return
	}
	j.concludeHeld(now)
	kept := j.held[:0]
	for _, h := range j.held {
		if h.slot != i {
			kept = append(kept, h)
			continue
		}
		j.concludeArrival(h, now, func(w *PendingWrite, i int) {
			if w.marks[i].missed {
				// Counted missed already, and arrived after its horizon:
				// late or lost is undecided, and missed = late + lost
				// must hold for as long as the path's series stay.
				w.marks[i].judged, w.marks[i].lost = true, true
				j.loseGone(w, i)
				return
			}
			j.starved(w, i, h.at)
		})
	}
	clear(j.held[len(kept):])
	j.held = kept
}

// concludeArrival finds the write of held arrival h, pending or settled
// since, and concludes its arrival with conclude unless that is done; a
// pending write whose last verdict that was settles.
func (j *judge) concludeArrival(h heldArrival, now time.Time, conclude func(*PendingWrite, int)) {
	l := j.ledger
	w, s := l.byKey[h.seq], (*settledWrite)(nil)
	if w == nil || w.key.Name != h.name {
		if s = l.settled.find(h.seq); s == nil || s.name != h.name {
			return // retained no longer
		}
		w = l.expand(s, now)
	}
	if h.slot >= len(w.marks) || !w.marks[h.slot].expected || w.marks[h.slot].judged {
		return
	}
	// A settled write keeps no latency: the arrival's instant gives it.
	w.marks[h.slot].latency = h.at.Sub(w.sent)
	conclude(w, h.slot)
	if s != nil {
		s.keep(w)
	} else if !w.done && allSeen(w) && allJudged(w) {
		j.settle(w)
	}
}

// allJudged reports whether every arrival of w on a path that owes it has
// been judged: none waits for the self-monitor.
func allJudged(w *PendingWrite) bool {
	for _, m := range w.marks {
		if m.expected && m.seen && !m.judged {
			return false
		}
	}
	return true
}
