package judge

import (
	"sort"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// settledWrite is what a write keeps once it is settled and past its
// deadline, for the rest of the retention: only what matching a later
// delivery and judging it (late, duplicate, replayed, after a failed write)
// needs, and its lost horizon. Retained writes are minutes of every
// probe's writes, so it is kept small: in a ring, sharing its marker's name
// with the cycle's other writes, a fraction of a pendingWrite with its
// marks and map entries (TestSettledWritesAreSmall holds it so).
type settledWrite struct {
	name string
	seq  uint64
	// sent is the send time, and answered the time of the apiserver's
	// answer, on the monotonic clock, after the ledger's base.
	sent, answered int64
	// rv is the resourceVersion the write was answered with (see
	// pendingWrite.rv).
	rv    uint64
	marks [inlineMarks]settledMark
	paths uint16 // the tracker's path slots when it was sent
	event eventKind
	// failed: the apiserver answered the write with an error or not at
	// all (one it refused is not kept); a later delivery is counted as
	// after a failed write.
	failed bool
	held   bool // see PendingWrite.held
	// extra is nil unless the write was traced or the tracker had more
	// than inlineMarks path slots when it was sent.
	extra *settledExtra
}

type settledExtra struct {
	trace trace.SpanContext
	more  []settledMark // slots from inlineMarks on
	// latencies are the paths' latencies, by slot, of a write some path
	// missed and may still deliver late, when the tracker has an etcd
	// path: that arrival's apiserver share pairs it with the etcd path's
	// (or the etcd path's with the others').
	latencies []time.Duration
}

// inlineMarks covers the informer, watch and etcd paths; slots of paths
// pinned to apiservers go to extra.
const inlineMarks = 3

// settledMark is a pathMark reduced to what a settled write needs: its
// flags, the low 25 bits of the relist epoch of its latest delivery (they
// only tell that epoch from later ones), and in the high 32 bits how far the
// newest foreign change delivered on the path is past the write's own
// resourceVersion (0: none). Four billion revisions within the retention
// would saturate it: a cluster writes nowhere near that many.
type settledMark uint64

const foreignShift = 32

const (
	markExpected settledMark = 1 << (25 + iota)
	markSeen
	markMissed
	markJudged
	markLost
	markHeld
	markUnmeasurable

	epochBits = 1<<25 - 1
)

// epochOf is the part of a path's relist epoch that a mark keeps.
func epochOf(epoch uint64) uint32 { return uint32(epoch) & epochBits }

func packMark(m pathMark, rv uint64) settledMark {
	s := settledMark(m.epoch & epochBits)
	if m.foreign > rv {
		s |= settledMark(min(m.foreign-rv, 1<<32-1)) << foreignShift
	}
	if m.expected {
		s |= markExpected
	}
	if m.seen {
		s |= markSeen
	}
	if m.missed {
		s |= markMissed
	}
	if m.judged {
		s |= markJudged
	}
	if m.lost {
		s |= markLost
	}
	if m.held {
		s |= markHeld
	}
	if m.unmeasurable {
		s |= markUnmeasurable
	}
	return s
}

// unpack gives back a pathMark of a write answered with rv. A settled
// write's latency and ordering were judged at its first delivery and are
// not needed again.
func (s settledMark) unpack(rv uint64) pathMark {
	var foreign uint64
	if d := uint64(s >> foreignShift); d != 0 {
		foreign = rv + d
	}
	return pathMark{
		rv:           rv,
		foreign:      foreign,
		epoch:        uint32(s & epochBits),
		expected:     s&markExpected != 0,
		seen:         s&markSeen != 0,
		missed:       s&markMissed != 0,
		judged:       s&markJudged != 0,
		lost:         s&markLost != 0,
		held:         s&markHeld != 0,
		unmeasurable: s&markUnmeasurable != 0,
	}
}

// undelivered reports whether a path missed s, or held its verdict at the
// deadline, and has neither delivered it since nor concluded it lost or
// unmeasurable: its lost horizon has something to judge.
func (s *settledWrite) undelivered() bool {
	for i := range int(s.paths) {
		switch *s.mark(i) & (markExpected | markSeen | markMissed | markLost | markHeld) {
		case markExpected | markMissed, markExpected | markHeld:
			return true
		}
	}
	return false
}

func (s *settledWrite) mark(i int) *settledMark {
	if i < inlineMarks {
		return &s.marks[i]
	}
	return &s.extra.more[i-inlineMarks]
}

// compact is what w, settled, keeps. name is the name to store: the same
// string as the previous settled write's when they name the same marker.
func (l *ledger) compact(w *PendingWrite, name string) settledWrite {
	s := settledWrite{
		name:     name,
		seq:      w.key.Seq,
		sent:     int64(w.sent.Sub(l.base)),
		answered: w.answered,
		rv:       w.rv,
		paths:    uint16(len(w.marks)),
		event:    w.event,
		failed:   w.failed,
		held:     w.held,
	}
	pairs := l.pairs && mayArrive(w)
	if w.trace.IsValid() || len(w.marks) > inlineMarks || pairs {
		s.extra = &settledExtra{trace: w.trace}
		if len(w.marks) > inlineMarks {
			s.extra.more = make([]settledMark, len(w.marks)-inlineMarks)
		}
		if pairs {
			s.extra.latencies = make([]time.Duration, len(w.marks))
		}
	}
	s.keep(w)
	return s
}

// mayArrive reports whether a path may still deliver w for the first
// time: it missed w, or held its verdict at the deadline, and has not
// delivered it since. That arrival's apiserver share pairs it with the
// etcd path's, or the etcd path's with every other's, so the paths'
// latencies are kept, whether or not any path timed w by its deadline:
// when etcd stalls, every path is late.
func mayArrive(w *PendingWrite) bool {
	for _, m := range w.marks {
		if undelivered(m) || heldUndelivered(m) {
			return true
		}
	}
	return false
}

// expand makes a pendingWrite of s, settled, for the tracker's judgement
// of a delivery, at now by the tracker's clock; keep stores back what that
// judgement changed.
func (l *ledger) expand(s *settledWrite, now time.Time) *PendingWrite {
	// Counted back from now, as fold does, so that the wall-clock reading
	// of a late arrival's span event is right even after the wall clock
	// stepped since the tracker started.
	w := &PendingWrite{
		key:      WriteKey{s.name, s.seq},
		sent:     now.Add(l.sentOf(s).Sub(now)),
		marks:    make([]pathMark, s.paths),
		event:    s.event,
		acked:    !s.failed,
		answered: s.answered,
		rv:       s.rv,
		failed:   s.failed,
		held:     s.held,
		done:     true,
		// Every expected path of a settled write has delivered it or
		// missed it, so no judgement reaches its cycle; this one is
		// for none to share.
		cycle: &Cycle{},
	}
	if s.extra != nil {
		w.trace = s.extra.trace
	}
	kept := s.extra != nil && s.extra.latencies != nil
	for i := range w.marks {
		w.marks[i] = s.mark(i).unpack(s.rv)
		if kept {
			w.marks[i].latency = s.extra.latencies[i]
		} else {
			// Judged with a latency not kept: nothing to pair with.
			w.marks[i].untimed = w.marks[i].judged
		}
	}
	return w
}

// keep stores what w, s expanded or about to be settled, holds.
func (s *settledWrite) keep(w *PendingWrite) {
	for i, m := range w.marks {
		*s.mark(i) = packMark(m, w.rv)
		if s.extra != nil && s.extra.latencies != nil {
			s.extra.latencies[i] = m.latency
		}
	}
}

// sentOf is s's send time, for comparing with other times: its wall-clock
// reading is off by any step of the wall clock since the tracker's base.
func (l *ledger) sentOf(s *settledWrite) time.Time { return l.base.Add(time.Duration(s.sent)) }

// settledRing holds settled writes in the order they were sent, oldest
// first. It grows only when full, by a quarter: a probe holds its rate x
// retention of them, and a doubling would leave up to half unused.
type settledRing struct {
	buf     []settledWrite
	head, n int
	// lostFrom: the writes before it have been judged for loss, which
	// must come before the retention drops them.
	lostFrom int
}

func (r *settledRing) at(i int) *settledWrite { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *settledRing) push(s settledWrite) {
	if r.n == len(r.buf) {
		buf := make([]settledWrite, max(16, len(r.buf)+len(r.buf)/4))
		for i := range r.n {
			buf[i] = *r.at(i)
		}
		r.buf, r.head = buf, 0
	}
	r.n++
	*r.at(r.n - 1) = s
}

func (r *settledRing) popFront() {
	*r.at(0) = settledWrite{} // let go of its name and trace
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.lostFrom = max(r.lostFrom-1, 0)
}

// newestName is the newest write's name, or "".
func (r *settledRing) newestName() string {
	if r.n == 0 {
		return ""
	}
	return r.at(r.n - 1).name
}

// find returns the settled write with sequence number seq, or nil. A
// probe numbers its writes in the order it sends them, and they settle in
// that order, so the ring is sorted by sequence number.
func (r *settledRing) find(seq uint64) *settledWrite {
	i := sort.Search(r.n, func(i int) bool { return r.at(i).seq >= seq })
	if i < r.n && r.at(i).seq == seq {
		return r.at(i)
	}
	return nil
}

// findDelete returns the newest settled delete of the marker name, or nil.
// after, if nonzero, is a sequence number the delete must be above: that
// of the last state the deleted object carries.
func (r *settledRing) findDelete(name string, after uint64) *settledWrite {
	for i := r.n - 1; i >= 0; i-- {
		s := r.at(i)
		if after != 0 && s.seq <= after {
			return nil
		}
		if s.event == eventDeleted && s.name == name {
			return s
		}
	}
	return nil
}
