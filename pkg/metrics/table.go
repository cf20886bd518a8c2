package metrics

// The table of families. It is a file of its own, after the files that
// declare the label values and buckets it reads, so that Go initializes
// the families, and def lists them, in the order written here: the order
// of the metrics reference.

// The families, each declared once.
var (
	EventLatency = def(&Family{Name: "event_latency_seconds", Type: Histogram, Scope: ScopePath, Labels: []Label{events},
		Buckets: latencyBuckets, Native: true, Group: groupLatency,
		Help: "Time from just before a marker write was sent to the arrival of its watch event on a path."})
	EventsObserved = def(&Family{Name: "events_observed_total", Type: Counter, Scope: ScopePath, Labels: []Label{events}, Group: groupLatency,
		Help: "Marker writes whose watch event arrived on a path."})
	APIServerLag = def(&Family{Name: "apiserver_lag_seconds", Type: Histogram, Scope: ScopePath, Lag: true,
		Buckets: latencyBuckets, Native: true, Group: groupLatency,
		Help: "For each marker write timed on the etcd path and on another path, on time or late, its arrival on that path minus its arrival on the etcd path; an arrival after lost_after, or of an unmeasurable write, is not paired."})
	ProbeSuccess = def(&Family{Name: "probe_success", Type: Gauge, Scope: ScopeProbe, Group: groupLatency,
		Help: "1 if every write of the latest judged cycle succeeded and was observed on every path within the deadline, else 0; a cycle without a verdict (cycles_unjudged_total) leaves it as it was."})
	CyclesUnjudged = def(&Family{Name: "cycles_unjudged_total", Type: Counter, Scope: ScopeProbe, Group: groupLatency,
		Help: "Marker cycles without a verdict: nothing the cluster did failed them, and a write of theirs was unmeasurable because the exporter was starved of CPU; probe_success keeps the latest judged cycle's verdict."})
	LastEventTimestamp = def(&Family{Name: "last_event_timestamp_seconds", Type: Gauge, Scope: ScopePath, Group: groupLatency,
		Help: "Unix time at which the latest marker event arrived on a path."})
	WriteDuration = def(&Family{Name: "write_duration_seconds", Type: Histogram, Scope: ScopeProbe, Labels: []Label{verbs},
		Buckets: latencyBuckets, Native: true, Group: groupLatency,
		Help: "Round-trip time of successful marker writes to the apiserver, from just before the first request was sent to the last response: a delete's includes its re-reads and resends after conflicts."})
	Writes = def(&Family{Name: "writes_total", Type: Counter, Scope: ScopeProbe, Labels: []Label{verbs}, Group: groupLatency,
		Help: "Marker writes sent to the apiserver, successful or not."})
	WriteErrors = def(&Family{Name: "write_errors_total", Type: Counter, Scope: ScopeProbe, Labels: []Label{verbs, code}, Group: groupLatency,
		Help: "Marker writes that failed for the control plane's own failure, by HTTP status code (0 when no response arrived); refused writes are apart."})
	WritesRefused = def(&Family{Name: "writes_refused_total", Type: Counter, Scope: ScopeProbe, Labels: []Label{verbs, refusalCauses}, Group: groupLatency,
		Help: "Marker writes the apiserver refused for the probe's own namespace, permissions or policies, by cause; never a bad event of the SLI."})
	MarkersPendingDeletion = def(&Family{Name: "markers_pending_deletion", Type: Gauge, Scope: ScopeProbe, Group: groupLatency,
		Help: "Marker objects this replica wrote, or may have written, whose deletion has not completed yet: a delete that failed, or one that another client's finalizers hold."})
	MarkersHeld = def(&Family{Name: "markers_held", Type: Gauge, Scope: ScopeProbe, Group: groupLatency,
		Help: "Marker objects this replica deleted whose deletion another client's finalizers hold; they count in markers_pending_deletion too."})

	EventsMissed = def(&Family{Name: "events_missed_total", Type: Counter, Scope: ScopePath, Labels: []Label{reasons}, Group: groupVerdicts,
		Help: "Acknowledged marker writes whose watch event did not arrive on a path within the deadline, by reason."})
	EventsLate = def(&Family{Name: "events_late_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Missed marker writes whose event did arrive on a path, after the deadline and before lost_after."})
	EventsLost = def(&Family{Name: "events_lost_total", Type: Counter, Scope: ScopePath, Labels: []Label{reasons}, Group: groupVerdicts,
		Help: "Acknowledged marker writes whose watch event had still not arrived on a path lost_after after their answer, by reason."})
	EventsDuplicate = def(&Family{Name: "events_duplicate_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts, Report: "duplicates",
		Help: "Marker changes delivered again on a path, the same resourceVersion with no relist in between."})
	ForeignChanges = def(&Family{Name: "marker_foreign_changes_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts, Report: "foreign_changes",
		Help: "Changes of the probe's markers by another client delivered on a path; never timed or judged."})
	EventsReplayed = def(&Family{Name: "events_replayed_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts, Report: "replays",
		Help: "Writes delivered again on a path after a relist, as a relist is expected to."})
	EventsOutOfOrder = def(&Family{Name: "events_out_of_order_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts, Report: "out_of_order",
		Help: "Writes delivered on a path after a later write of the same writer, with no relist in between."})
	EventsUnmeasurable = def(&Family{Name: "events_unmeasurable_total", Type: Counter, Scope: ScopePath, Labels: []Label{unmeasurableReasons}, Group: groupVerdicts, Report: "unmeasurable",
		Help: "Marker writes whose delivery on a path could not be judged against the cluster, by reason; never timed, missed, late or lost."})
	EventsAfterFailedWrite = def(&Family{Name: "events_after_failed_write_total", Type: Counter, Scope: ScopePath, Group: groupVerdicts,
		Help: "Events delivered on a path for marker writes the exporter saw fail; never timed or judged."})

	PathUp = def(&Family{Name: "path_up", Type: Gauge, Scope: ScopePath, Group: groupWatch,
		Help: "1 while the path has a watch stream open and caught up, else 0."})
	PathRefused = def(&Family{Name: "path_refused", Type: Gauge, Scope: ScopePath, Labels: []Label{pathRefusals}, Group: groupWatch,
		Help: "1 while the path has no stream because its list or watch requests are refused, three in a row, the same request over fresh connections refused on every one and served by no apiserver since, by reason (forbidden: 403; not_found: 404), else 0."})
	WatchStalled = def(&Family{Name: "watch_stalled", Type: Gauge, Scope: ScopePath, Group: groupWatch,
		Help: "1 while writes are acknowledged but nothing (no event, no bookmark) has arrived on the path for longer than the probe's stall bound."})
	WatchIdle = def(&Family{Name: "watch_idle_seconds", Type: Gauge, Scope: ScopePath, Collected: true, Group: groupWatch,
		Help: "Seconds since the latest event or bookmark arrived on the path, at scrape time."})
	WatchRestarts = def(&Family{Name: "watch_restarts_total", Type: Counter, Scope: ScopePath, Group: groupWatch,
		Labels: []Label{{Name: "reason", Values: EndReasons}},
		Help:   "Watch streams that ended, by reason."})
	WatchDuration = def(&Family{Name: "watch_duration_seconds", Type: Histogram, Scope: ScopePath, Buckets: lifetimeBuckets, Group: groupWatch,
		Help: "Lifetime of watch streams that opened, from the watch request to the stream's end."})
	Relists = def(&Family{Name: "relists_total", Type: Counter, Scope: ScopePath, Lazy: true, Group: groupWatch,
		Labels: []Label{{Name: "reason", Values: RelistReasons}, modes},
		Help:   "Full state fetches by a path, by reason and the mode of their first attempt; retried attempts of one relist count once."})
	RelistDuration = def(&Family{Name: "relist_duration_seconds", Type: Histogram, Scope: ScopePath, Lazy: true, Labels: []Label{modes},
		Buckets: latencyBuckets, Group: groupWatch,
		Help: "Time a relist took, from its first attempt until the state was complete, by the mode that completed it."})
	Bookmarks = def(&Family{Name: "bookmarks_total", Type: Counter, Scope: ScopePath, Group: groupWatch, Report: "bookmarks",
		Help: "BOOKMARK events received on a path."})
	RequestsFailed = def(&Family{Name: "requests_failed_total", Type: Counter, Scope: ScopePath, Group: groupWatch, Report: "requests_failed",
		Labels: []Label{{Name: "request", Values: []string{RequestList, RequestWatch}}, code},
		Help:   "List and watch requests of a path that failed before any stream existed, by HTTP status code (0 when no response arrived)."})
	RequestsThrottled = def(&Family{Name: "requests_throttled_total", Type: Counter, Scope: ScopePath, Group: groupWatch,
		Labels: []Label{{Name: "request", Values: []string{RequestList, RequestWatch}}},
		Help:   "Requests the apiserver answered with 429 Too Many Requests, retried by client-go or not, by path (or write) and request."})

	ResumeChecks = def(&Family{Name: "resume_checks_total", Type: Counter, Scope: ScopePath, Resume: true, Group: groupResume,
		Labels: []Label{{Name: "age"}, {Name: "outcome", Values: ResumeOutcomes}},
		Help:   "Resume checks, watches opened on a path from the resourceVersion of one of the probe's own writes at least age old, by outcome."})
	ResumeWindow = def(&Family{Name: "resume_window_seconds", Type: Gauge, Scope: ScopePath, Resume: true, Lazy: true, Group: groupResume,
		Help: "The largest configured age whose resume check replayed exactly in the path's latest round that judged every age."})
	ResumeReplay = def(&Family{Name: "resume_replay_seconds", Type: Histogram, Scope: ScopePath, Resume: true, Buckets: latencyBuckets, Group: groupResume,
		Help: "Time from a resume check's watch request to the arrival of the last marker event it had to replay, for checks that replayed exactly."})
	ResumeAge = def(&Family{Name: "resume_age_seconds", Type: Gauge, Scope: ScopeProbe, Lazy: true, Labels: []Label{{Name: "age"}}, Group: groupResume,
		Help: "Each age the probe's resume checks are configured with, in seconds, labelled as in watchprobe_resume_checks_total."})

	ControllerReaction = def(&Family{Name: "controller_reaction_seconds", Type: Histogram, Scope: ScopeController,
		Buckets: latencyBuckets, Native: true, Group: groupControllers,
		Help: "Time from just before the probe changed its marker object for a controller to the arrival of the status whose observedGeneration reached the change."})
	ControllerShare = def(&Family{Name: "controller_share_seconds", Type: Histogram, Scope: ScopeController,
		Buckets: latencyBuckets, Native: true, Group: groupControllers,
		Help: "A reaction's arrival minus that of its spec change on the exporter's own watch of the object: the controller's share."})
	ControllerDelivery = def(&Family{Name: "controller_change_delivery_seconds", Type: Histogram, Scope: ScopeController,
		Buckets: latencyBuckets, Native: true, Group: groupControllers,
		Help: "Time from a spec change's send to its arrival on the exporter's own watch of the object, for the reactions whose change arrived there first."})
	ControllerChanges = def(&Family{Name: "controller_changes_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Help: "Spec changes of the marker object the apiserver acknowledged, each a reaction the controller owes."})
	ControllerChangeErrors = def(&Family{Name: "controller_change_errors_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Help: "Spec changes, and creates, of a controller's marker object that failed: no reaction is owed for them."})
	ReactionsMissed = def(&Family{Name: "controller_reactions_missed_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Labels: []Label{reactionReasons},
		Help:   "Acknowledged spec changes whose reaction had not arrived within the probe's deadline, by reason."})
	ReactionsLate = def(&Family{Name: "controller_reactions_late_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Help: "Missed reactions that did arrive, after the deadline and before the probe's lost_after."})
	ReactionsLost = def(&Family{Name: "controller_reactions_lost_total", Type: Counter, Scope: ScopeController, Group: groupControllers,
		Labels: []Label{reactionReasons},
		Help:   "Acknowledged spec changes whose reaction had still not arrived lost_after after their answer, by reason."})

	ListFreshness = def(&Family{Name: "list_freshness_seconds", Type: Histogram, Scope: ScopeResource,
		Buckets: freshnessBuckets, Native: true, Group: groupFreshness,
		Help: "Time an answered consistent LIST (no resourceVersion) of the resource took over a resourceVersion=0 LIST of it sent just before on the same connection: how far its watch cache was behind etcd."})
	ListFreshnessRoundTrip = def(&Family{Name: "list_freshness_round_trip_seconds", Type: Histogram, Scope: ScopeResource,
		Buckets: roundTripBuckets, Native: true, Group: groupFreshness,
		Help: "Time an answered consistent LIST of the resource took on a kept connection, as a client sees it: the apiserver's queue and etcd's current revision besides the cache's wait."})
	ListFreshnessChecks = def(&Family{Name: "list_freshness_checks_total", Type: Counter, Scope: ScopeResource, Group: groupFreshness,
		Help: "Freshness checks of the resource: consistent LISTs sent, whatever their answer."})
	ListFreshnessFallbacks = def(&Family{Name: "list_freshness_fallbacks_total", Type: Counter, Scope: ScopeResource, Group: groupFreshness,
		Labels: []Label{{Name: "reason", Values: FallbackReasons}},
		Help:   "Freshness checks the watch cache did not answer in time: waited at the apiserver's bound, refused with 429, or timed out (504 or the probe's timeout)."})
	ListFreshnessErrors = def(&Family{Name: "list_freshness_errors_total", Type: Counter, Scope: ScopeResource, Group: groupFreshness,
		Labels: []Label{{Name: "reason", Values: FreshnessErrorReasons}},
		Help:   "Freshness checks that failed otherwise, by the apiserver's answer."})
	ListFreshnessQueued = def(&Family{Name: "list_freshness_queued_total", Type: Counter, Scope: ScopeResource, Group: groupFreshness,
		Labels: []Label{{Name: "reason", Values: QueuedReasons}},
		Help:   "Freshness checks the apiserver's priority and fairness held too long to judge, the exporter's own queueing and not the cache's: the resourceVersion=0 LIST before the consistent one took queued_after or longer, or either was refused with 429."})
	ListFreshnessStuck = def(&Family{Name: "list_freshness_stuck", Type: Gauge, Scope: ScopeResource, Group: groupFreshness,
		Help: "1 while most of the resource's freshness checks over the stuck window fell back or timed out, else 0."})
	ListFreshnessUncached = def(&Family{Name: "list_freshness_uncached", Type: Gauge, Scope: ScopeResource, Group: groupFreshness,
		Labels: []Label{{Name: "reason", Values: UncachedReasons}},
		Help:   "1 while the apiserver serves the resource without a watch cache, for the reason labelled, so that its freshness checks are not sent, else 0."})
	ListReads = def(&Family{Name: "list_reads_total", Type: Counter, Scope: ScopeReads, Group: groupFreshness,
		Help: "resourceVersion=0 LISTs of the probe's markers through an apiserver, judged against the probe's acknowledged writes."})
	ListStaleReads = def(&Family{Name: "list_stale_reads_total", Type: Counter, Scope: ScopeReads, Group: groupFreshness,
		Labels: []Label{{Name: "kind", Values: StaleKinds}},
		Help:   "Reads of an apiserver's cache that contradict what was acknowledged or already listed, by kind."})

	WatchListSync = def(&Family{Name: "watchlist_sync_seconds", Type: Histogram, Scope: ScopeWatchList,
		Buckets: freshnessBuckets, Native: true, Group: groupWatchList,
		Help: "Time from just before a WatchList request (a watch with sendInitialEvents=true) of the resource in the probe's namespace was sent to the arrival of its end bookmark (k8s.io/initial-events-end), for syncs that reached it within the bound and did not wait in the exporter's queue."})
	WatchListSyncs = def(&Family{Name: "watchlist_syncs_total", Type: Counter, Scope: ScopeWatchList, Group: groupWatchList,
		Help: "WatchList requests (watches with sendInitialEvents=true) of the resource written to a connection to the apiserver, whatever their answer."})
	WatchListMissed = def(&Family{Name: "watchlist_end_bookmarks_missed_total", Type: Counter, Scope: ScopeWatchList, Group: groupWatchList,
		Labels: []Label{{Name: "reason", Values: WatchListMissedReasons}},
		Help:   "WatchList syncs whose end bookmark did not arrive within the bound, by reason: an informer there syncs later than the bound, or never."})
	WatchListQueued = def(&Family{Name: "watchlist_queued_total", Type: Counter, Scope: ScopeWatchList, Group: groupWatchList,
		Labels: []Label{{Name: "reason", Values: QueuedReasons}},
		Help:   "WatchList syncs the apiserver's priority and fairness held too long to judge, the exporter's own queueing: the resourceVersion=0 watch sent just before took queued_after or longer, or had no answer within the bound (the WatchList is then not sent), or a request was refused with 429."})
	WatchListRefused = def(&Family{Name: "watchlist_refused_total", Type: Counter, Scope: ScopeWatchList, Group: groupWatchList,
		Labels: []Label{{Name: "reason", Values: WatchListRefusedReasons}},
		Help:   "WatchList syncs refused as a request form, by reason: informers there list instead."})
	WatchListErrors = def(&Family{Name: "watchlist_errors_total", Type: Counter, Scope: ScopeWatchList, Group: groupWatchList,
		Labels: []Label{{Name: "reason", Values: FreshnessErrorReasons}},
		Help:   "WatchList syncs that failed otherwise, by the apiserver's answer."})
	WatchListStuck = def(&Family{Name: "watchlist_stuck", Type: Gauge, Scope: ScopeWatchList, Group: groupWatchList,
		Help: "1 while most of the resource's judged WatchList syncs over the stuck window did not reach their end bookmark within the bound, else 0."})
	WakeLateness = def(&Family{Name: "exporter_wake_lateness_seconds", Type: Histogram, Scope: ScopeInfo, Buckets: wakeBuckets, Native: true, Group: groupSelfHealth,
		Help: "How much later than scheduled the exporter's self-monitor woke, at each of its ticks."})
	CPUWait = def(&Family{Name: "exporter_cpu_wait_seconds_total", Type: Counter, Scope: ScopeInfo, Group: groupSelfHealth,
		Help: "Time the exporter's threads waited, runnable, for a CPU (the kernel's run_delay, summed over its threads), as its self-monitor read it; stays 0 where exporter_cpu_wait_available is 0."})
	CPUWaitAvailable = def(&Family{Name: "exporter_cpu_wait_available", Type: Gauge, Scope: ScopeInfo, Group: groupSelfHealth,
		Help: "1 if the self-monitor reads its threads' run-queue wait (the kernel shows schedstats), else 0: then contention for the CPU by weight is seen only as wake-ups later than the threshold."})
	StarvedSeconds = def(&Family{Name: "exporter_starved_seconds_total", Type: Counter, Scope: ScopeInfo, Group: groupSelfHealth,
		Help: "Time in the stretches between two self-monitor ticks that it judged starved: a wake-up later than the threshold, threads waiting more than a fiftieth of it per time slice (a throttle included), or, without that wait, the cgroup throttled longer than it per period."})
	StarvedThreshold = def(&Family{Name: "exporter_starved_threshold_seconds", Type: Gauge, Scope: ScopeInfo, Group: groupSelfHealth,
		Help: "The starvation threshold: a self-monitor wake-up later than this, its threads waiting more than a fiftieth of it per time slice (a throttle included), or, without that wait, the cgroup throttled longer than this per period, is starvation."})
	CPUPeriods = def(&Family{Name: "exporter_cpu_periods_total", Type: Counter, Scope: ScopeInfo, Collected: true, Group: groupSelfHealth,
		Help: "Enforcement periods of the CPU limit of the exporter's cgroup in which it ran (cpu.stat nr_periods)."})
	CPUThrottledPeriods = def(&Family{Name: "exporter_cpu_throttled_periods_total", Type: Counter, Scope: ScopeInfo, Collected: true, Group: groupSelfHealth,
		Help: "Enforcement periods in which the exporter's cgroup used up its CPU limit and was throttled (cpu.stat nr_throttled)."})
	CPUThrottledSeconds = def(&Family{Name: "exporter_cpu_throttled_seconds_total", Type: Counter, Scope: ScopeInfo, Collected: true, Group: groupSelfHealth,
		Help: "Time the exporter's cgroup spent throttled by its CPU limit (cpu.stat throttled_time, or throttled_usec in cgroup v2)."})

	AgentHealthy = def(&Family{Name: "agent_healthy", Type: Gauge, Scope: ScopeAgent, Group: groupAgent,
		Help: "1 while the node agent's watch of its marker is up and not stalled, its newest write got an answer and its latest judged write arrived within the deadline, else 0 (also until a write of its first arrives on time)."})
	AgentRefused = def(&Family{Name: "agent_refused", Type: Gauge, Scope: ScopeAgent, Group: groupAgent,
		Help: "1 while the node agent's own requests are refused (its Role, its namespace, a policy), confirmed by a second connection: its writes are then unmeasurable, and nothing it shows is the node's, else 0."})
	AgentWrites = def(&Family{Name: "agent_writes_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Marker writes of the node agent the apiserver acknowledged; each owes one event on the agent's watch."})
	AgentWriteErrors = def(&Family{Name: "agent_write_errors_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Marker writes of the node agent that failed."})
	AgentEventLatency = def(&Family{Name: "agent_event_latency_seconds", Type: Histogram, Scope: ScopeAgent, Native: true, Group: groupAgent,
		Help: "Time from just before a node agent's marker write was sent to the arrival of its event on the agent's watch, on time or late; native buckets only."})
	AgentEventsMissed = def(&Family{Name: "agent_events_missed_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Acknowledged node agent writes whose event did not arrive on the agent's watch within the deadline (late or lost)."})
	AgentEventsLost = def(&Family{Name: "agent_events_lost_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Acknowledged node agent writes whose event had still not arrived lost_after after their answer."})
	AgentStalls = def(&Family{Name: "agent_stalls_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Times the node agent's live watch stream delivered nothing for stall_after while its writes were answered."})
	AgentStreamEnds = def(&Family{Name: "agent_stream_ends_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Watch streams of the node agent that ended other than at their requested timeout: broken by an error, EOF, a reset or the HTTP/2 health check."})
	AgentRelists = def(&Family{Name: "agent_relists_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Relists of the node agent's watch after its first list: its resourceVersion expired (410 Gone) or a request failed."})
	AgentUnmeasurable = def(&Family{Name: "agent_unmeasurable_total", Type: Counter, Scope: ScopeAgent, Group: groupAgent,
		Help: "Node agent writes whose delivery was not judged because the agent itself was starved of CPU; never missed or lost."})

	BuildInfo = def(&Family{Name: "build_info", Type: Gauge, Scope: ScopeInfo, Collected: true, Group: groupExporter,
		Labels: []Label{{Name: "branch"}, {Name: "goarch"}, {Name: "goos"}, {Name: "goversion"}, {Name: "revision"}, {Name: "tags"}, {Name: "version"}},
		Help:   "A metric with a constant '1' value labeled by version, revision, branch, goversion from which watchprobe was built, and the goos and goarch for the build."})
	ConfigReloadSuccessful = def(&Family{Name: "config_last_reload_successful", Type: Gauge, Scope: ScopeInfo, Group: groupExporter,
		Help: "1 if the last configuration reload succeeded (or none was asked for since start-up), 0 if it failed and older settings still run."})
	ConfigReloadTimestamp = def(&Family{Name: "config_last_reload_success_timestamp_seconds", Type: Gauge, Scope: ScopeInfo, Group: groupExporter,
		Help: "Unix time of the last successful configuration load, at start-up or by a reload."})
	TracingSpansDropped = def(&Family{Name: "tracing_spans_dropped_total", Type: Counter, Scope: ScopeExporter, Group: groupExporter,
		Help: "Spans that never reached the OTLP collector because their export failed."})
	LogRecordsDropped = def(&Family{Name: "log_records_dropped_total", Type: Counter, Scope: ScopeExporter, Group: groupExporter,
		Help: "Log records dropped because their destination (stderr) did not take them as fast as they came."})
)

// Families are every family, in the order of the reference: the order
// of this table.
var Families []*Family

// def adds f to Families: declaring a family is all it takes.
func def(f *Family) *Family {
	Families = append(Families, f)
	return f
}
