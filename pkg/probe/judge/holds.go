package judge

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// heldDelete is a delete of the probe's that other clients' finalizers
// held: unmeasurable on every path (delete_blocked), since nobody knows
// when they will let go. Once they have and the marker is shown gone (a
// path's DELETED, or the cleaner finding it absent), the instant the
// deletion committed is still unknown, but it was no later than that
// evidence: every other path owes the DELETED within the lost horizon from
// it, and one that never delivers it has lost it. There is no deadline
// verdict: the deletion's own instant, which a latency or a lateness
// would count from, is not known.
type heldDelete struct {
	key   WriteKey
	trace trace.SpanContext
	// rv is the resourceVersion the hold marked the marker deleting at:
	// the deletion's DELETED carries a later one.
	rv uint64
	// owed, by slot, is the path that owes the DELETED, nil once it has
	// delivered it or for a slot that owed nothing (a path that did not
	// expect the delete, or that the marker had left).
	owed []*pathState
	// gone is the first evidence that the marker is gone, zero until
	// then; goneAll the first that every path owes: the etcd path's
	// DELETED or the cleaner's. A selector path's DELETED may be another
	// client's label strip of the held marker, which only the paths with
	// the same selector owe.
	gone, goneAll time.Time
}

// maxHolds bounds the held deletes judged: finalizers that never go would
// otherwise grow the list for ever. The oldest is dropped, unjudged, for a
// newer one.
const maxHolds = 1000

// hold starts judging the held delete w: the paths that owe it nothing yet
// owe its DELETED once the marker is shown gone. A path that delivered the
// deletion's DELETED before the hold's answer (the finalizers went at
// once) shows the marker gone then.
func (j *judge) hold(w *PendingWrite) {
	h := &heldDelete{key: w.key, trace: w.trace, rv: w.rv, owed: make([]*pathState, len(w.marks))}
	for i, m := range w.marks {
		if ps := j.paths[i]; m.expected && ps != nil && ps.left.name != w.key.Name && !m.seen {
			h.owed[i] = ps
		}
	}
	if len(j.holds) == maxHolds {
		j.holds[0] = nil
		j.holds = j.holds[1:]
	}
	j.holds = append(j.holds, h)
	for i, m := range w.marks {
		if m.expected && j.paths[i] != nil && m.seen && (m.rv == 0 || m.rv > w.rv) {
			j.shownGone(h, m.arrival(w), i == j.etcd)
		}
	}
	j.dropIfDone(h)
}

// heldGone records a DELETED of obj on path i at arrival, a relist's
// tombstone if listed, if it is that of a held delete's marker: the path
// has delivered it, and the marker is gone (from path i's view, at least).
// A DELETED at or before the state the hold marked is another client's
// earlier change, not the deletion. A tombstone holds the last state the
// path knew: the path has shown the marker's end, but that shows nothing
// of when it went.
func (j *judge) heldGone(i int, obj metav1.Object, listed bool, arrival time.Time) {
	h := j.holdOf(obj.GetName())
	if h == nil {
		return
	}
	rv := RV(obj)
	if !listed && rv != 0 && rv <= h.rv {
		return
	}
	if i < len(h.owed) {
		h.owed[i] = nil
	}
	if listed {
		j.dropIfDone(h)
		return
	}
	j.shownGone(h, arrival, i == j.etcd)
}

// MarkerGone records that the cleaner found the marker name absent at at:
// if a delete of it was held, every path owes its DELETED now. It
// concludes nothing itself (the sweep does), so it hands no outcome to the
// sinks: the cleaner calls it under its own lock, which the sink that
// tells it of releases takes.
func (t *Tracker) MarkerGone(name string, at time.Time) {
	t.lock()
	defer t.unlock()
	if h := t.judge.holdOf(name); h != nil {
		t.judge.shownGone(h, at, true)
	}
}

// shownGone records evidence at at that h's marker is gone, for every
// path if everywhere, and drops h if no path owes anything more.
func (j *judge) shownGone(h *heldDelete, at time.Time, everywhere bool) {
	if h.gone.IsZero() || at.Before(h.gone) {
		h.gone = at
	}
	if everywhere && (h.goneAll.IsZero() || at.Before(h.goneAll)) {
		h.goneAll = at
	}
	j.dropIfDone(h)
}

// dropIfDone drops h once no path owes its DELETED, and says whether it
// did.
func (j *judge) dropIfDone(h *heldDelete) bool {
	for _, ps := range h.owed {
		if ps != nil {
			return false
		}
	}
	j.dropHold(h)
	return true
}

func (j *judge) holdOf(name string) *heldDelete {
	for k := len(j.holds) - 1; k >= 0; k-- {
		if j.holds[k].key.Name == name {
			return j.holds[k]
		}
	}
	return nil
}

func (j *judge) dropHold(h *heldDelete) {
	for k, o := range j.holds {
		if o == h {
			j.holds = slices.Delete(j.holds, k, k+1)
			return
		}
	}
}

// sweepHolds counts, at now, the DELETED of each held delete lost on every
// path that owes it and has not delivered it within the lost horizon from
// the first evidence that the marker is gone (missed and lost at once, as
// a write whose miss was held is): once the exporter has stamped whatever
// was delivered by then (Monitor.Resumed) and the path holds no stamp
// from before it. A selector path's evidence obliges the selector paths;
// the etcd path owes it from the etcd path's or the cleaner's evidence,
// and nothing once the selector paths' horizon has passed without such.
func (j *judge) sweepHolds(now time.Time) {
	for k := 0; k < len(j.holds); k++ {
		h := j.holds[k]
		if h.gone.IsZero() {
			continue
		}
		if until, ok := j.holdDue(h.gone, now); ok {
			for i := range h.owed {
				if i != j.etcd && !j.holdPending(h, i, until) {
					j.loseHeld(h, i, h.gone, now)
				}
			}
			if h.goneAll.IsZero() && j.etcd >= 0 && j.etcd < len(h.owed) {
				h.owed[j.etcd] = nil // never shown gone on its behalf
			}
		}
		if i := j.etcd; !h.goneAll.IsZero() && i >= 0 && i < len(h.owed) && h.owed[i] != nil {
			if until, ok := j.holdDue(h.goneAll, now); ok && !j.holdPending(h, i, until) {
				j.loseHeld(h, i, h.goneAll, now)
			}
		}
		if j.dropIfDone(h) {
			k--
		}
	}
}

// holdDue reports whether the lost horizon from gone has passed by now and
// the exporter has stamped whatever was delivered by then, and until when
// a path's stamp in flight may still be such a delivery.
func (j *judge) holdDue(gone, now time.Time) (time.Time, bool) {
	end := gone.Add(j.horizon())
	if !now.After(end) {
		return end, false
	}
	if j.monitor == nil {
		return end, true
	}
	if !end.Before(j.monitor.Covered()) {
		return end, false
	}
	until := j.monitor.Resumed(end)
	return until, until.Before(j.monitor.Covered())
}

// holdPending reports whether path i of h has a stamp in flight from
// before until, which may be its DELETED.
func (j *judge) holdPending(h *heldDelete, i int, until time.Time) bool {
	ps := h.owed[i]
	return ps != nil && j.paths[i] == ps && ps.flight.holds(until.Sub(j.ledger.base))
}

// loseHeld counts h's DELETED missed and lost on path i at now, if the
// path still owes it, judged from the evidence at gone, and clears it.
func (j *judge) loseHeld(h *heldDelete, i int, gone, now time.Time) {
	ps := h.owed[i]
	h.owed[i] = nil
	if ps == nil || j.paths[i] != ps || ps.refusedOver(gone) {
		// Removed, or refused by the exporter's own configuration since
		// before the evidence: not this path's to deliver.
		return
	}
	o := Outcome{Kind: Missed, Marker: h.key.Name, Seq: h.key.Seq, Event: metrics.EventDeleted, Path: ps.info, At: now, Trace: h.trace}
	o.Reason, o.Limit = missReason(ps.outages, gone, gone.Add(j.deadline)), j.deadline
	j.emit(o)
	o.Kind = Lost
	o.Reason, o.Limit = lostReason(ps.outages, gone, gone.Add(j.horizon()), j.deadline), j.horizon()
	j.emit(o)
}

// oldestHold is the earliest evidence of a held delete still to be judged,
// if there is one: the outages since then may explain its loss.
func (j *judge) oldestHold() (time.Time, bool) {
	var oldest time.Time
	for _, h := range j.holds {
		if !h.gone.IsZero() && (oldest.IsZero() || h.gone.Before(oldest)) {
			oldest = h.gone
		}
	}
	return oldest, !oldest.IsZero()
}
