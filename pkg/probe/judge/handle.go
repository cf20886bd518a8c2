package judge

import (
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Handle is a path's line to the judgement: what the path received and
// what its streams did, each at the instant the path saw it.
type Handle struct {
	tracker *Tracker
	slot    int
	flight  *inFlight
}

// Stamp is the arrival instant of what the path received, to hand over
// with event (or bookmark) and then handed: until handed, the sweep holds
// back any verdict due at or after it.
func (h Handle) Stamp() time.Time { return h.tracker.stamp(h.flight, time.Now) }

// Handed says that everything stamped has been Handed over.
func (h Handle) Handed() { h.flight.end() }

func (h Handle) Event(event string, obj metav1.Object, arrival time.Time) {
	h.tracker.deliver(h.slot, arrival, PathEvent{Event: event, Obj: obj})
}

// Events hands over what one response of a stream carried, stamped once.
func (h Handle) Events(arrival time.Time, events ...PathEvent) {
	h.tracker.deliver(h.slot, arrival, events...)
}
func (h Handle) Bookmark(at time.Time) { h.tracker.bookmark(h.slot, at) }
func (h Handle) Live(at time.Time)     { h.tracker.live(h.slot, at) }
func (h Handle) RelistBegan(reason, mode string, at time.Time) {
	h.tracker.relisted(h.slot, reason, mode, at)
}
func (h Handle) RelistEnded(mode string, took time.Duration, at time.Time) {
	h.tracker.relistDone(h.slot, mode, took, at)
}
func (h Handle) StreamEnded(reason string, lifetime time.Duration, err error, at time.Time) {
	h.tracker.streamEnded(h.slot, reason, lifetime, err, at)
}
func (h Handle) RequestFailed(request string, err error, at time.Time) {
	h.tracker.requestFailed(h.slot, request, err, at)
}
func (h Handle) Throttled(request string) { h.tracker.Throttled(h.slot, request) }
func (h Handle) WasLive() bool            { return h.tracker.WasLive(h.slot) }

var ErrNotSynced = errors.New("has not received its initial state yet")

// SyncTimeout bounds how long writing waits for the paths' initial sync. A
// path that cannot sync must show up as missed events, not as silence.
const SyncTimeout = 30 * time.Second

// The tracker's entry points behind a path's handle.

// PathEvent is one object a path received: an event of a watch stream, or
// (listed) the object as a relist's state holds it.
type PathEvent struct {
	Event  string
	Obj    metav1.Object
	Listed bool
}

// deliver judges what arrived on path i at arrival, in order, and ends the
// path's flight under the lock: once judged, nothing it stamped holds the
// sweep back, even while its goroutine then delivers the outcomes. Only
// the goroutine that stamped calls it. It returns how many of the objects
// belong to a write the tracker knows.
func (t *Tracker) deliver(i int, arrival time.Time, events ...PathEvent) (matched int) {
	t.lock()
	defer t.unlock()
	for _, e := range events {
		if e.Event == metrics.EventDeleted && len(t.judge.holds) > 0 {
			t.judge.heldGone(i, e.Obj, e.Listed, arrival)
		}
		w, settled := t.ledger.find(e.Event, e.Obj, arrival)
		if w == nil {
			continue // no write of this probe's
		}
		matched++
		t.judge.delivered(w, i, e.Event, e.Obj, e.Listed, arrival)
		if settled != nil {
			settled.keep(w)
		}
	}
	if ps := t.judge.paths[i]; ps != nil {
		ps.flight.end()
	}
	return matched
}

// bookmark records a BOOKMARK on path i: proof that the stream is alive.
func (t *Tracker) bookmark(i int, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.judge.paths[i]
	t.judge.emit(Outcome{Kind: Bookmark, Path: ps.info, At: now})
	if ps.answered() {
		t.judge.emit(Outcome{Kind: Unstalled, Path: ps.info, At: now})
	}
}

// live records that path i has a stream open and caught up: a watch that
// resumed from a resourceVersion, or a relist completed.
func (t *Tracker) live(i int, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.judge.paths[i]
	refused := ps.refused != ""
	if ps.goLive(now) {
		t.judge.emit(Outcome{Kind: Up, Path: ps.info, At: now})
		if refused {
			t.judge.emit(Outcome{Kind: Refused, Path: ps.info, At: now})
		}
		// A stream opened: its watch request was served.
		t.judge.servedOn(i, metrics.RequestWatch, now)
	}
}

// servedOn records request served on path i at now: a refusal of the same
// request elsewhere since the refusal's last check is that apiserver's.
func (j *judge) servedOn(i int, request string, now time.Time) {
	j.paths[i].served.add(request, now)
	for k, o := range j.paths {
		if k != i && o != nil && o.refused != "" {
			j.showRefused(k, o.lastErr, now)
		}
	}
}

// RefusalChecked records a check of request (metrics.RequestList,
// RequestWatch), as the paths send it, over fresh connections, begun at
// began: served, when an apiserver served it; else refused on every
// connection. A check neither served nor refused on every connection is
// RefusalCheckFailed.
func (t *Tracker) RefusalChecked(request string, began time.Time, served bool, now time.Time) {
	t.lock()
	defer t.unlock()
	c := t.judge.check(request)
	if served {
		c.served = Later(c.served, began)
	} else {
		c.refused = Later(c.refused, began)
	}
	for k, o := range t.judge.paths {
		if o != nil && o.refusal.request == request && o.refusal.n >= refusedAfter {
			t.judge.showRefused(k, o.lastErr, now)
		}
	}
	t.judge.concludeChecks(now)
}

// RefusalCheckFailed records a check of request over fresh connections,
// begun at began, that was neither served nor refused on every
// connection: a connection failed otherwise (no answer, a 5xx, a 429),
// with err. It is no evidence about the refusal, which stays unconfirmed
// (DownPaths says so), but it answers the check: the misses held for it
// are counted.
func (t *Tracker) RefusalCheckFailed(request string, began time.Time, err error, now time.Time) {
	t.lock()
	defer t.unlock()
	if err == nil {
		err = errors.New("neither served nor refused on every connection")
	}
	c := t.judge.check(request)
	if !began.Before(c.failed) {
		c.failed, c.err = began, err
	}
	t.judge.concludeChecks(now)
}

// down opens an outage on path i, if none is open.
func (t *Tracker) down(i int, now time.Time) *outage {
	ps := t.judge.paths[i]
	o, opened := ps.goDown(now)
	if opened {
		t.judge.emit(Outcome{Kind: Down, Path: ps.info, At: now})
	}
	return o
}

// downUnstalled opens an outage on path i, as down does, and ends a stall
// the path was in: a path whose requests fail, or that relists, is down,
// not stalled.
func (t *Tracker) downUnstalled(i int, now time.Time) *outage {
	o := t.down(i, now)
	if ps := t.judge.paths[i]; ps.unstall() {
		t.judge.emit(Outcome{Kind: Unstalled, Path: ps.info, At: now})
	}
	return o
}

// streamEnded records the end of a watch stream on path i, why, after how
// long, and the error that ended it if there was one.
func (t *Tracker) streamEnded(i int, reason string, lifetime time.Duration, err error, now time.Time) {
	t.lock()
	defer t.unlock()
	t.down(i, now)
	t.judge.emit(Outcome{Kind: StreamEnded, Path: t.judge.paths[i].info, At: now, Reason: reason, Latency: lifetime, Err: err})
}

// requestFailed records a list or watch request of path i that failed
// before any stream existed: not a stream's end, and the path is down, not
// stalled.
func (t *Tracker) requestFailed(i int, request string, err error, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.judge.paths[i]
	o := t.downUnstalled(i, now)
	ps.refusal.add(PathRefusal(err), request, !o.failed, now)
	o.failed = true
	ps.lastErr = err
	t.judge.emit(Outcome{Kind: RequestFailed, Path: ps.info, At: now, Request: request, Code: StatusCode(err), Err: err})
	if ps.refusal.n >= refusedAfter {
		// Each refusal past the first few asks again: a check that
		// reached only the refusing apiserver is taken back by the next.
		t.judge.emit(Outcome{Kind: ConfirmRefusal, Path: ps.info, At: now, Request: request, Reason: ps.refusal.reason, Since: ps.refusal.from})
		t.judge.checkAsked(i)
	}
	t.judge.showRefused(i, err, now)
}

// relisted records that path i began fetching its whole state again.
func (t *Tracker) relisted(i int, reason, mode string, now time.Time) {
	t.lock()
	defer t.unlock()
	ps := t.judge.paths[i]
	t.downUnstalled(i, now).relist = true
	ps.relisted()
	t.judge.emit(Outcome{Kind: Relisted, Path: ps.info, At: now, Reason: reason, Mode: mode})
}

// relistDone records that path i's relist completed at now, by mode, after
// took.
func (t *Tracker) relistDone(i int, mode string, took time.Duration, now time.Time) {
	t.lock()
	defer t.unlock()
	t.judge.emit(Outcome{Kind: RelistDone, Path: t.judge.paths[i].info, Mode: mode, Latency: took, At: now})
	request := metrics.RequestList
	if mode == metrics.ModeWatchList {
		request = metrics.RequestWatch
	}
	t.judge.servedOn(i, request, now)
}
