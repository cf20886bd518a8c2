package judge

import (
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
