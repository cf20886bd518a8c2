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
	UnmeasurableDeleteRaced   = "delete_raced"     // another client changed the marker between each of the probe's preconditioned deletes: the delete went without a precondition, and which DELETED is its own is unknown
	UnmeasurablePathRefused   = "path_refused"     // the path's list and watch requests were refused (403 or 404, persistently, over fresh connections too) since before the write was sent: the exporter's own permissions or configuration

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

// Why the apiserver refused a marker write (the cause label): the probe's
// own namespace, permissions or policies, read from the apiserver's Status;
// never the control plane's own failures (5xx, 429, timeouts, no answer),
// which are write errors.
const (
	RefusedAdmission        = "admission_denied"  // a ValidatingAdmissionPolicy, an admission webhook or another admission policy denied it
	RefusedQuota            = "quota_exceeded"    // a ResourceQuota of the namespace refused it: exceeded, or its usage not yet known
	RefusedForbidden        = "forbidden"         // 403 (RBAC or an admission plugin); a 401 is the control plane's
	RefusedNamespaceMissing = "namespace_missing" // the marker namespace does not exist (404) or is being deleted (403 NamespaceTerminating)
	RefusedNotFound         = "not_found"         // 404 of the marker itself: another client deleted it, or the kind is not served
	RefusedInvalid          = "invalid"           // 422: the marker was judged invalid, not by an admission policy
)

// Why a path's list or watch requests are refused (the reason label of
// watchprobe_path_refused): the exporter's own permissions or
// configuration, not the control plane's failure.
const (
	PathForbidden = "forbidden" // 403 (RBAC); a 401 is the control plane's
	PathNotFound  = "not_found" // 404: the apiserver does not serve the marker kind there
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
	FreshnessUnavailable      = "unavailable"       // no answer (refused, reset; no request written to a connection within the bound), a 502 or 503, or a 429 neither the cache's nor the apiserver's admission's (an apiserver shutting down)
	FreshnessOther            = "other"             // any other answer
)

// Why a freshness check or a WatchList sync was held by the apiserver's
// admission (priority and fairness, or max-in-flight) and not judged (the
// queued reason label).
const (
	QueuedWaited   = "waited"   // the resourceVersion=0 request sent just before (a LIST, or a watch) took queued_after or longer, or had no answer within the bound
	QueuedRejected = "rejected" // a request of the check was refused with 429 Too many requests, please try again later
)

// Kinds of stale read of an apiserver's cache (the kind label).
const (
	StaleBackInTime = "back_in_time" // a list resourceVersion lower than one the same apiserver already returned
	StaleBehind     = "stale"        // a list resourceVersion lower than a write acknowledged more than lost_after earlier
	StaleGhost      = "ghost"        // a marker listed more than lost_after after its delete was acknowledged
	StaleMissing    = "missing"      // a marker created more than lost_after earlier, not deleted, and never listed
)

// Why an apiserver serves a resource without a watch cache (the uncached
// reason label): its freshness checks would time etcd, not a cache.
const (
	UncachedAggregated   = "aggregated"     // its group/version's APIService names a service: another server answers, through kube-apiserver's proxy
	UncachedNoWatchCache = "no_watch_cache" // kube-apiserver stores it without a cacher (--watch-cache-sizes=<resource>#0, --watch-cache=false)
)

// The freshness checks' closed sets, in the order reports list them.
var (
	FallbackReasons       = []string{FallbackBound, FallbackTooManyRequests, FallbackTimeout}
	FreshnessErrorReasons = []string{FreshnessForbidden, FreshnessNotFound, FreshnessCacheNotReady, FreshnessConversionFailed, FreshnessUnavailable, FreshnessOther}
	UncachedReasons       = []string{UncachedAggregated, UncachedNoWatchCache}
	QueuedReasons         = []string{QueuedWaited, QueuedRejected}
	StaleKinds            = []string{StaleBackInTime, StaleBehind, StaleGhost, StaleMissing}
)

// Why a WatchList sync missed its end bookmark (the reason label): in each
// case a client-go informer neither syncs nor lists instead; its reflector
// waits, or sends the WatchList again.
const (
	WatchListNoResponse  = "no_response"  // sent, and no answer within the bound: the apiserver still waiting (for etcd's current revision, or for its watch cache), or a proxy holding the request
	WatchListNoBookmark  = "no_bookmark"  // answered, the stream open, and no end bookmark within the bound (a proxy that drops bookmarks)
	WatchListEnded       = "ended"        // the stream ended before its end bookmark, after events or after a second (client-go then sends the WatchList again)
	WatchListCacheBehind = "cache_behind" // an ERROR event 504 "Too large resource version": the watch cache was not fresh within the apiserver's own 3 s wait
)

// Why a WatchList request was refused as such (the reason label): a
// client-go informer then lists instead, and syncs.
const (
	WatchListRejected = "rejected" // 400 or 422: the WatchList feature gate off (the default of 1.33), an apiserver before 1.27, or a proxy refusing the parameters
	WatchListStorage  = "storage"  // an ERROR event saying the storage cannot stream (etcd without progress notifications)
	WatchListClosed   = "closed"   // the stream closed within a second with no event at all: client-go's "very short watch"
)

// The WatchList sync checks' closed sets, in the order reports list them;
// their errors are counted by FreshnessErrorReasons.
var (
	WatchListMissedReasons  = []string{WatchListNoResponse, WatchListNoBookmark, WatchListEnded, WatchListCacheBehind}
	WatchListRefusedReasons = []string{WatchListRejected, WatchListStorage, WatchListClosed}
)

// freshnessBuckets span a fresh cache on loopback (a few ms) to a check that
// timed out; they are closest around the apiserver's 3 s bound.
var freshnessBuckets = []float64{0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.9, 3.1, 4, 5, 10, 30}

// roundTripBuckets are the freshness checks' round trips, coarser: the
// wait's histogram is the one judged, this one is for comparing with what
// the apiserver's clients see.
var roundTripBuckets = []float64{0.005, 0.025, 0.1, 0.5, 1, 3, 5, 10}

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
	UnmeasurableReasons = []string{UnmeasurableStarved, UnmeasurableDeleteBlocked, UnmeasurableLeftSelector, UnmeasurableDeleteRaced, UnmeasurablePathRefused}
	// RefusalCauses are the cause label's values of refused writes, in
	// order; PathRefusals the reasons of refused paths.
	RefusalCauses = []string{RefusedAdmission, RefusedQuota, RefusedForbidden, RefusedNamespaceMissing, RefusedNotFound, RefusedInvalid}
	PathRefusals  = []string{PathForbidden, PathNotFound}
	// WriteRequests are the requests of a probe's writes and its cleanup,
	// under path "write".
	WriteRequests = []string{RequestList, RequestCreate, RequestUpdate, RequestDelete}
)
