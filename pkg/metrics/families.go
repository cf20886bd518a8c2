package metrics

// Type is a family's metric type.
type Type uint8

const (
	Counter Type = iota
	Gauge
	Histogram
)

func (t Type) String() string { return [...]string{"counter", "gauge", "histogram"}[t] }

// Scope says which series a family belongs to, and so the labels every
// one of its series starts with.
type Scope uint8

const (
	// ScopePath: one probe's path, labels probe, path, apiserver (empty
	// but on a path pinned to one apiserver).
	ScopePath Scope = iota
	// ScopeProbe: one probe, label probe.
	ScopeProbe
	// ScopeController: one controller a probe times, labels probe and
	// controller.
	ScopeController
	// ScopeResource: one resource type a probe's freshness checks list,
	// through one apiserver: labels probe, resource, apiserver (empty on
	// the load-balanced path).
	ScopeResource
	// ScopeReads: a probe's stale and ghost read checks of its markers on
	// one pinned apiserver: labels probe, apiserver.
	ScopeReads
	// ScopeInfo: the exporter's own, on the probe registry beside the
	// results it qualifies.
	ScopeInfo
	// ScopeExporter: the exporter process's, on a registry of its own
	// (--web.disable-exporter-metrics leaves them out).
	ScopeExporter
)

// scopeLabels are the labels each scope's series start with.
var scopeLabels = [...][]string{
	ScopePath:       {"probe", "path", "apiserver"},
	ScopeProbe:      {"probe"},
	ScopeController: {"probe", "controller"},
	ScopeResource:   {"probe", "resource", "apiserver"},
	ScopeReads:      {"probe", "apiserver"},
	ScopeInfo:       nil,
	ScopeExporter:   nil,
}

// Label is a label of a family beyond its scope's.
type Label struct {
	Name string
	// Values, when the label's values are a closed set, are all of them:
	// every combination is a series from the first scrape, at zero, so
	// that rules and absent() see it, unless the family is Lazy. Nil: the
	// values come as they happen (an HTTP status code).
	Values []string
	// Zero is, for a label whose values come as they happen, the value
	// that is a series from the start, at zero: code 0 (no response), so
	// that an error ratio is 0 rather than empty.
	Zero string
}

// Family is one metric family, declared once: its name (after
// watchprobe_), one sentence of help (the explanations are in
// docs/metrics.md), its type, scope and labels, its buckets, and which
// series carry it. Registration, each probe's, path's and controller's
// series, the series at zero and the metrics reference derive from it.
type Family struct {
	Name   string
	Help   string
	Type   Type
	Scope  Scope
	Labels []Label
	// Buckets are a histogram's classic buckets; Native adds native
	// buckets beside them (with Options.NativeHistogramsOnly every
	// histogram has native buckets alone).
	Buckets []float64
	Native  bool
	// Lazy: no series exists until its first value (a relist of a reason
	// and mode, a resume window).
	Lazy bool
	// Lag: only on a probe's paths other than etcd, when it has an etcd
	// path to pair their arrivals with.
	Lag bool
	// Resume: one of a path's resume checks' (ForResume), not of the path.
	Resume bool
	// Collected: exported by a collector of its own (computed at scrape
	// time, or client_golang's); the row documents it.
	Collected bool
	// Group is the section of the metrics reference it is listed in.
	Group string
}

// The groups of the metrics reference, in order.
const (
	groupLatency     = "Latency and writes"
	groupVerdicts    = "Delivery verdicts"
	groupWatch       = "Watch health"
	groupResume      = "Resume checks"
	groupControllers = "Controller reactions"
	groupFreshness   = "List freshness"
	groupExporter    = "The exporter itself"
)

// Groups are the sections of the metrics reference, in order.
var Groups = []string{groupLatency, groupVerdicts, groupWatch, groupResume, groupControllers, groupFreshness, groupExporter}

var (
	events  = Label{Name: "event", Values: []string{EventAdded, EventModified, EventDeleted}}
	reasons = Label{Name: "reason", Values: MissedReasons}
	verbs   = Label{Name: "verb", Values: []string{VerbCreate, VerbUpdate, VerbDelete}}
	code    = Label{Name: "code", Zero: "0"}
)

// The families. Every one is listed in Families.
var (
	EventLatency = &Family{Name: "event_latency_seconds", Type: Histogram, Scope: ScopePath, Labels: []Label{events},
		Buckets: latencyBuckets, Native: true, Group: groupLatency,
		Help: "Time from just before a marker write was sent to the arrival of its watch event on a path."}
	EventsObserved = &Family{Name: "events_observed_total", Type: Counter, Scope: ScopePath, Labels: []Label{events}, Group: groupLatency,
		Help: "Marker writes whose watch event arrived on a path."}
	APIServerLag = &Family{Name: "apiserver_lag_seconds", Type: Histogram, Scope: ScopePath, Lag: true,
		Buckets: latencyBuckets, Native: true, Group: groupLatency,
		Help: "For each marker write seen on the etcd path and on another path, its arrival on that path minus its arrival on the etcd path."}
	ProbeSuccess = &Family{Name: "probe_success", Type: Gauge, Scope: ScopeProbe, Group: groupLatency,
		Help: "1 if every write of the latest completed cycle succeeded and was observed on every path within the deadline, else 0."}
	LastEventTimestamp = &Family{Name: "last_event_timestamp_seconds", Type: Gauge, Scope: ScopePath, Group: groupLatency,
		Help: "Unix time at which the latest marker event arrived on a path."}
	WriteDuration = &Family{Name: "write_duration_seconds", Type: Histogram, Scope: ScopeProbe, Labels: []Label{verbs},
		Buckets: latencyBuckets, Native: true, Group: groupLatency,
		Help: "Round-trip time of successful marker writes to the apiserver, from just before the request was sent to its response."}
	Writes = &Family{Name: "writes_total", Type: Counter, Scope: ScopeProbe, Labels: []Label{verbs}, Group: groupLatency,
		Help: "Marker writes sent to the apiserver, successful or not."}
	WriteErrors = &Family{Name: "write_errors_total", Type: Counter, Scope: ScopeProbe, Labels: []Label{verbs, code}, Group: groupLatency,
		Help: "Marker writes that failed, by HTTP status code (0 when no response arrived)."}
	MarkersPendingDeletion = &Family{Name: "markers_pending_deletion", Type: Gauge, Scope: ScopeProbe, Group: groupLatency,
		Help: "Marker objects this replica wrote, or may have written, whose deletion has not succeeded yet."}

	EventsMissed = &Family{Name: "events_missed_total", Type: Counter, Scope: ScopePath, Labels: []Label{reasons}, Group: groupVerdicts,
		Help: "Acknowledged marker writes whose watch event did not arrive on a path within the deadline, by reason."}
	EventsLate = &Family{Name: "events_late_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Missed marker writes whose event did arrive on a path, after the deadline and before lost_after."}
	EventsLost = &Family{Name: "events_lost_total", Type: Counter, Scope: ScopePath, Labels: []Label{reasons}, Group: groupVerdicts,
		Help: "Acknowledged marker writes whose watch event had still not arrived on a path lost_after after their answer, by reason."}
	EventsDuplicate = &Family{Name: "events_duplicate_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Marker changes delivered again on a path, the same resourceVersion with no relist in between."}
	ForeignChanges = &Family{Name: "marker_foreign_changes_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Changes of the probe's markers by another client delivered on a path; never timed or judged."}
	EventsReplayed = &Family{Name: "events_replayed_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Writes delivered again on a path after a relist, as a relist is expected to."}
	EventsOutOfOrder = &Family{Name: "events_out_of_order_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Writes delivered on a path after a later write of the same writer, with no relist in between."}
	EventsAfterFailedWrite = &Family{Name: "events_after_failed_write_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Events delivered on a path for marker writes the exporter saw fail; never timed or judged."}

	PathUp = &Family{Name: "path_up", Type: Gauge, Scope: ScopePath, Group: groupWatch,
		Help: "1 while the path has a watch stream open and caught up, else 0."}
	WatchStalled = &Family{Name: "watch_stalled", Type: Gauge, Scope: ScopePath, Group: groupWatch,
		Help: "1 while writes are acknowledged but nothing (no event, no bookmark) has arrived on the path for longer than the probe's stall bound."}
	WatchIdle = &Family{Name: "watch_idle_seconds", Type: Gauge, Scope: ScopePath, Collected: true, Group: groupWatch,
		Help: "Seconds since the latest event or bookmark arrived on the path, at scrape time."}
	WatchRestarts = &Family{Name: "watch_restarts_total", Type: Counter, Scope: ScopePath, Group: groupWatch,
		Labels: []Label{{Name: "reason", Values: EndReasons}},
		Help:   "Watch streams that ended, by reason."}
	WatchDuration = &Family{Name: "watch_duration_seconds", Type: Histogram, Scope: ScopePath, Buckets: lifetimeBuckets, Group: groupWatch,
		Help: "Lifetime of watch streams that opened, from the watch request to the stream's end."}
	Relists = &Family{Name: "relists_total", Type: Counter, Scope: ScopePath, Lazy: true, Group: groupWatch,
		Labels: []Label{{Name: "reason", Values: RelistReasons}, modes},
		Help:   "Full state fetches by a path, by reason and the mode of their first attempt; retried attempts of one relist count once."}
	RelistDuration = &Family{Name: "relist_duration_seconds", Type: Histogram, Scope: ScopePath, Lazy: true, Labels: []Label{modes},
		Buckets: latencyBuckets, Group: groupWatch,
		Help: "Time a relist took, from its first attempt until the state was complete, by the mode that completed it."}
	Bookmarks = &Family{Name: "bookmarks_total", Type: Counter, Scope: ScopePath, Group: groupWatch,
		Help: "BOOKMARK events received on a path."}
	RequestsFailed = &Family{Name: "requests_failed_total", Type: Counter, Scope: ScopePath, Group: groupWatch,
		Labels: []Label{{Name: "request", Values: []string{RequestList, RequestWatch}}, code},
		Help:   "List and watch requests of a path that failed before any stream existed, by HTTP status code (0 when no response arrived)."}
	RequestsThrottled = &Family{Name: "requests_throttled_total", Type: Counter, Scope: ScopePath, Group: groupWatch,
		Labels: []Label{{Name: "request", Values: []string{RequestList, RequestWatch}}},
		Help:   "Requests the apiserver answered with 429 Too Many Requests, retried by client-go or not, by path (or write) and request."}

	ResumeChecks = &Family{Name: "resume_checks_total", Type: Counter, Scope: ScopePath, Resume: true, Group: groupResume,
		Labels: []Label{{Name: "age"}, {Name: "outcome", Values: ResumeOutcomes}},
		Help:   "Resume checks, watches opened on a path from the resourceVersion of one of the probe's own writes at least age old, by outcome."}
	ResumeWindow = &Family{Name: "resume_window_seconds", Type: Gauge, Scope: ScopePath, Resume: true, Lazy: true, Group: groupResume,
		Help: "The largest configured age whose resume check replayed exactly in the path's latest round that judged every age."}
	ResumeReplay = &Family{Name: "resume_replay_seconds", Type: Histogram, Scope: ScopePath, Resume: true, Buckets: latencyBuckets, Group: groupResume,
		Help: "Time from a resume check's watch request to the arrival of the last marker event it had to replay, for checks that replayed exactly."}
	ResumeAge = &Family{Name: "resume_age_seconds", Type: Gauge, Scope: ScopeProbe, Lazy: true, Labels: []Label{{Name: "age"}}, Group: groupResume,
		Help: "Each age the probe's resume checks are configured with, in seconds, labelled as in watchprobe_resume_checks_total."}

	ControllerReaction = &Family{Name: "controller_reaction_seconds", Type: Histogram, Scope: ScopeController,
		Buckets: latencyBuckets, Native: true, Group: groupControllers,
		Help: "Time from just before the probe changed its marker object for a controller to the arrival of the status whose observedGeneration reached the change."}
	ControllerShare = &Family{Name: "controller_share_seconds", Type: Histogram, Scope: ScopeController,
		Buckets: latencyBuckets, Native: true, Group: groupControllers,
		Help: "A reaction's arrival minus that of its spec change on the exporter's own watch of the object: the controller's share."}
	ControllerDelivery = &Family{Name: "controller_change_delivery_seconds", Type: Histogram, Scope: ScopeController,
		Buckets: latencyBuckets, Native: true, Group: groupControllers,
		Help: "Time from a spec change's send to its arrival on the exporter's own watch of the object, for the reactions whose change arrived there first."}
	ControllerChanges = &Family{Name: "controller_changes_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Help: "Spec changes of the marker object the apiserver acknowledged, each a reaction the controller owes."}
	ControllerChangeErrors = &Family{Name: "controller_change_errors_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Help: "Spec changes, and creates, of a controller's marker object that failed: no reaction is owed for them."}
	ReactionsMissed = &Family{Name: "controller_reactions_missed_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Labels: []Label{reactionReasons},
		Help:   "Acknowledged spec changes whose reaction had not arrived within the probe's deadline, by reason."}
	ReactionsLate = &Family{Name: "controller_reactions_late_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Help: "Missed reactions that did arrive, after the deadline and before the probe's lost_after."}
	ReactionsLost = &Family{Name: "controller_reactions_lost_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Labels: []Label{reactionReasons},
		Help:   "Acknowledged spec changes whose reaction had still not arrived lost_after after their answer, by reason."}

	ListFreshness = &Family{Name: "list_freshness_seconds", Type: Histogram, Scope: ScopeResource,
		Buckets: freshnessBuckets, Native: true, Group: groupFreshness,
		Help: "Time a consistent LIST (no resourceVersion) of the resource in the probe's namespace took: how far its watch cache was behind etcd, for checks answered from it."}
	ListFreshnessChecks = &Family{Name: "list_freshness_checks_total", Type: Counter, Scope: ScopeResource, Group: groupFreshness,
		Help: "Freshness checks of the resource: consistent LISTs sent, whatever their answer."}
	ListFreshnessFallbacks = &Family{Name: "list_freshness_fallbacks_total", Type: Counter, Scope: ScopeResource, Group: groupFreshness,
		Labels: []Label{{Name: "reason", Values: FallbackReasons}},
		Help:   "Freshness checks the watch cache did not answer in time: waited at the apiserver's bound, refused with 429, or timed out (504 or the probe's timeout)."}
	ListFreshnessErrors = &Family{Name: "list_freshness_errors_total", Type: Counter, Scope: ScopeResource, Group: groupFreshness,
		Labels: []Label{{Name: "reason", Values: FreshnessErrorReasons}},
		Help:   "Freshness checks that failed otherwise, by the apiserver's answer."}
	ListFreshnessStuck = &Family{Name: "list_freshness_stuck", Type: Gauge, Scope: ScopeResource, Group: groupFreshness,
		Help: "1 while most of the resource's freshness checks over the stuck window fell back or timed out, else 0."}
	ListReads = &Family{Name: "list_reads_total", Type: Counter, Scope: ScopeReads, Group: groupFreshness,
		Help: "resourceVersion=0 LISTs of the probe's markers on a pinned apiserver, judged against the probe's acknowledged writes."}
	ListStaleReads = &Family{Name: "list_stale_reads_total", Type: Counter, Scope: ScopeReads, Group: groupFreshness,
		Labels: []Label{{Name: "kind", Values: StaleKinds}},
		Help:   "Reads of an apiserver's cache that contradict what was acknowledged or already listed, by kind."}

	BuildInfo = &Family{Name: "build_info", Type: Gauge, Scope: ScopeInfo, Collected: true, Group: groupExporter,
		Labels: []Label{{Name: "branch"}, {Name: "goarch"}, {Name: "goos"}, {Name: "goversion"}, {Name: "revision"}, {Name: "tags"}, {Name: "version"}},
		Help:   "A metric with a constant '1' value labeled by version, revision, branch, goversion from which watchprobe was built, and the goos and goarch for the build."}
	ConfigReloadSuccessful = &Family{Name: "config_last_reload_successful", Type: Gauge, Scope: ScopeInfo, Group: groupExporter,
		Help: "1 if the last configuration reload succeeded (or none was asked for since start-up), 0 if it failed and older settings still run."}
	ConfigReloadTimestamp = &Family{Name: "config_last_reload_success_timestamp_seconds", Type: Gauge, Scope: ScopeInfo, Group: groupExporter,
		Help: "Unix time of the last successful configuration load, at start-up or by a reload."}
	TracingSpansDropped = &Family{Name: "tracing_spans_dropped_total", Type: Counter, Scope: ScopeExporter, Group: groupExporter,
		Help: "Spans that never reached the OTLP collector because their export failed."}
	LogRecordsDropped = &Family{Name: "log_records_dropped_total", Type: Counter, Scope: ScopeExporter, Group: groupExporter,
		Help: "Log records dropped because their destination (stderr) did not take them as fast as they came."}
)

var (
	modes           = Label{Name: "mode", Values: []string{ModeList, ModeWatchList}}
	reactionReasons = Label{Name: "reason", Values: ReactionReasons}
)

// Families are every family, in the order of the reference.
var Families = []*Family{
	EventLatency, EventsObserved, APIServerLag, ProbeSuccess, LastEventTimestamp, WriteDuration, Writes, WriteErrors, MarkersPendingDeletion,
	EventsMissed, EventsLate, EventsLost, EventsDuplicate, ForeignChanges, EventsReplayed, EventsOutOfOrder, EventsAfterFailedWrite,
	PathUp, WatchStalled, WatchIdle, WatchRestarts, WatchDuration, Relists, RelistDuration, Bookmarks, RequestsFailed, RequestsThrottled,
	ResumeWindow, ResumeChecks, ResumeReplay, ResumeAge,
	ControllerReaction, ControllerShare, ControllerDelivery, ControllerChanges, ControllerChangeErrors, ReactionsMissed, ReactionsLate, ReactionsLost,
	ListFreshness, ListFreshnessChecks, ListFreshnessFallbacks, ListFreshnessErrors, ListFreshnessStuck, ListReads, ListStaleReads,
	BuildInfo, ConfigReloadSuccessful, ConfigReloadTimestamp, TracingSpansDropped, LogRecordsDropped,
}

// FullName is the family's name as exported.
func (f *Family) FullName() string { return namespace + "_" + f.Name }

// LabelNames are every label of the family's series, its scope's first.
func (f *Family) LabelNames() []string {
	names := append([]string(nil), scopeLabels[f.Scope]...)
	for _, l := range f.Labels {
		names = append(names, l.Name)
	}
	return names
}
