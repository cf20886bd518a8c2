package watchlist

import (
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The judgement: pure functions of what a sync saw, so that every verdict
// has a table test. The line between the verdicts is what a client-go
// v0.37 informer does in the same case (tools/cache/reflector.go,
// watchList): it syncs at the end bookmark; it waits, or sends the
// WatchList again, when the bookmark does not come, when the stream ends
// before it (unless at once and empty) and on "Too large resource
// version" (missed: it does not sync); it retries a 429 too, which counts
// towards stuck when it is a watch cache that cannot initialize and is
// the apiserver's load otherwise; and it lists instead on any other
// error, which is where a server that does not serve WatchList leaves it
// (refused).

// Outcome is what became of one sync.
type Outcome uint8

const (
	// Synced: the end bookmark arrived within the bound.
	Synced Outcome = iota
	// Missed: no end bookmark within the bound (Reason is one of
	// metrics.WatchListMissedReasons).
	Missed
	// Refused: the server does not serve WatchList as asked (Reason is one
	// of metrics.WatchListRefusedReasons).
	Refused
	// Failed: any other failure (Reason is one of
	// metrics.FreshnessErrorReasons).
	Failed
	// Queued: held by the apiserver's admission (priority and fairness,
	// max-in-flight) in the exporter's own priority level, too long to
	// tell from the sync's own time (Reason is one of
	// metrics.QueuedReasons): neither synced nor missed.
	Queued
)

func (o Outcome) String() string {
	return [...]string{"synced", "missed", "refused", "failed", "queued"}[o]
}

// Sync is what one WatchList request saw, from just before it was sent.
type Sync struct {
	// Bookmark: the end bookmark arrived, Took after the start.
	Bookmark bool
	// Ended: the stream ended before it, with no ERROR event.
	Ended bool
	// Status is the failed answer's, or the ERROR event's (ErrorEvent).
	Status     *metav1.Status
	ErrorEvent bool
	// Err is the transport's error when no answer arrived; with
	// BoundPassed, the bound passed first.
	Err         error
	BoundPassed bool
	// Sent: the request was written to a connection (httptrace
	// WroteRequest); a sync not sent reached no apiserver.
	Sent bool
	// Events counts the events before the end (an empty namespace has
	// none: the end bookmark comes first).
	Events int
	// Took is from just before the request to the end bookmark, or to
	// whatever ended the check.
	Took time.Duration
}

// Verdict is one sync's judgement.
type Verdict struct {
	Outcome Outcome
	Reason  string
	// Blocks: an informer there neither syncs nor lists instead, so the
	// sync counts towards stuck: every miss, and a watch cache that cannot
	// initialize (429 "initializing": client-go retries 429s).
	Blocks bool
}

// Baseline is what the resourceVersion=0 watch of the same name, sent just
// before a sync on the same connection, saw. The apiserver answers it from
// its watch cache at once, without asking etcd or waiting for the cache:
// its time is the apiserver's queue (and the round trip), which the
// WatchList waits in too, in the same flow.
type Baseline struct {
	// Answered: its response (headers, or a failed answer: Status) came,
	// Took after the request had its connection.
	Answered bool
	Status   *metav1.Status
	Took     time.Duration
	// Err, BoundPassed and Sent are as a Sync's, when no answer came.
	Err         error
	BoundPassed bool
	Sent        bool
}

// judgeSync judges a sync beside its baseline. A baseline refused by the
// apiserver's admission, or without an answer within the bound although
// sent, was held in the exporter's priority level: the sync is queued, and
// its WatchList was not sent. A baseline that reached no apiserver makes
// the sync unavailable. A baseline that took queuedAfter or longer makes a
// verdict that rests on the sync's time (synced, no response, no
// bookmark) queued; one the apiserver states holds.
func judgeSync(s Sync, base Baseline, queuedAfter time.Duration) Verdict {
	switch {
	case base.Status != nil && admissionRefused(*base.Status):
		return Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}
	case !base.Answered && base.BoundPassed && base.Sent:
		return Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}
	case !base.Answered:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	}
	v := judgeWatchList(s)
	timed := v.Outcome == Synced || v == missed(metrics.WatchListNoResponse) || v == missed(metrics.WatchListNoBookmark)
	if timed && base.Took >= queuedAfter {
		return Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}
	}
	return v
}

// judgeWatchList judges the WatchList request alone.
func judgeWatchList(s Sync) Verdict {
	switch {
	case s.Bookmark:
		return Verdict{Outcome: Synced}
	case s.Status != nil:
		return judgeStatus(*s.Status, s.ErrorEvent)
	case s.Err != nil && s.BoundPassed && !s.Sent:
		// No connection, or none that took the request, within the bound
		// (a TLS handshake that never ends, an address black-holed): no
		// apiserver was asked, which the paths' reachability reports.
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	case s.Err != nil && s.BoundPassed:
		return missed(metrics.WatchListNoResponse)
	case s.Err != nil:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	case s.Ended && s.Events == 0 && s.Took < veryShort:
		return Verdict{Outcome: Refused, Reason: metrics.WatchListClosed}
	case s.Ended:
		return missed(metrics.WatchListEnded)
	}
	return missed(metrics.WatchListNoBookmark)
}

// veryShort: a stream that ends sooner than this with no event is
// client-go's "very short watch" (reflector.go, handleAnyWatch), on which
// an informer lists instead.
const veryShort = time.Second

func missed(reason string) Verdict { return Verdict{Outcome: Missed, Reason: reason, Blocks: true} }

// judgeStatus judges a failed answer, or an ERROR event (event).
func judgeStatus(st metav1.Status, event bool) Verdict {
	msg := strings.ToLower(st.Message)
	code := int(st.Code)
	initializing := code == http.StatusTooManyRequests && strings.Contains(msg, "initializing")
	switch {
	case !event && admissionRefused(st):
		return Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}
	case !event && (code == http.StatusBadRequest || code == http.StatusUnprocessableEntity) && namesWatchListOption(msg):
		// kube-apiserver validates the options before anything else
		// (k8s.io/apiserver handlers: ValidateListOptions): the WatchList
		// gate off answers 422 "sendInitialEvents is forbidden for watch
		// unless the WatchList feature gate is enabled"; one before 1.27
		// refuses resourceVersionMatch on a watch the same way. Any other
		// 400 (the probe's own field selector refused, a proxy's) says
		// nothing of WatchList, and is a failure, not a refusal an
		// informer would list after.
		return Verdict{Outcome: Refused, Reason: metrics.WatchListRejected}
	case event && strings.Contains(msg, "requestwatchprogress"):
		// The cacher streams initial events only from a storage with
		// progress notifications, and says so in an ERROR event.
		return Verdict{Outcome: Refused, Reason: metrics.WatchListStorage}
	case event && code == http.StatusGatewayTimeout && tooLargeResourceVersion(st):
		// The cacher's wait for a cache as fresh as etcd's current
		// revision (3 s) ran out.
		return missed(metrics.WatchListCacheBehind)
	case strings.Contains(msg, "conversion webhook") || strings.Contains(msg, "conversion failed"):
		// A CRD whose conversion webhook fails: its cache cannot
		// initialize (429 "initializing" with the webhook's error), or
		// etcd's objects cannot be served; the webhook is what to fix.
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Blocks: initializing}
	case initializing:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessCacheNotReady, Blocks: true}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}
	case code == http.StatusNotFound:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}
	case code == http.StatusTooManyRequests || code >= 500:
		// Priority and fairness shedding load, an apiserver shutting down,
		// etcd failing: nothing said of WatchList.
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	}
	return Verdict{Outcome: Failed, Reason: metrics.FreshnessOther}
}

// namesWatchListOption: a refusal (msg lowercased) that names one of the
// options a WatchList adds to a watch.
func namesWatchListOption(msg string) bool {
	for _, o := range []string{"sendinitialevents", "resourceversionmatch", "allowwatchbookmarks"} {
		if strings.Contains(msg, o) {
			return true
		}
	}
	return false
}

// admissionRefused tells the apiserver's admission turning a request
// away: priority and fairness, and max-in-flight where it is off, answer
// 429 in plain text (k8s.io/apiserver pkg/server/filters:
// tooManyRequests), which client-go keeps as the cause of a generic 429
// Status; the cache's 429s are Statuses with messages of their own.
func admissionRefused(st metav1.Status) bool {
	if st.Code != http.StatusTooManyRequests {
		return false
	}
	texts := []string{st.Message}
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			texts = append(texts, c.Message)
		}
	}
	for _, t := range texts {
		if strings.Contains(strings.ToLower(t), "too many requests, please try again later") {
			return true
		}
	}
	return false
}

// tooLargeResourceVersion tells the cacher's "Too large resource version"
// (k8s.io/apiserver storage.NewTooLargeResourceVersionError): by its cause,
// or its message.
func tooLargeResourceVersion(st metav1.Status) bool {
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Type == metav1.CauseTypeResourceVersionTooLarge {
				return true
			}
		}
	}
	return strings.Contains(strings.ToLower(st.Message), "too large resource version")
}

// minStuckChecks: fewer judged syncs than this in the window say nothing.
const minStuckChecks = 3

// isStuck: more than half of the window's judged syncs, at least
// minStuckChecks of them, blocked an informer. Syncs that say nothing of
// it (refused: informers list instead; forbidden, not found, unavailable;
// queued in the exporter's own priority level) are left out, so that they
// do not dilute the majority.
func isStuck(window []Verdict) bool {
	judged, blocked := 0, 0
	for _, v := range window {
		switch {
		case v.Blocks:
			judged++
			blocked++
		case v.Outcome == Synced:
			judged++
		}
	}
	return judged >= minStuckChecks && 2*blocked > judged
}
