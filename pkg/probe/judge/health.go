package judge

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

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

// pathState is what the judgement knows about one path's streams: its
// health, from the calls of its handle.
type pathState struct {
	info *PathInfo
	// epoch counts relists. A write delivered again in a later epoch is a
	// replay, which a relist is expected to cause; in the same epoch it is a
	// duplicate, which nothing should cause.
	epoch uint64
	// lastSeq is the highest sequence number delivered in this epoch; a
	// lower one arriving after it is out of order.
	lastSeq uint64
	// flight is the arrival stamp of what the path is handing to the
	// judgement (see handle.stamp).
	flight inFlight
	// live is true while a stream is open and caught up, since liveFrom.
	// outages holds the recent stretches when it was not live, the last one
	// open while !live.
	live     bool
	everLive bool
	liveFrom time.Time
	outages  []outage
	// lastErr is the error of the latest failed list or watch request,
	// cleared when the path is live again. refusal is the run of refused
	// requests the current outage ends with; refused is its reason
	// (PathRefusal) once the judgement takes it for the exporter's own
	// configuration (judge.refusedReason), empty otherwise.
	lastErr error
	refusal refusalRun
	refused string
	// served is when a list and a watch request of the path were last
	// served: evidence, for another path's refusal of the same request,
	// that the apiservers do not all refuse it.
	served served
	// unansweredSince is the send time of the oldest acknowledged write that
	// nothing on this path has answered: no event, no bookmark since.
	// silentLive is how long the path was live and silent since then, in
	// the stretches before the current one: a stream resumed from its
	// resourceVersion after a plain end is the same stream to a client,
	// silence and all, but time without a stream is not silence of one. A
	// stall is more than stallAfter of that; a path that starts again
	// (first, after failed requests or a relist) starts from nothing, and a
	// path whose requests fail is down, not stalled.
	unansweredSince time.Time
	silentLive      time.Duration
	stalled         bool
	// added is when a path pinned to an apiserver was added mid-run; zero
	// for the configured paths.
	added time.Time
	// left is the marker of the cycle under way when its last delivery
	// on the path was a DELETED the probe did not cause: another client
	// took it out of the path's label selector (or deleted it), and the
	// path delivers nothing more of it until it matches again.
	left leftMarker
	// tomb is a relist's tombstone of the marker of the cycle under way,
	// with no evidence yet of another client's change past its state:
	// taken for a selector leave if evidence comes (leftEvidence, judged
	// when it arrives), else the delete stays owed there.
	tomb tombstone
}

// tombstone is a relist's tombstone of w's marker, holding its state at rv.
type tombstone struct {
	w  *PendingWrite
	rv uint64
}

// leftMarker is a marker that left a path's selector, at rv.
type leftMarker struct {
	name string
	rv   uint64
}

// selects records a delivery of the marker name at rv other than a
// DELETED: the path's selector matches it (again).
func (ps *pathState) selects(name string, rv uint64) {
	if ps.left.name == name && rv > ps.left.rv {
		ps.left = leftMarker{}
	}
	if ps.tomb.w != nil && ps.tomb.w.key.Name == name && rv > ps.tomb.rv {
		ps.tomb = tombstone{}
	}
}

// inFlight is the arrival stamp of the deliveries a path has stamped and
// not yet handed over, for the sweep: an event stamped before a deadline
// but still on its way to the tracker's lock arrived on time, and the sweep
// must not declare it missed first. It is noStamp while nothing is in
// flight, and stamping while the stamp is being taken: the path marks the
// flight before it reads the clock, so a sweep that sees noStamp knows that
// anything the path stamps later is stamped after the sweep began.
type inFlight struct{ at atomic.Int64 }

const (
	noStamp  = 0
	stamping = -1
)

// begin marks a stamp about to be taken.
func (f *inFlight) begin() { f.at.Store(stamping) }

// stamped records the stamp, d after the ledger's base.
func (f *inFlight) stamped(d time.Duration) { f.at.Store(max(int64(d), 1)) }

// end records that what was stamped has been handed over.
func (f *inFlight) end() { f.at.Store(noStamp) }

// holds reports whether something in flight may have been stamped at or
// before due, d after the ledger's base: the verdict on due must wait.
func (f *inFlight) holds(due time.Duration) bool {
	switch at := f.at.Load(); at {
	case noStamp:
		return false
	case stamping:
		return true
	default:
		return time.Duration(at) <= due
	}
}

func newPathState(info *PathInfo) *pathState {
	// A path is out from the beginning of time until its first stream.
	return &pathState{info: info, outages: []outage{{initial: true}}}
}

// owes reports whether a write sent at sent is expected on the path. A path
// added mid-run owes nothing for writes sent before its first stream was
// live: its initial list holds them, and the watch from that list's version
// never delivers them. One not live within syncTimeout of being added owes
// every later write, so that an apiserver that never answers shows.
func (ps *pathState) owes(sent time.Time) bool {
	return ps.added.IsZero() || ps.everLive || sent.Sub(ps.added) > SyncTimeout
}

// goLive records a stream open and caught up at now; false if one was.
func (ps *pathState) goLive(now time.Time) bool {
	if ps.live {
		return false
	}
	ps.live, ps.everLive, ps.lastErr, ps.refused = true, true, nil, ""
	ps.refusal = refusalRun{}
	o := &ps.outages[len(ps.outages)-1]
	o.to = now
	if o.initial || o.failed || o.relist {
		ps.silentLive = 0
	}
	ps.liveFrom = now
	return true
}

// goDown opens an outage at now, if none is open, and returns the open one
// and whether it opened now.
func (ps *pathState) goDown(now time.Time) (*outage, bool) {
	opened := ps.live
	if ps.live {
		ps.live = false
		ps.outages = append(ps.outages, outage{from: now})
		if !ps.unansweredSince.IsZero() {
			ps.silentLive += now.Sub(Later(ps.liveFrom, ps.unansweredSince))
		}
	}
	return &ps.outages[len(ps.outages)-1], opened
}

// refusedAfter is how many refused requests in a row, with no other
// failure between them, make a path refused. One refusal proves little:
// an apiserver that has just restarted may refuse before its
// authorization caches are synced, and a reconnect through a load
// balancer may reach one apiserver that refuses while the others serve.
// A path retries within a second at first (paths' backoff), so a refusal
// that stays is taken as such within about one.
const refusedAfter = 3

// refusalRun is a run of refused list or watch requests of a path: the
// first of them at from, the latest at last, n in a row, reason and
// request (metrics.RequestList, RequestWatch) the latest's; whole when no
// other failure came before it in the outage, so the path has been
// refused for all of the outage.
type refusalRun struct {
	reason, request string
	from, last      time.Time
	n               int
	whole           bool
}

// add records a failed request at now, refused for reason (empty: the
// control plane's failure, which ends the run); first when it is the
// outage's first failure.
func (r *refusalRun) add(reason, request string, first bool, now time.Time) {
	switch {
	case reason == "":
		*r = refusalRun{}
	case r.n == 0:
		*r = refusalRun{reason: reason, request: request, from: now, last: now, n: 1, whole: first}
	default:
		r.reason, r.request, r.n, r.last = reason, request, r.n+1, now
	}
}

// served holds when a path's list and watch requests were last served.
// RBAC tells list from watch: a Role may grant one and not the other, so
// only the same request served is evidence about a refusal.
type served struct{ list, watch time.Time }

// at is when request was last served.
func (s *served) at(request string) time.Time {
	if request == metrics.RequestList {
		return s.list
	}
	return s.watch
}

// add records request served at now.
func (s *served) add(request string, now time.Time) {
	if request == metrics.RequestList {
		s.list = Later(s.list, now)
	} else {
		s.watch = Later(s.watch, now)
	}
}

// freshCheck is what the checks of a request over fresh connections found
// (Tracker.RefusalChecked, RefusalCheckFailed): when the latest check that
// was served began, when the latest that every connection saw refused
// began, and when the latest that was neither (a connection failed
// otherwise) began, with its error.
type freshCheck struct {
	served, refused, failed time.Time
	err                     error
}

// latest is when the latest check that answered began.
func (c *freshCheck) latest() time.Time { return Later(Later(c.served, c.refused), c.failed) }

// unconfirmed is the error of the latest check, begun at or after from,
// when it was neither served nor refused on every connection; nil
// otherwise.
func (c *freshCheck) unconfirmed(from time.Time) error {
	if c.failed.Before(from) || c.failed.Before(c.served) || c.failed.Before(c.refused) {
		return nil
	}
	return c.err
}

// refusedOver reports whether the path, refused, has had no stream and
// been refused since at or before sent: it could not have delivered a
// write sent then, for the exporter's own configuration. A write sent
// before the refusals began, while the path's requests failed otherwise
// or its stream was live, is the path's to deliver.
func (ps *pathState) refusedOver(sent time.Time) bool {
	if ps.refused == "" || ps.live {
		return false
	}
	return !ps.refusalFrom().After(sent)
}

// refusalFrom is since when the path's run of refusals has kept it from
// delivering anything: the outage's start when nothing but refusals
// failed in it.
func (ps *pathState) refusalFrom() time.Time {
	if ps.refusal.whole {
		return ps.outages[len(ps.outages)-1].from
	}
	return ps.refusal.from
}

// refusedReason is path i's refusal reason as the exporter's own
// configuration, empty when its requests are not refused so. RBAC, the
// namespace and the served APIs are the cluster's, the same through every
// apiserver, so a refusal another apiserver does not give is the refusing
// apiserver's fault (a stale authorization cache, skew in an upgrade): the
// control plane's, for which the path is down. The path's own retries
// cannot tell: through a load balancer they reuse one connection, to the
// apiserver that refused. So the refusal is the exporter's only when the
// path's latest request was refused refusedAfter times in a row, the same
// request sent over fresh connections since the run began was refused on
// every one (a check, RefusalChecked), and no apiserver served it since then:
// neither a check nor another apiserver path (a relist, a resumed or new
// stream). The newest evidence decides, and each refusal of the path asks
// for another check (ConfirmRefusal): a check that reached the refusing
// apiserver alone by chance is taken back by the next one served.
func (j *judge) refusedReason(i int) string {
	ps := j.paths[i]
	r := ps.refusal
	if ps.live || r.n < refusedAfter {
		return ""
	}
	c := j.check(r.request)
	if c.refused.Before(r.from) {
		return "" // not confirmed since the run began
	}
	// A stream open since before the run began was served before it; it
	// may have been authorized before a change since.
	last := c.served
	for k, o := range j.paths {
		if k != i && k != j.etcd && o != nil {
			last = Later(last, o.served.at(r.request))
		}
	}
	if last.After(r.from) && !c.refused.After(last) {
		return ""
	}
	return r.reason
}

// lastErr is the error of path i's latest failed request, which has one,
// and, when the refusals it ends are unconfirmed for want of a check that
// could tell (RefusalCheckFailed), why the check failed.
func (j *judge) lastErr(i int) error {
	ps := j.paths[i]
	r := ps.refusal
	if ps.live || ps.refused != "" || r.n < refusedAfter {
		return ps.lastErr
	}
	if err := j.check(r.request).unconfirmed(r.from); err != nil {
		return fmt.Errorf("%w (refusal unconfirmed: the check failed: %v)", ps.lastErr, err)
	}
	return ps.lastErr
}

// check is what the checks of request over fresh connections found.
func (j *judge) check(request string) *freshCheck {
	if request == metrics.RequestList {
		return &j.checks[0]
	}
	return &j.checks[1]
}

// showRefused sets path i's refused reason to what the judgement takes
// it for now, and says so, at now, with err, when that changes.
func (j *judge) showRefused(i int, err error, now time.Time) {
	ps := j.paths[i]
	if r := j.refusedReason(i); r != ps.refused {
		ps.refused = r
		j.emit(Outcome{Kind: Refused, Path: ps.info, At: now, Reason: r, Err: err})
	}
}

// relisted records that the path began fetching its whole state: a new
// epoch, in which deliveries are ordered afresh.
func (ps *pathState) relisted() {
	ps.epoch++
	ps.lastSeq = 0
}

// answered records an event or a bookmark: nothing acknowledged is left
// unanswered, and a stall ends; true if one did.
func (ps *pathState) answered() bool {
	ps.unansweredSince, ps.silentLive = time.Time{}, 0
	return ps.unstall()
}

// unstall ends a stall; true if there was one.
func (ps *pathState) unstall() bool {
	was := ps.stalled
	ps.stalled = false
	return was
}

// stallsAt reports whether the path becomes stalled at now: live, and
// silent while live for longer than stallAfter since the oldest unanswered
// write, and live for replay at least, so that a stream just resumed has
// the time to deliver what it owes.
func (ps *pathState) stallsAt(now time.Time, stallAfter, replay time.Duration) bool {
	if ps.stalled || !ps.live || ps.unansweredSince.IsZero() || now.Sub(ps.liveFrom) <= replay {
		return false
	}
	return ps.silentLive+now.Sub(Later(ps.liveFrom, ps.unansweredSince)) > stallAfter
}

// trimOutages forgets the outages that ended before from: they explain
// nothing about a write sent since.
func (ps *pathState) trimOutages(from time.Time) {
	n := 0
	for n < len(ps.outages)-1 && !ps.outages[n].to.IsZero() && ps.outages[n].to.Before(from) {
		n++
	}
	ps.outages = ps.outages[n:]
}

// Later is the Later of two times.
func Later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
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
	w := overlapping(outages, sent, due, due)
	return explain(w.failed || w.initial, w.relist, w.down)
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
	w := overlapping(outages, sent, end, end.Add(-replay))
	return explain(w.initial, w.relist, w.down)
}

// window is what the outages overlapping a window held: a failed request,
// the path's start, a relist, and a stream not live again by a bound.
type window struct{ failed, initial, relist, down bool }

// overlapping gathers the outages that overlap [from, to]; down is set by
// one still open, or ended after liveBy.
func overlapping(outages []outage, from, to, liveBy time.Time) window {
	var w window
	for _, o := range outages {
		if o.from.After(to) || (!o.to.IsZero() && o.to.Before(from)) {
			continue
		}
		w.failed = w.failed || o.failed
		w.initial = w.initial || o.initial
		w.relist = w.relist || o.relist
		w.down = w.down || o.to.IsZero() || o.to.After(liveBy)
	}
	return w
}

// explain is the reason for a miss or a loss: the path unavailable first,
// then a relist, then a stream down; else nothing explains it.
func explain(unavailable, relist, down bool) string {
	switch {
	case unavailable:
		return metrics.MissedUnavailable
	case relist:
		return metrics.MissedRelist
	case down:
		return metrics.MissedUnavailable
	}
	return metrics.MissedSilent
}
