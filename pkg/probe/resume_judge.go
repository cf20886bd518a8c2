package probe

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// A replay's verdict: what the probe wrote after the resourceVersion a
// check resumes from, against what the resumed watch delivered.

// replayKey names one marker event as both the probe and the watch see it:
// the marker, the event, and the writer's sequence number on the object (0
// for a delete, which writes none: a marker is deleted once).
type replayKey struct {
	marker, event string
	seq           uint64
}

// ledgerWrite is one of the probe's writes as the resume checks know it.
type ledgerWrite struct {
	key replayKey
	// rv is the resourceVersion of the write's response: 0 for a delete,
	// whose response is a Status, and for a write that failed.
	rv uint64
	at time.Time // when the response came
	// sure: the write was acknowledged, so its event is owed; a write that
	// failed other than by a refusal may have been committed, and its
	// event may come, once.
	sure bool
}

// describe names the event for a log line or report: its resourceVersion
// when known, else what it was.
func (w ledgerWrite) describe() string {
	if w.rv != 0 {
		return strconv.FormatUint(w.rv, 10)
	}
	return w.key.event + " " + w.key.marker
}

// replayEvent is one marker event a resume watch delivered.
type replayEvent struct {
	key replayKey
	rv  string
}

// replayEnd is how the reading of a resume watch ended.
type replayEnd uint8

const (
	// replayDone: every event owed arrived, and the checker closed the watch.
	replayDone replayEnd = iota
	// replayOpen: the stream stayed open past the bound without delivering
	// every event owed.
	replayOpen
	// replayClosed: the stream ended without a status: the server closed
	// it, or the connection was lost.
	replayClosed
	// replayExpired: the server answered 410 Gone (etcd: compacted).
	replayExpired
	// replayFailed: the request failed, or the stream ended with another
	// error status.
	replayFailed
)

// judgeReplay judges a resume watch from what the probe wrote after the
// resourceVersion it resumed from (want, in the order written), what the
// watch delivered (got, in order; events of other writes are ignored: in
// flight when the check began, another run's markers being cleaned up, or
// another client's changes of a marker),
// and how the reading ended. A replay is exact when every acknowledged
// write's event arrived, once, in order; a gap is proven when a later
// event arrived without an earlier one. A 410 before any owed event is the
// history's end, not a fault.
func judgeReplay(want []ledgerWrite, got []replayEvent, end replayEnd, err error) judge.ResumeVerdict {
	pos := make(map[replayKey]int, len(want))
	for i, w := range want {
		pos[w.key] = i
	}
	var v judge.ResumeVerdict
	seen := make([]bool, len(want))
	latest, delivered := -1, false
	for _, ev := range got {
		i, ok := pos[ev.key]
		if !ok || foreignChange(want[i], ev) {
			continue
		}
		delivered = true
		switch {
		case seen[i]:
			v.Duplicated = append(v.Duplicated, ev.rv)
		case i < latest:
			v.OutOfOrder = append(v.OutOfOrder, ev.rv)
		}
		seen[i] = true
		latest = max(latest, i)
	}
	gap := false
	for i, w := range want {
		if w.sure && !seen[i] {
			v.Missing = append(v.Missing, w.describe())
			gap = gap || i < latest
		}
	}
	switch {
	case len(v.Duplicated) > 0 || len(v.OutOfOrder) > 0 || gap:
		v.Outcome = metrics.ResumeIncomplete
	case end == replayExpired && delivered:
		v.Outcome, v.Err = metrics.ResumeIncomplete, err
	case end == replayExpired:
		v.Outcome, v.Err, v.Missing = metrics.ResumeExpired, err, nil
	case len(v.Missing) == 0:
		v.Outcome = metrics.ResumeReplayed
	case end == replayOpen:
		// The stream was up and delivered nothing more within the bound
		// after which the ordinary paths count an event lost.
		v.Outcome = metrics.ResumeIncomplete
	default:
		v.Outcome, v.Err = metrics.ResumeError, err
		if v.Err == nil {
			v.Err = errors.New("the watch ended before it replayed every event")
		}
	}
	return v
}

// foreignChange reports whether ev, which carries w's sequence number, is
// someone else's later change of the marker rather than w's own event.
func foreignChange(w ledgerWrite, ev replayEvent) bool {
	rv, err := strconv.ParseUint(ev.rv, 10, 64)
	return w.rv != 0 && err == nil && rv != w.rv
}

// resumeLedger keeps the probe's writes, in the order they were sent (a
// probe writes one at a time), for as long as the largest age needs.
type resumeLedger struct {
	mu     sync.Mutex
	writes []ledgerWrite
	keep   time.Duration
}

// add records a write; refused writes, never committed, are not owed.
func (l *resumeLedger) add(w ledgerWrite) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, w)
	// The oldest write stays while the next one is too young to resume
	// from at the largest age.
	drop := 0
	for drop+1 < len(l.writes) && w.at.Sub(l.writes[drop+1].at) > l.keep {
		drop++
	}
	if drop > 0 {
		l.writes = slices.Delete(l.writes, 0, drop)
	}
}

// since returns the write to resume from for age: the newest acknowledged
// write with a resourceVersion whose response came at least age before
// now; and the writes after it. ok is false while the probe has no write
// that old, or none since.
func (l *resumeLedger) since(age time.Duration, now time.Time) (from ledgerWrite, after []ledgerWrite, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.writes) - 1; i >= 0; i-- {
		w := l.writes[i]
		if w.at.After(now.Add(-age)) || !w.sure || w.rv == 0 {
			continue
		}
		after = slices.Clone(l.writes[i+1:])
		return w, after, len(after) > 0
	}
	return ledgerWrite{}, nil, false
}
