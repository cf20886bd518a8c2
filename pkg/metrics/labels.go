// Package metrics defines every metric watchprobe exports, as rows of one
// table (table.go), and the series of each probe, path and controller
// derived from it. The names and labels are a contract: the dashboard, the
// alert rules and the Helm chart are written against them.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "watchprobe"

// Label values that are part of the contract.
const (
	PathInformer = "informer"
	PathWatch    = "watch"
	PathEtcd     = "etcd"
	// PathAPIServer is a watch pinned to one apiserver, one path per
	// apiserver; its series carry the apiserver's address.
	PathAPIServer = "apiserver"

	EventAdded    = "added"
	EventModified = "modified"
	EventDeleted  = "deleted"

	// Reasons a watch stream ended, read from the stream itself: an ERROR
	// event's Status, else how the response body ended.
	EndTimeout         = "timeout"           // the server closed the body cleanly at or after the requested timeout
	EndClosedEarly     = "closed_early"      // the server closed the body cleanly before the requested timeout
	EndExpired         = "expired"           // ERROR event, 410 Gone: the resourceVersion is no longer served
	EndTooManyRequests = "too_many_requests" // ERROR event, 429
	EndError           = "error"             // ERROR event with another Status, or the client gave up on the stream
	EndEOF             = "eof"               // reading the body failed: reset, unexpected EOF, HTTP/2 stream reset
	EndClient          = "client"            // the exporter's own shutdown

	// Reasons for a relist.
	RelistInitial = "initial"
	RelistExpired = "expired"
	RelistError   = "error"

	// How a relist fetched the state: a LIST call, or a WatchList stream
	// (watch with sendInitialEvents), the default of client-go 1.35 and later.
	ModeList      = "list"
	ModeWatchList = "watchlist"

	// Why an event was missed (not delivered by its deadline) or lost (not
	// delivered by the lost horizon): what the path went through between the
	// write and the verdict.
	MissedRelist      = "relist"      // a relist overlapped the window: after it only final state is delivered
	MissedUnavailable = "unavailable" // the path's list or watch requests failed then, or it had no stream at the verdict
	MissedSilent      = "silent"      // nothing on the path explains it: slow delivery if it arrives later, a delivery bug if it is lost

	// Why a write's delivery on a path could not be judged (unmeasurable):
	// the prober's own trouble or another client's doing, not List-Watch's.
	UnmeasurableStarved       = "exporter_starved" // the exporter itself was starved of CPU between the write's send and its verdict
	UnmeasurableDeleteBlocked = "delete_blocked"   // another client's finalizer holds the deleted marker: no DELETED event is owed
	UnmeasurableLeftSelector  = "left_selector"    // another client took the marker out of the path's label selector before the write

	// Requests the exporter makes, for throttling and failure counts.
	RequestList   = "list"
	RequestWatch  = "watch"
	RequestCreate = "create"
	RequestUpdate = "update"
	RequestDelete = "delete"

	// SourceWrite stands in the path label of requests that are not a
	// path's: marker writes and cleanup.
	SourceWrite = "write"

	VerbCreate = "create"
	VerbUpdate = "update"
	VerbDelete = "delete"

	// Outcomes of a resume check: a watch opened from the resourceVersion
	// of one of the probe's own earlier writes, as a client reconnects.
	ResumeReplayed   = "replayed"   // every marker event since, in order, once each
	ResumeExpired    = "expired"    // 410 Gone before any of them: that history is no longer held
	ResumeIncomplete = "incomplete" // a gap, a duplicate, an out-of-order event, a 410 after part of the replay, or events not delivered within the probe's lost_after
	ResumeError      = "error"      // the watch could not be opened, or ended early, with nothing proven wrong with what it delivered
)

// Why a freshness check was not answered from a fresh watch cache (the
// fallback reason label).
const (
	FallbackBound           = "bound"             // answered, but only after the apiserver's wait for a fresh cache: from etcd
	FallbackTooManyRequests = "too_many_requests" // 429: the cache was not fresh in time and the fallback is off (ConsistentListFromCacheSkipTimeoutFallback)
	FallbackTimeout         = "timeout"           // 504, or no answer within the probe's timeout
)

// Why a freshness check failed otherwise (the error reason label): the
// apiserver's answer, kept to a closed set.
const (
	FreshnessForbidden        = "forbidden"         // 401 or 403: the exporter may not list the resource there
	FreshnessNotFound         = "not_found"         // 404: the resource is not served (a CRD removed, a group not installed)
	FreshnessCacheNotReady    = "cache_not_ready"   // 429 "storage is (re)initializing": the watch cache never initialized
	FreshnessConversionFailed = "conversion_failed" // the answer names the CRD's failing conversion webhook (a 429 "initializing" with the webhook's error too)
	FreshnessUnavailable      = "unavailable"       // no answer (refused, reset), a 502 or 503, or a 429 not the cache's (priority and fairness, shutdown)
	FreshnessOther            = "other"             // any other answer
)

// Kinds of stale read of an apiserver's cache (the kind label).
const (
	StaleBackInTime = "back_in_time" // a list resourceVersion lower than one the same apiserver already returned
	StaleBehind     = "stale"        // a list resourceVersion lower than a write acknowledged more than lost_after earlier
	StaleGhost      = "ghost"        // a marker listed more than lost_after after its delete was acknowledged
	StaleMissing    = "missing"      // a marker created more than lost_after earlier, not deleted, and never listed
)

// The freshness checks' closed sets, in the order reports list them.
var (
	FallbackReasons       = []string{FallbackBound, FallbackTooManyRequests, FallbackTimeout}
	FreshnessErrorReasons = []string{FreshnessForbidden, FreshnessNotFound, FreshnessCacheNotReady, FreshnessConversionFailed, FreshnessUnavailable, FreshnessOther}
	StaleKinds            = []string{StaleBackInTime, StaleBehind, StaleGhost, StaleMissing}
)

// freshnessBuckets span a fresh cache on loopback (a few ms) to a check that
// timed out; they are closest around the apiserver's 3 s bound.
var freshnessBuckets = []float64{0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.9, 3.1, 4, 5, 10, 30}

// Controllers a probe can time (its `controllers` setting): each is a
// label value of the controller series.
const (
	ControllerDeployment = "deployment"
	ControllerReplicaSet = "replicaset"
)

// Why a controller's reaction was missed or lost (the reason label):
// ReactionController when the change itself had reached the exporter's own
// watch of the object, so the controller's informer could have seen it and
// the controller did not answer; ReactionUndelivered when it had not (the
// exporter's watch was down or behind, or the apiserver did not deliver
// it), so the controller cannot be blamed.
const (
	ReactionController  = "controller"
	ReactionUndelivered = "undelivered"
)

// ReactionReasons are the reasons' label values, in order.
var ReactionReasons = []string{ReactionController, ReactionUndelivered}

// ResumeOutcomes are the outcomes of a resume check, in the order reports
// list them.
var ResumeOutcomes = []string{ResumeReplayed, ResumeExpired, ResumeIncomplete, ResumeError}

// lifetimeBuckets span a watch cut at once to the longest lifetime the
// apiserver grants (client-go asks for 5 to 10 minutes).
var lifetimeBuckets = []float64{0.1, 1, 5, 15, 30, 60, 120, 300, 450, 600, 900, 1800, 3600}

// wakeBuckets span the self-monitor's lateness from a scheduler's usual
// wake-up jitter to a whole CPU-quota period (100 ms by default) and
// beyond.
var wakeBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 5}

// latencyBuckets span 1 ms (a healthy loopback apiserver) to 60 s (an event
// that arrives long after any sane deadline is still worth placing). They
// are closest where healthy and busy clusters live, 2.5 to 50 ms, at most
// 1.5 apart: histogram_quantile interpolates linearly inside a bucket, so a
// wider bucket there reads a quantile up to a third too slow (`make bench`
// prints the p50 each form gives beside the exact one).
var latencyBuckets = []float64{
	0.001, 0.0025, 0.0035, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.035, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// Options choose how the probe metrics are exposed. The zero value is the
// default.
type Options struct {
	// NativeHistogramsOnly leaves the classic buckets out of every
	// histogram: they are most of the series (16 bucket series per label set
	// of a latency histogram). A Prometheus that ingests native histograms
	// stores each label set as one series; one that does not gets only a
	// count, a sum and a +Inf bucket, and no quantile.
	NativeHistogramsOnly bool
}

// histogramOpts are a histogram family's options: the classic buckets
// given, native buckets too if native, and native buckets alone with
// NativeHistogramsOnly. The latency histograms are native as well by
// default: a classic histogram cannot show a shift of a few hundred
// microseconds around the 1-5 ms where a healthy cluster lives. The
// lifetime and relist histograms stay classic by default; with
// NativeHistogramsOnly no histogram keeps classic buckets.
func (o Options) histogramOpts(f *Family) prometheus.HistogramOpts {
	opts := prometheus.HistogramOpts{Namespace: namespace, Name: f.Name, Help: f.Help, Buckets: f.Buckets}
	native := f.Native
	if o.NativeHistogramsOnly {
		// nil, not the default buckets: client_golang adds DefBuckets to
		// a histogram without native buckets only.
		opts.Buckets, native = nil, true
	}
	if native {
		opts.NativeHistogramBucketFactor = 1.1
		opts.NativeHistogramMaxBucketNumber = 160
		opts.NativeHistogramMinResetDuration = time.Hour
	}
	return opts
}

// The label values that are closed sets, in the order reports list them.
var (
	MissedReasons = []string{MissedRelist, MissedUnavailable, MissedSilent}
	EndReasons    = []string{EndTimeout, EndClosedEarly, EndExpired, EndTooManyRequests, EndError, EndEOF, EndClient}
	RelistReasons = []string{RelistInitial, RelistExpired, RelistError}
	// UnmeasurableReasons are the reasons' label values of unmeasurable
	// writes, in order.
	UnmeasurableReasons = []string{UnmeasurableStarved, UnmeasurableDeleteBlocked, UnmeasurableLeftSelector}
	// WriteRequests are the requests of a probe's writes and its cleanup,
	// under path "write".
	WriteRequests = []string{RequestList, RequestCreate, RequestUpdate, RequestDelete}
)
