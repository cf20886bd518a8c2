package freshness

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The judgement: pure functions of what a check saw, so that every verdict
// has a table test.

// Outcome is what became of one freshness check.
type Outcome uint8

const (
	// Fresh: answered from a watch cache that had caught up in time.
	Fresh Outcome = iota
	// FellBack: not answered from a fresh cache in time (Reason is one of
	// metrics.FallbackReasons).
	FellBack
	// Failed: any other failure (Reason is one of
	// metrics.FreshnessErrorReasons).
	Failed
	// Queued: held by the apiserver's admission (priority and fairness,
	// max-in-flight) too long to tell its queue from the cache's wait
	// (Reason is one of metrics.QueuedReasons): neither fresh nor not.
	Queued
	// Uncached: not checked, since the apiserver serves the resource
	// without a watch cache (Reason is one of metrics.UncachedReasons;
	// uncached.go).
	Uncached
)

func (o Outcome) String() string {
	return [...]string{"fresh", "fell back", "failed", "queued", "uncached"}[o]
}

// Answer is what one LIST got back.
type Answer struct {
	// Status is the HTTP status, 0 when no response arrived (Err).
	Status int
	// Message is the Status object's message of a failed answer.
	Message string
	// Err is the transport's error when no response arrived.
	Err error
	// Took is from the moment the request had its connection to the end
	// of its body.
	Took time.Duration
}

// answered: a 200 with its whole body.
func (a Answer) answered() bool { return a.Err == nil && a.Status == http.StatusOK }

// refused: the apiserver's admission turned the request away before any
// handler saw it. API Priority and Fairness, and max-in-flight where it is
// off, answer 429 with this text, not a Status (k8s.io/apiserver
// pkg/server/filters: tooManyRequests); the cache's 429s are Statuses with
// messages of their own.
func (a Answer) refused() bool {
	return a.Status == http.StatusTooManyRequests && strings.Contains(strings.ToLower(a.Message), "too many requests, please try again later")
}

// Verdict is one check's judgement.
type Verdict struct {
	Outcome Outcome
	Reason  string
	// Timed: Wait is the cache's wait, to be observed: both LISTs were
	// answered, and the consistent one was fresh or waited at the bound
	// and came from etcd.
	Timed bool
	Wait  time.Duration
	// Uncached: a failure that says the watch cache could not serve (it
	// never initialized, or the request waited out the bound for it), so
	// it counts towards stuck; a failure otherwise says nothing of it.
	Uncached bool
}

// limits are the settings a check is judged by. bound is the apiserver's
// own wait for a fresh cache: a consistent LIST that waited that long came
// from etcd. timeout is what each LIST asked the apiserver for:
// kube-apiserver 1.37 answers a LIST still waiting on storage then by
// resetting the HTTP/2 stream (INTERNAL_ERROR), not always with a 504, so
// a failure at or after it is a timeout too. queuedAfter: a baseline this
// slow was held in the apiserver's queue.
type limits struct {
	bound, timeout, queuedAfter time.Duration
}

// judgeCheck judges a consistent LIST's answer a beside its baseline base,
// a resourceVersion=0 LIST of the same resource sent just before it on the
// same connection.
//
// The bound has one rule: the check fell back at the bound when its wait,
// the consistent LIST's time over the baseline's (both answered), is the
// bound or more; below it, it is fresh. Nothing else is compared with the
// bound. Without an answered baseline there is no wait: the consistent
// LIST's round trip is more than its wait, so an answer within the bound
// is fresh, not timed, and one past it cannot be judged by time (failed,
// unavailable, as its baseline was).
//
// Queued needs the apiserver's queue as its evidence: a LIST refused by
// its admission (429 in its own words), or an answered consistent LIST
// beside a baseline that took queuedAfter or longer (both waited in the
// same priority level's queue, and the wait is the queue's as much as the
// cache's). A LIST that timed out (or answered 504) is never queued:
// priority and fairness holds a request in its queue for at most a quarter
// of its timeout and then refuses it with a 429 (k8s.io/apiserver
// pkg/server/filters: getRequestWaitContext), so one that ran out its
// timeout was admitted and spent the rest of it waiting for the cache and
// etcd (config: freshness.timeout leaves room for the bound after the
// quarter). A timeout beside a baseline that got no answer at all is the
// apiserver not answering, not its cache: failed, unavailable. A verdict
// the apiserver states (a cache not ready, its 429
// after the bound, a refusal of another kind) holds whatever the baseline.
func judgeCheck(a, base Answer, l limits) Verdict {
	msg := strings.ToLower(a.Message)
	timed := a.answered() && base.answered()
	var wait time.Duration
	if timed {
		wait = max(0, a.Took-base.Took)
	}
	var ne net.Error
	timedOut := a.Err != nil && (errors.Is(a.Err, context.DeadlineExceeded) || (errors.As(a.Err, &ne) && ne.Timeout()) || a.Took >= l.timeout)
	switch {
	case (timedOut || a.Status == http.StatusGatewayTimeout) && base.Err != nil:
		// Not even the baseline, served from the cache as it is, was
		// answered: the apiserver (or the way to it) is not answering,
		// whatever its cache.
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	case timedOut, a.Status == http.StatusGatewayTimeout:
		return Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}
	case a.Err != nil:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	case a.answered() && base.refused():
		return Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}
	case timed && base.Took >= l.queuedAfter:
		return Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}
	case timed && wait >= l.bound:
		return Verdict{Outcome: FellBack, Reason: metrics.FallbackBound, Timed: true, Wait: wait}
	case timed:
		return Verdict{Outcome: Fresh, Timed: true, Wait: wait}
	case a.answered() && a.Took < l.bound:
		return Verdict{Outcome: Fresh}
	case a.answered():
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	case a.refused():
		return Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}
	case conversionFailed(msg):
		// Before the cache's own answer: a cache that cannot initialize
		// because a CRD's conversion webhook fails answers 429 "storage is
		// (re)initializing" with the webhook's error in its message, and
		// the webhook is what to fix. Only then, or after a wait at the
		// bound (the time over an answered baseline, as for any check), is
		// it the cache's failure: a resource served without a watch cache
		// fails its conversion at once, from etcd.
		uncached := (a.Status == http.StatusTooManyRequests && strings.Contains(msg, "initializing")) ||
			(base.answered() && a.Took-base.Took >= l.bound)
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Uncached: uncached}
	case a.Status == http.StatusTooManyRequests && strings.Contains(msg, "initializing"):
		// The cacher's "storage is (re)initializing": the cache never
		// became ready.
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessCacheNotReady, Uncached: true}
	case a.Status == http.StatusTooManyRequests && strings.Contains(msg, "too large resource version"):
		// ConsistentListFromCacheSkipTimeoutFallback: the cache was not
		// fresh by the bound, and the apiserver refused rather than ask
		// etcd.
		return Verdict{Outcome: FellBack, Reason: metrics.FallbackTooManyRequests}
	case a.Status == http.StatusTooManyRequests:
		// Any other 429 says nothing of the cache: an apiserver shutting
		// down ("apiserver cacher is stopped").
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	case a.Status == http.StatusUnauthorized || a.Status == http.StatusForbidden:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}
	case a.Status == http.StatusNotFound:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}
	case a.Status == http.StatusServiceUnavailable || a.Status == http.StatusBadGateway:
		return Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}
	}
	return Verdict{Outcome: Failed, Reason: metrics.FreshnessOther}
}

// conversionFailed tells an answer that names a failed CRD conversion
// (msg lowercased).
func conversionFailed(msg string) bool {
	return strings.Contains(msg, "conversion webhook") || strings.Contains(msg, "conversion failed")
}

// stuckish: a verdict that says the cache did not catch up: a fallback of
// any reason, or a failure of the cache itself.
func stuckish(v Verdict) bool {
	return v.Outcome == FellBack || (v.Outcome == Failed && v.Uncached)
}

// minStuckChecks: fewer checks than this in the window say nothing.
const minStuckChecks = 3

// isStuck: most (more than half) of the window's checks, at least
// minStuckChecks of them, say the cache did not catch up. Failures of
// another kind (forbidden, not found) and queued checks say nothing either
// way, so they do not dilute the majority: they are left out.
func isStuck(window []Verdict) bool {
	judged, stuck := 0, 0
	for _, v := range window {
		if v.Outcome == Queued || (v.Outcome == Failed && !stuckish(v)) {
			continue
		}
		judged++
		if stuckish(v) {
			stuck++
		}
	}
	return judged >= minStuckChecks && 2*stuck > judged
}

// Marker is what the probe had acknowledged of one marker, as the reads
// judge it.
type Marker struct {
	Name string
	// Created is when its create was acknowledged; RV the resourceVersion
	// of its newest acknowledged write, acknowledged at RVAt.
	Created time.Time
	RV      uint64
	RVAt    time.Time
	// Deleted is when its delete was acknowledged, zero while it is not.
	Deleted time.Time
}

// Listing is one resourceVersion=0 LIST of the markers on one apiserver.
type Listing struct {
	RV    uint64
	Names []string
}

// readState is what the reads of one apiserver remember between lists.
type readState struct {
	// highest is the highest list resourceVersion the apiserver returned.
	highest uint64
	// seen are the markers it listed once; counted those already counted
	// ghost or missing, by kind, so each is counted once.
	seen    map[string]bool
	counted map[string]string
}

func newReadState() *readState {
	return &readState{seen: map[string]bool{}, counted: map[string]string{}}
}

// ReadVerdict is one list's judgement: each stale read found, by kind, with
// the markers it concerns, and the resourceVersions that prove it.
type ReadVerdict struct {
	Kinds []string // metrics.StaleKinds, in order; one entry per finding
	Names []string // the marker of each finding ("" for a list RV finding)
	// Against is the resourceVersion the list's fell below, for
	// back_in_time and stale findings.
	Against []uint64
}

func (v *ReadVerdict) add(kind, name string, against uint64) {
	v.Kinds = append(v.Kinds, kind)
	v.Names = append(v.Names, name)
	v.Against = append(v.Against, against)
}

// judgeRead judges list against the markers the probe acknowledged and
// what the same apiserver listed before, at now; it updates st. A marker is
// judged only once lostAfter has passed since its acknowledgement: a cache
// may lag that much and still be healthy, and the probe's own lost
// verdict uses the same horizon.
func judgeRead(st *readState, list Listing, markers []Marker, now time.Time, lostAfter time.Duration) ReadVerdict {
	var v ReadVerdict
	if list.RV < st.highest {
		v.add(metrics.StaleBackInTime, "", st.highest)
	}
	st.highest = max(st.highest, list.RV)
	// The newest write acknowledged longer than lostAfter ago: a marker's
	// newest write is judged from its own acknowledgement, not its
	// create's (an update acknowledged a moment ago is not yet owed).
	var newest uint64
	for _, m := range markers {
		if !m.RVAt.IsZero() && now.Sub(m.RVAt) > lostAfter {
			newest = max(newest, m.RV)
		}
	}
	if list.RV < newest {
		v.add(metrics.StaleBehind, "", newest)
	}
	listed := map[string]bool{}
	for _, n := range list.Names {
		listed[n] = true
	}
	for _, m := range markers {
		switch {
		case st.counted[m.Name] != "":
		case !m.Deleted.IsZero() && listed[m.Name] && now.Sub(m.Deleted) > lostAfter:
			v.add(metrics.StaleGhost, m.Name, 0)
			st.counted[m.Name] = metrics.StaleGhost
		case m.Deleted.IsZero() && !m.Created.IsZero() && !listed[m.Name] && !st.seen[m.Name] && now.Sub(m.Created) > lostAfter:
			v.add(metrics.StaleMissing, m.Name, 0)
			st.counted[m.Name] = metrics.StaleMissing
		}
		if listed[m.Name] {
			st.seen[m.Name] = true
		}
	}
	return v
}

// forget drops the state of markers no longer tracked.
func (st *readState) forget(tracked func(string) bool) {
	for n := range st.seen {
		if !tracked(n) {
			delete(st.seen, n)
		}
	}
	for n := range st.counted {
		if !tracked(n) {
			delete(st.counted, n)
		}
	}
}
