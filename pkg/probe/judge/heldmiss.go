package judge

import (
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// heldMiss is a write's miss on a path held at its deadline (pathMark.held),
// found again by sequence number and name, whether the write is still
// pending or settled since. check: the path's refusal run covered the
// send and its check over fresh connections had not answered
// (judge.checkAwaited): the check decides between unmeasurable (refused)
// and missed. starved: the self-monitor found the exporter starved near
// the send or the deadline, so a miss is not counted even once the check
// has answered: the arrival or the lost horizon decides.
//
// run is the refusal run the check was held for (its first refusal's
// instant), request its request, and asked whether the run reached
// refusedAfter, so that a check of it was asked: once the run has ended
// (another failure, a stream), that check's answer still decides, and
// a run that ended with no check asked is missed at once.
type heldMiss struct {
	seq     uint64
	name    string
	slot    int
	sent    time.Time // the write's send, for checkAwaited
	check   bool
	starved bool
	run     time.Time
	request string
	asked   bool
}

// holdMiss holds w's miss on path i, at its deadline: for the self-monitor
// if starved, for the path's refusal check if check.
func (j *judge) holdMiss(w *PendingWrite, i int, check, starved bool) {
	w.marks[i].held = true
	if starved {
		w.cycle.unmeasurable = true
	} else {
		// Refused or missed, whichever the check says, the path does not
		// deliver the write: the cycle fails either way.
		w.cycle.ok = false
	}
	h := heldMiss{seq: w.key.Seq, name: w.key.Name, slot: i, sent: w.sent, check: check, starved: starved}
	if r := j.paths[i].refusal; check {
		h.run, h.request, h.asked = r.from, r.request, r.n >= refusedAfter
	}
	j.heldMisses = append(j.heldMisses, h)
}

// checkAsked records that path i's current refusal run has asked for a
// check: the misses held for it wait for its answer even once the run
// has ended.
func (j *judge) checkAsked(i int) {
	from := j.paths[i].refusal.from
	for k := range j.heldMisses {
		if h := &j.heldMisses[k]; h.check && h.slot == i && h.run.Equal(from) {
			h.asked = true
		}
	}
}

// runEnded reports whether the refusal run h was held for has ended on
// its path: the path is live, or its requests fail otherwise or in
// another run.
func (j *judge) runEnded(h heldMiss) bool {
	ps := j.paths[h.slot]
	return ps.live || ps.refusal.n == 0 || !ps.refusal.from.Equal(h.run)
}

// checkRefused reports whether the latest check of h's request, begun
// since h's run began, found it refused on every connection, and so the
// run, which covered h's send, the exporter's own configuration.
func (j *judge) checkRefused(h heldMiss) bool {
	c := j.check(h.request)
	return !c.refused.Before(h.run) && !c.refused.Before(c.served) && !c.refused.Before(c.failed)
}

// checkAwaited reports whether path i, not live, has had its latest
// request refused since at or before sent, refusedAfter times in a row or
// with nothing but refusals in its outage (fewer come before a deadline
// when the path backs off), not yet taken for the exporter's own
// configuration, and no check of that request over fresh connections
// begun since the run began has answered, or the latest that answered
// was served, began before sent, and the path has been refused again
// since it began (the check may have reached only an apiserver that
// serves: the next one, which that refusal asked for, decides; served
// again, it ends the hold): whether a write sent at sent was refused
// there is the check's to say.
func (j *judge) checkAwaited(i int, sent time.Time) bool {
	ps := j.paths[i]
	r := ps.refusal
	if ps.live || ps.refused != "" || r.n == 0 || (r.n < refusedAfter && !r.whole) || ps.refusalFrom().After(sent) {
		return false
	}
	c := j.check(r.request)
	if c.latest().Before(r.from) {
		return true
	}
	return c.served.Equal(c.latest()) && c.served.Before(sent) && r.last.After(c.served)
}

// concludeChecks judges the misses held for a refusal check whose path no
// longer awaits one for them, at now: a check begun since the run began
// answered, or the run ended (another failure, a stream) before any check
// was asked. Refused over the send (the run's check found it refused,
// once the run has ended; the path's state, while it goes on): the
// write is unmeasurable there. Otherwise it is missed, unless the
// exporter was starved near its send or deadline: then it stays held for
// the self-monitor, as any miss would have been. The lost horizon ends a
// hold whose check never answers (loseUndelivered).
func (j *judge) concludeChecks(now time.Time) {
	for k := range j.heldMisses {
		h := &j.heldMisses[k]
		if !h.check || j.paths[h.slot] == nil {
			continue
		}
		ended := j.runEnded(*h)
		if !ended && j.checkAwaited(h.slot, h.sent) {
			continue
		}
		answered := !j.check(h.request).latest().Before(h.run)
		if ended && h.asked && !answered {
			continue // the run's check decides, whenever it answers
		}
		h.check = false
		w, s := j.findWrite(h.seq, h.name, now)
		if w == nil || !heldUndelivered(w.marks[h.slot]) {
			continue // concluded otherwise: arrived, or past its horizon
		}
		if ended {
			// The path's state now is another run's or none: the
			// run's own check says whether it was refused over the send.
			j.concludeEnded(w, h.slot, answered && j.checkRefused(*h), h.starved, now)
		} else {
			j.concludeCheck(w, h.slot, h.starved, now)
		}
		if s != nil {
			s.keep(w)
		}
	}
}

// concludeCheck judges w's miss on path i, held for a refusal check that
// no longer holds it, at now.
func (j *judge) concludeCheck(w *PendingWrite, i int, starved bool, now time.Time) {
	switch {
	case j.paths[i].refusedOver(w.sent):
		j.unmeasurable(w, i, metrics.UnmeasurablePathRefused, "", now)
	case !starved:
		w.marks[i].held = false
		j.miss(w, i, now)
	}
}

// concludeEnded judges w's miss on path i, held for the check of a
// refusal run that has ended, at now: unmeasurable when the check found
// the run refused, else missed unless starved.
func (j *judge) concludeEnded(w *PendingWrite, i int, refused, starved bool, now time.Time) {
	switch {
	case refused:
		j.unmeasurable(w, i, metrics.UnmeasurablePathRefused, "", now)
	case !starved:
		w.marks[i].held = false
		j.miss(w, i, now)
	}
}

// findWrite finds the write seq of marker name, pending or settled (then
// expanded, with the settled write to keep what its judgement changes in);
// nil when it is retained no longer.
func (j *judge) findWrite(seq uint64, name string, now time.Time) (*PendingWrite, *settledWrite) {
	l := j.ledger
	if w := l.byKey[seq]; w != nil && w.key.Name == name {
		return w, nil
	}
	if s := l.settled.find(seq); s != nil && s.name == name {
		return l.expand(s, now), s
	}
	return nil, nil
}

// stillHeld reports whether h's mark is still held: neither delivered,
// counted nor judged since.
func (j *judge) stillHeld(h heldMiss) bool {
	l := j.ledger
	if j.paths[h.slot] == nil {
		return false
	}
	if w := l.byKey[h.seq]; w != nil && w.key.Name == h.name {
		return h.slot < len(w.marks) && w.marks[h.slot].held
	}
	s := l.settled.find(h.seq)
	return s != nil && s.name == h.name && h.slot < int(s.paths) && *s.mark(h.slot)&markHeld != 0
}

// pruneHeld forgets the held misses concluded since.
func (j *judge) pruneHeld() {
	kept := j.heldMisses[:0]
	for _, h := range j.heldMisses {
		if j.stillHeld(h) {
			kept = append(kept, h)
		}
	}
	clear(j.heldMisses[len(kept):])
	j.heldMisses = kept
}

// dropChecks concludes the misses on path i, which is removed, held for
// its refusal check, at now, as the path's state has it now, and forgets
// every held miss of the path: its slot may be given to another path.
func (j *judge) dropChecks(i int, now time.Time) {
	kept := j.heldMisses[:0]
	for _, h := range j.heldMisses {
		if h.slot != i {
			kept = append(kept, h)
			continue
		}
		if !h.check {
			continue
		}
		if w, s := j.findWrite(h.seq, h.name, now); w != nil && heldUndelivered(w.marks[i]) {
			j.concludeCheck(w, i, h.starved, now)
			if s != nil {
				s.keep(w)
			}
		}
	}
	clear(j.heldMisses[len(kept):])
	j.heldMisses = kept
}

// horizonLead is how long before a lost horizon the self-monitor is told
// to tick closely: longer than the sweeps' period (at most a second), so
// that its ticks are close by the horizon itself.
const horizonLead = 2 * time.Second

// watchClosely tells the self-monitor, at now, whether verdicts beyond
// the pending writes' need it to tick closely: a miss held at its
// deadline, whose arrival is judged by the monitor at its instant, still
// to come; or a lost horizon within horizonLead of now, or passed and
// not concluded yet, of a write a path missed, whose verdict asks the
// monitor whether an event stamped after it was delivered before it. It
// holds one count for all of them, taken and given back as that changes,
// so the count it adds is never more than one nor less than none.
func (j *judge) watchClosely(now time.Time) {
	if j.monitor == nil || j.closed {
		return
	}
	want := len(j.heldMisses) > 0 || j.horizonNear(now)
	switch {
	case want && !j.closely:
		j.monitor.Watch(1)
	case !want && j.closely:
		j.monitor.Watch(-1)
	}
	j.closely = want
}

// horizonNear reports whether a settled write that a path missed, or held
// its miss of, and has not delivered since, has its lost horizon before
// now+horizonLead and not concluded yet. Settled writes are in the order
// answered, so the first horizon past that ends the search.
func (j *judge) horizonNear(now time.Time) bool {
	l := j.ledger
	for k := l.settled.lostFrom; k < l.settled.n; k++ {
		s := l.settled.at(k)
		if l.base.Add(time.Duration(s.answered)+j.horizon()).Sub(now) > horizonLead {
			return false
		}
		if !s.failed && s.undelivered() {
			return true
		}
	}
	return false
}

// closeWatch gives back every count the monitor was told of: the probe
// has stopped.
func (j *judge) closeWatch() {
	if j.monitor != nil {
		j.monitor.Watch(-j.watching)
		if j.closely {
			j.monitor.Watch(-1)
		}
	}
	j.watching, j.closely, j.closed = 0, false, true
}
