// Package metrics defines every metric watchprobe exports. The names and
// labels here are a contract: the dashboard, the alert rules and the Helm
// chart are written against them.
package metrics

import (
	"slices"
	"strconv"
	"sync"
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

// histogram has the classic buckets given, native buckets too if native, and
// native buckets alone with NativeHistogramsOnly. The latency histograms are
// native as well by default: a classic histogram cannot show a shift of a
// few hundred microseconds around the 1-5 ms where a healthy cluster lives.
// The lifetime and relist histograms stay classic by default, as they have
// always been; with NativeHistogramsOnly no histogram keeps classic buckets.
func (o Options) histogram(name, help string, buckets []float64, native bool, labels ...string) *prometheus.HistogramVec {
	opts := prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}
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
	return prometheus.NewHistogramVec(opts, labels)
}

// Probe holds the results of probing. It is registered on its own registry,
// apart from the exporter's process and Go metrics.
type Probe struct {
	EventLatency       *prometheus.HistogramVec
	EventsObserved     *prometheus.CounterVec
	EventsMissed       *prometheus.CounterVec
	EventsLost         *prometheus.CounterVec
	LastEventTimestamp *prometheus.GaugeVec

	WriteDuration *prometheus.HistogramVec
	Writes        *prometheus.CounterVec
	WriteErrors   *prometheus.CounterVec

	ProbeSuccess *prometheus.GaugeVec

	WatchRestarts  *prometheus.CounterVec
	WatchDuration  *prometheus.HistogramVec
	Relists        *prometheus.CounterVec
	RelistDuration *prometheus.HistogramVec
	Bookmarks      *prometheus.CounterVec
	WatchStalled   *prometheus.GaugeVec
	watchIdle      *idleCollector

	EventsDuplicate  *prometheus.CounterVec
	ForeignChanges   *prometheus.CounterVec
	EventsReplayed   *prometheus.CounterVec
	EventsOutOfOrder *prometheus.CounterVec
	EventsLate       *prometheus.CounterVec

	APIServerLag *prometheus.HistogramVec

	EventsAfterFailedWrite *prometheus.CounterVec
	RequestsThrottled      *prometheus.CounterVec
	RequestsFailed         *prometheus.CounterVec
	PathUp                 *prometheus.GaugeVec
	MarkersPendingDeletion *prometheus.GaugeVec

	ResumeChecks *prometheus.CounterVec
	ResumeWindow *prometheus.GaugeVec
	ResumeReplay *prometheus.HistogramVec
	ResumeAge    *prometheus.GaugeVec

	ControllerReaction     *prometheus.HistogramVec
	ControllerShare        *prometheus.HistogramVec
	ControllerDelivery     *prometheus.HistogramVec
	ControllerChanges      *prometheus.CounterVec
	ControllerChangeErrors *prometheus.CounterVec
	ReactionsMissed        *prometheus.CounterVec
	ReactionsLate          *prometheus.CounterVec
	ReactionsLost          *prometheus.CounterVec

	// deleted tells the children a path creates lazily (relists, failed
	// requests) that its series were deleted, so that a request ending as
	// its path stops cannot bring them back; keyed by probe, path and
	// apiserver.
	deletedMu sync.RWMutex
	live      map[[3]string]*pathLife
}

// pathLife is one ForPath's path: deleted once DeletePath or DeleteProbe
// removed its series. A later ForPath of the same labels starts another.
type pathLife struct{ deleted bool }

// NewProbe creates the probe metrics with the default Options and registers
// them on reg.
func NewProbe(reg prometheus.Registerer) *Probe {
	return NewProbeWithOptions(reg, Options{})
}

// NewProbeWithOptions creates the probe metrics as opts say and registers
// them on reg.
func NewProbeWithOptions(reg prometheus.Registerer, opts Options) *Probe {
	m := &Probe{
		EventLatency: opts.histogram("event_latency_seconds",
			"Time from just before a marker write was sent to the arrival of its watch event on a path, on the exporter's monotonic clock: the write's way through the apiserver (admission webhooks included) into etcd, and the event's way back.",
			latencyBuckets, true, "probe", "path", "apiserver", "event"),
		EventsObserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_observed_total",
			Help:      "Marker writes whose watch event arrived on a path.",
		}, []string{"probe", "path", "apiserver", "event"}),
		EventsMissed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_missed_total",
			Help:      "Acknowledged marker writes whose watch event did not arrive on a path within the deadline, by reason: unavailable (the path's list or watch requests failed in the window, or it had no stream open when the event was due), relist (a relist overlapped the window) or silent (nothing on the path explains it). Each is later counted late (it arrived) or lost (it did not by the probe's lost_after).",
		}, []string{"probe", "path", "apiserver", "reason"}),
		EventsLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_lost_total",
			Help:      "Acknowledged marker writes whose watch event had still not arrived on a path lost_after (a probe setting) after the apiserver answered them, by reason: unavailable (the path had not started when the write was sent, or was not live again a deadline before the verdict), relist (a relist overlapped that time, after which only final state is delivered) or silent (the path was live, and a stream resumed from its resourceVersion owes every event since: a delivery bug). An arrival after that is logged, not counted.",
		}, []string{"probe", "path", "apiserver", "reason"}),
		LastEventTimestamp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "last_event_timestamp_seconds",
			Help:      "Unix time at which the latest marker event arrived on a path.",
		}, []string{"probe", "path", "apiserver"}),
		WriteDuration: opts.histogram("write_duration_seconds",
			"Round-trip time of marker writes to the apiserver, from just before the request was sent to its response.",
			latencyBuckets, true, "probe", "verb"),
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "writes_total",
			Help:      "Marker writes sent to the apiserver, successful or not.",
		}, []string{"probe", "verb"}),
		WriteErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "write_errors_total",
			Help:      "Marker writes that failed, by HTTP status code (0 when no response arrived).",
		}, []string{"probe", "verb", "code"}),
		ProbeSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "probe_success",
			Help:      "1 if every write of the latest completed cycle succeeded and was observed on every path within the deadline, else 0.",
		}, []string{"probe"}),
		WatchRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "watch_restarts_total",
			Help:      "Watch streams that ended, by reason: timeout, closed_early, expired, too_many_requests, error, eof, client. A watch request that failed before a stream existed is in watchprobe_requests_failed_total instead.",
		}, []string{"probe", "path", "apiserver", "reason"}),
		WatchDuration: opts.histogram("watch_duration_seconds",
			"Lifetime of watch streams that opened, from the watch request to the stream's end.",
			lifetimeBuckets, false, "probe", "path", "apiserver"),
		Relists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "relists_total",
			Help:      "Full state fetches by a path, by reason (initial, expired, error) and the mode of its first attempt (list, watchlist); retried attempts of one relist count once.",
		}, []string{"probe", "path", "apiserver", "reason", "mode"}),
		RelistDuration: opts.histogram("relist_duration_seconds",
			"Time a relist took, from its first attempt until the state was complete (the LIST answered, or a WatchList stream's initial-events-end bookmark), by the mode that completed it.",
			latencyBuckets, false, "probe", "path", "apiserver", "mode"),
		Bookmarks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "bookmarks_total",
			Help:      "BOOKMARK events received on a path.",
		}, []string{"probe", "path", "apiserver"}),
		WatchStalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "watch_stalled",
			Help:      "1 while writes are acknowledged but nothing (no event, no bookmark) has arrived on the path for longer than the probe's stall bound.",
		}, []string{"probe", "path", "apiserver"}),
		watchIdle: newIdleCollector(prometheus.NewDesc(
			namespace+"_watch_idle_seconds",
			"Seconds since the latest event or bookmark arrived on the path, at scrape time.",
			[]string{"probe", "path", "apiserver"}, nil,
		)),
		EventsDuplicate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_duplicate_total",
			Help:      "Marker changes delivered again on a path, the same resourceVersion with no relist in between: a delivery bug.",
		}, []string{"probe", "path", "apiserver"}),
		ForeignChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "marker_foreign_changes_total",
			Help:      "Changes of the probe's markers by another client (a new resourceVersion that is not one of the probe's own writes) delivered on a path; never timed or judged.",
		}, []string{"probe", "path", "apiserver"}),
		EventsReplayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_replayed_total",
			Help:      "Writes delivered again on a path after a relist, as a relist is expected to.",
		}, []string{"probe", "path", "apiserver"}),
		EventsOutOfOrder: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_out_of_order_total",
			Help:      "Writes delivered on a path after a later write of the same writer, with no relist in between.",
		}, []string{"probe", "path", "apiserver"}),
		EventsLate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_late_total",
			Help:      "Writes delivered on a path after their deadline but before the probe's lost_after; each is also counted missed, and its latency is recorded.",
		}, []string{"probe", "path", "apiserver"}),
		APIServerLag: opts.histogram("apiserver_lag_seconds",
			"For each marker write seen both on the etcd path and on an apiserver path, the arrival on the apiserver path minus the arrival on the etcd path, on one monotonic clock: the apiserver's share of the event's latency (watch cache and fan-out), with the client's for the informer path.",
			latencyBuckets, true, "probe", "path", "apiserver"),
		EventsAfterFailedWrite: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_after_failed_write_total",
			Help:      "Events delivered on a path for marker writes the exporter saw fail (the write was committed although its response failed, or a failed delete was retried); never timed or judged.",
		}, []string{"probe", "path", "apiserver"}),
		RequestsThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "requests_throttled_total",
			Help:      "Requests the apiserver answered with 429 Too Many Requests (API Priority and Fairness rejecting the exporter's flow), retried by client-go or not, by path (or write) and request.",
		}, []string{"probe", "path", "apiserver", "request"}),
		RequestsFailed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "requests_failed_total",
			Help:      "List and watch requests of a path that failed before any stream existed, by HTTP status code (0 when no response arrived).",
		}, []string{"probe", "path", "apiserver", "request", "code"}),
		PathUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "path_up",
			Help:      "1 while the path has a watch stream open and caught up; 0 while it reconnects, relists, or its list and watch requests fail.",
		}, []string{"probe", "path", "apiserver"}),
		MarkersPendingDeletion: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "markers_pending_deletion",
			Help:      "Marker objects this replica wrote, or may have written, whose deletion has not succeeded yet.",
		}, []string{"probe"}),
		ResumeChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "resume_checks_total",
			Help:      "Resume checks: a watch opened on a path from the resourceVersion of one of the probe's own writes at least `age` old, by outcome: replayed (every marker event since, in order, once each), expired (410 Gone before any of them), incomplete (a gap, a duplicate, an out-of-order event, a 410 after part of the replay, or events still missing after the probe's lost_after), error (the watch failed or ended early, delivering nothing wrong). Off unless the probe sets resume.",
		}, []string{"probe", "path", "apiserver", "age", "outcome"}),
		ResumeWindow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "resume_window_seconds",
			Help:      "The largest configured age whose resume check replayed exactly in the path's latest round in which every age was judged (replayed, expired or incomplete); 0 when none did. Absent until such a round; a round with an error or an age too old for the probe's writes yet leaves it as it was.",
		}, []string{"probe", "path", "apiserver"}),
		ResumeReplay: opts.histogram("resume_replay_seconds",
			"Time from a resume check's watch request to the arrival of the last marker event it had to replay, for checks that replayed exactly.",
			latencyBuckets, false, "probe", "path", "apiserver"),
		ResumeAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "resume_age_seconds",
			Help:      "Each age the probe's resume checks are configured with, in seconds, labelled as in watchprobe_resume_checks_total: reference lines for watchprobe_resume_window_seconds.",
		}, []string{"probe", "age"}),
		ControllerReaction: opts.histogram("controller_reaction_seconds",
			"Time from just before the probe changed its marker object for a controller (a spec change that bumps metadata.generation and asks for no pod) to the arrival, on the exporter's own watch of that object, of the status whose observedGeneration reached the new generation: the change's way to the controller-manager's informer, its work queue, its reconcile and its status write, and the status's way back.",
			latencyBuckets, true, "probe", "controller"),
		ControllerShare: opts.histogram("controller_share_seconds",
			"For each reaction observed, its arrival minus the arrival of the spec change itself on the exporter's own watch of the object, on one monotonic clock: the controller's share of the reaction (its informer, work queue, reconcile and status write, and the status's delivery), apart from the delivery of the change, which any watcher of the object waited for too.",
			latencyBuckets, true, "probe", "controller"),
		ControllerDelivery: opts.histogram("controller_change_delivery_seconds",
			"For each reaction observed whose change the exporter's own watch of the object saw first, the time from the change's send to that arrival: the delivery of the change that the controller's informer waited for too. The reaction is this plus watchprobe_controller_share_seconds.",
			latencyBuckets, true, "probe", "controller"),
		ControllerChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "controller_changes_total",
			Help:      "Spec changes of the marker object the apiserver acknowledged, each a reaction the controller owes.",
		}, []string{"probe", "controller"}),
		ControllerChangeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "controller_change_errors_total",
			Help:      "Spec changes, and creates, of a controller's marker object that failed: no reaction is owed for them.",
		}, []string{"probe", "controller"}),
		ReactionsMissed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "controller_reactions_missed_total",
			Help:      "Acknowledged spec changes whose reaction (status.observedGeneration reaching the change's generation) had not arrived within the probe's deadline, by reason: controller (the change itself had reached the exporter's own watch of the object, so the controller could have seen it) or undelivered (it had not: the watch, not the controller, is behind). Each is later counted late (it arrived) or lost (it did not by the probe's lost_after), perhaps for the other reason, unless the object is deleted behind the probe's back first: no status of a new object answers the old one's changes.",
		}, []string{"probe", "controller", "reason"}),
		ReactionsLate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "controller_reactions_late_total",
			Help:      "Reactions that arrived after the deadline but before the probe's lost_after; each is also counted missed, and its latency is recorded.",
		}, []string{"probe", "controller"}),
		ReactionsLost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "controller_reactions_lost_total",
			Help:      "Acknowledged spec changes whose reaction had still not arrived lost_after (a probe setting) after the apiserver answered them, by reason: controller (the change had reached the exporter's own watch, and the controller did not act on it) or undelivered (the exporter's own watch of the object never showed the change).",
		}, []string{"probe", "controller", "reason"}),
	}
	reg.MustRegister(
		m.EventLatency, m.EventsObserved, m.EventsMissed, m.EventsLost, m.LastEventTimestamp,
		m.WriteDuration, m.Writes, m.WriteErrors, m.ProbeSuccess,
		m.WatchRestarts, m.WatchDuration, m.Relists, m.RelistDuration, m.Bookmarks,
		m.WatchStalled, m.watchIdle,
		m.EventsDuplicate, m.ForeignChanges, m.EventsReplayed, m.EventsOutOfOrder, m.EventsLate,
		m.APIServerLag, m.EventsAfterFailedWrite, m.RequestsThrottled, m.RequestsFailed, m.PathUp, m.MarkersPendingDeletion,
		m.ResumeChecks, m.ResumeWindow, m.ResumeReplay, m.ResumeAge,
		m.ControllerReaction, m.ControllerShare, m.ControllerDelivery, m.ControllerChanges, m.ControllerChangeErrors,
		m.ReactionsMissed, m.ReactionsLate, m.ReactionsLost,
	)
	return m
}

// ForProbe returns the children for one probe and its configured paths,
// created up front so that every series exists at zero from the first
// scrape: an alert on rate(watchprobe_events_missed_total[5m]) needs a zero
// to compare against, and `absent()` must not fire merely because nothing
// went wrong yet. Paths added later (one per apiserver) get theirs from
// ForPath.
func (m *Probe) ForProbe(probe string, paths []string) *ProbeSeries {
	s := &ProbeSeries{
		Success:         m.ProbeSuccess.WithLabelValues(probe),
		Paths:           map[string]*PathSeries{},
		Writes:          map[string]*WriteSeries{},
		WriteThrottled:  m.throttled(probe, SourceWrite, "", RequestList, RequestCreate, RequestUpdate, RequestDelete),
		PendingDeletion: m.MarkersPendingDeletion.WithLabelValues(probe),
		probe:           probe,
		errorsBy:        m.WriteErrors,
	}
	withEtcd := slices.Contains(paths, PathEtcd)
	for _, path := range paths {
		s.Paths[path] = m.ForPath(probe, path, "", withEtcd && path != PathEtcd)
	}
	for _, verb := range []string{VerbCreate, VerbUpdate, VerbDelete} {
		s.Writes[verb] = &WriteSeries{
			Duration: m.WriteDuration.WithLabelValues(probe, verb),
			Total:    m.Writes.WithLabelValues(probe, verb),
		}
		// Codes are known only when they happen; code 0 (no response) at
		// zero makes the error ratio 0 rather than empty from the start.
		m.WriteErrors.WithLabelValues(probe, verb, "0")
	}
	return s
}

// ForPath returns the children of one path of a probe. apiserver is empty
// except on a path pinned to one apiserver, where it is that apiserver's
// address. lag: the probe has an etcd path to pair this path's arrivals with.
func (m *Probe) ForPath(probe, path, apiserver string, lag bool) *PathSeries {
	pathLabels := func(kv ...string) prometheus.Labels {
		l := prometheus.Labels{"probe": probe, "path": path, "apiserver": apiserver}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	ps := &PathSeries{
		Missed: map[string]prometheus.Counter{
			MissedRelist:      m.EventsMissed.With(pathLabels("reason", MissedRelist)),
			MissedUnavailable: m.EventsMissed.With(pathLabels("reason", MissedUnavailable)),
			MissedSilent:      m.EventsMissed.With(pathLabels("reason", MissedSilent)),
		},
		Lost: map[string]prometheus.Counter{
			MissedRelist:      m.EventsLost.With(pathLabels("reason", MissedRelist)),
			MissedUnavailable: m.EventsLost.With(pathLabels("reason", MissedUnavailable)),
			MissedSilent:      m.EventsLost.With(pathLabels("reason", MissedSilent)),
		},
		AfterFailedWrite: m.EventsAfterFailedWrite.With(pathLabels()),
		Throttled:        m.throttled(probe, path, apiserver, RequestList, RequestWatch),
		Up:               m.PathUp.WithLabelValues(probe, path, apiserver),
		failed:           m.RequestsFailed,
		LastEvent:        m.LastEventTimestamp.WithLabelValues(probe, path, apiserver),
		Latency:          map[string]prometheus.Observer{},
		Observed:         map[string]prometheus.Counter{},
		Restarts:         map[string]prometheus.Counter{},
		WatchDuration:    m.WatchDuration.WithLabelValues(probe, path, apiserver),
		Bookmarks:        m.Bookmarks.WithLabelValues(probe, path, apiserver),
		Stalled:          m.WatchStalled.WithLabelValues(probe, path, apiserver),
		Idle:             m.watchIdle.track(probe, path, apiserver),
		Duplicate:        m.EventsDuplicate.With(pathLabels()),
		ForeignChanges:   m.ForeignChanges.With(pathLabels()),
		Replayed:         m.EventsReplayed.WithLabelValues(probe, path, apiserver),
		OutOfOrder:       m.EventsOutOfOrder.With(pathLabels()),
		Late:             m.EventsLate.With(pathLabels()),
		probe:            probe,
		path:             path,
		apiserver:        apiserver,
		relists:          m.Relists,
		relistDuration:   m.RelistDuration,
		owner:            m,
	}
	m.deletedMu.Lock()
	if m.live == nil {
		m.live = map[[3]string]*pathLife{}
	}
	key := [3]string{probe, path, apiserver}
	if m.live[key] == nil {
		m.live[key] = &pathLife{}
	}
	ps.life = m.live[key]
	m.deletedMu.Unlock()
	for _, reason := range []string{EndTimeout, EndClosedEarly, EndExpired, EndTooManyRequests, EndError, EndEOF, EndClient} {
		ps.Restarts[reason] = m.WatchRestarts.With(pathLabels("reason", reason))
	}
	for _, ev := range []string{EventAdded, EventModified, EventDeleted} {
		ps.Latency[ev] = m.EventLatency.WithLabelValues(probe, path, apiserver, ev)
		ps.Observed[ev] = m.EventsObserved.WithLabelValues(probe, path, apiserver, ev)
	}
	if lag {
		ps.APIServerLag = m.APIServerLag.WithLabelValues(probe, path, apiserver)
	}
	// Like write errors: code 0 at zero, other codes when they happen.
	m.RequestsFailed.WithLabelValues(probe, path, apiserver, RequestList, "0")
	m.RequestsFailed.WithLabelValues(probe, path, apiserver, RequestWatch, "0")
	return ps
}

// DeletePath removes every series of one path of a probe: an apiserver
// that left the cluster must not leave its last values behind, nor grow the
// series without bound as apiservers come and go.
func (m *Probe) DeletePath(probe, path, apiserver string) {
	m.deletedMu.Lock()
	defer m.deletedMu.Unlock()
	m.forget(func(k [3]string) bool { return k == [3]string{probe, path, apiserver} })
	labels := prometheus.Labels{"probe": probe, "path": path, "apiserver": apiserver}
	for _, v := range m.pathVecs() {
		v.DeletePartialMatch(labels)
	}
	m.watchIdle.untrack(probe, path, apiserver)
}

// DeleteProbe removes every series of a probe, for a probe that a reload
// removed.
func (m *Probe) DeleteProbe(probe string) {
	m.deletedMu.Lock()
	defer m.deletedMu.Unlock()
	m.forget(func(k [3]string) bool { return k[0] == probe })
	labels := prometheus.Labels{"probe": probe}
	for _, v := range m.pathVecs() {
		v.DeletePartialMatch(labels)
	}
	m.WriteDuration.DeletePartialMatch(labels)
	m.Writes.DeletePartialMatch(labels)
	m.WriteErrors.DeletePartialMatch(labels)
	m.ProbeSuccess.DeletePartialMatch(labels)
	m.MarkersPendingDeletion.DeletePartialMatch(labels)
	m.ResumeAge.DeletePartialMatch(labels)
	for _, v := range m.controllerVecs() {
		v.DeletePartialMatch(labels)
	}
	m.watchIdle.untrackProbe(probe)
}

// forget marks the paths that match deleted; the caller holds deletedMu.
func (m *Probe) forget(match func([3]string) bool) {
	for k, l := range m.live {
		if match(k) {
			l.deleted = true
			delete(m.live, k)
		}
	}
}

// partialDeleter is what every metric vec has in common for deletion.
type partialDeleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

// pathVecs are the vecs labelled by path (and apiserver).
func (m *Probe) pathVecs() []partialDeleter {
	return []partialDeleter{
		m.EventLatency, m.EventsObserved, m.EventsMissed, m.EventsLost, m.LastEventTimestamp,
		m.WatchRestarts, m.WatchDuration, m.Relists, m.RelistDuration, m.Bookmarks, m.WatchStalled,
		m.EventsDuplicate, m.ForeignChanges, m.EventsReplayed, m.EventsOutOfOrder, m.EventsLate,
		m.APIServerLag, m.EventsAfterFailedWrite, m.RequestsThrottled, m.RequestsFailed, m.PathUp,
		m.ResumeChecks, m.ResumeWindow, m.ResumeReplay,
	}
}

func (m *Probe) controllerVecs() []partialDeleter {
	return []partialDeleter{
		m.ControllerReaction, m.ControllerShare, m.ControllerDelivery, m.ControllerChanges, m.ControllerChangeErrors,
		m.ReactionsMissed, m.ReactionsLate, m.ReactionsLost,
	}
}

// ControllerSeries are the children of one probe for one controller.
type ControllerSeries struct {
	Reaction     prometheus.Observer
	Share        prometheus.Observer
	Delivery     prometheus.Observer
	Changes      prometheus.Counter
	ChangeErrors prometheus.Counter
	Missed       map[string]prometheus.Counter // by reason
	Late         prometheus.Counter
	Lost         map[string]prometheus.Counter // by reason
}

// ForControllers returns the children of a probe's controllers, created
// at zero so that rules on their rates have a zero to compare against from
// the first scrape.
func (m *Probe) ForControllers(probe string, controllers []string) map[string]*ControllerSeries {
	out := make(map[string]*ControllerSeries, len(controllers))
	for _, c := range controllers {
		out[c] = &ControllerSeries{
			Reaction:     m.ControllerReaction.WithLabelValues(probe, c),
			Share:        m.ControllerShare.WithLabelValues(probe, c),
			Delivery:     m.ControllerDelivery.WithLabelValues(probe, c),
			Changes:      m.ControllerChanges.WithLabelValues(probe, c),
			ChangeErrors: m.ControllerChangeErrors.WithLabelValues(probe, c),
			Missed:       map[string]prometheus.Counter{},
			Late:         m.ReactionsLate.WithLabelValues(probe, c),
			Lost:         map[string]prometheus.Counter{},
		}
		for _, r := range ReactionReasons {
			out[c].Missed[r] = m.ReactionsMissed.WithLabelValues(probe, c, r)
			out[c].Lost[r] = m.ReactionsLost.WithLabelValues(probe, c, r)
		}
	}
	return out
}

func (m *Probe) throttled(probe, source, apiserver string, requests ...string) map[string]prometheus.Counter {
	out := make(map[string]prometheus.Counter, len(requests))
	for _, r := range requests {
		out[r] = m.RequestsThrottled.WithLabelValues(probe, source, apiserver, r)
	}
	return out
}

// ProbeSeries are the pre-resolved children of one probe, so the hot path
// does no label lookups.
type ProbeSeries struct {
	Success         prometheus.Gauge
	Paths           map[string]*PathSeries
	Writes          map[string]*WriteSeries
	WriteThrottled  map[string]prometheus.Counter // by request
	PendingDeletion prometheus.Gauge
	probe           string
	errorsBy        *prometheus.CounterVec
}

// WriteError counts a failed write; code is the HTTP status, 0 if none.
func (s *ProbeSeries) WriteError(verb string, code int) {
	s.errorsBy.WithLabelValues(s.probe, verb, strconv.Itoa(code)).Inc()
}

// PathSeries are the children of one probe on one watch path.
type PathSeries struct {
	Latency       map[string]prometheus.Observer
	Observed      map[string]prometheus.Counter
	Missed        map[string]prometheus.Counter // by reason
	Lost          map[string]prometheus.Counter // by reason
	LastEvent     prometheus.Gauge
	Restarts      map[string]prometheus.Counter // by reason
	WatchDuration prometheus.Observer
	Bookmarks     prometheus.Counter
	Stalled       prometheus.Gauge
	Idle          *Activity
	Duplicate     prometheus.Counter
	// ForeignChanges counts other clients' changes of the markers.
	ForeignChanges prometheus.Counter
	Replayed       prometheus.Counter
	OutOfOrder     prometheus.Counter
	Late           prometheus.Counter

	AfterFailedWrite prometheus.Counter
	Throttled        map[string]prometheus.Counter // by request
	Up               prometheus.Gauge
	// APIServerLag is set on apiserver paths when the probe has an etcd path.
	APIServerLag prometheus.Observer

	probe, path, apiserver string
	relists                *prometheus.CounterVec
	relistDuration         *prometheus.HistogramVec
	failed                 *prometheus.CounterVec
	owner                  *Probe
	life                   *pathLife
}

// lazy creates and updates a child of the path's, unless the path's series
// have been deleted.
func (s *PathSeries) lazy(update func()) {
	s.owner.deletedMu.RLock()
	defer s.owner.deletedMu.RUnlock()
	if !s.life.deleted {
		update()
	}
}

// RequestFailed counts a list or watch request that failed before a stream
// existed; code is the HTTP status, 0 if none.
func (s *PathSeries) RequestFailed(request string, code int) {
	s.lazy(func() {
		s.failed.WithLabelValues(s.probe, s.path, s.apiserver, request, strconv.Itoa(code)).Inc()
	})
}

// Relist counts one relist; reason and mode are bounded by the caller.
func (s *PathSeries) Relist(reason, mode string) {
	s.lazy(func() {
		s.relists.WithLabelValues(s.probe, s.path, s.apiserver, reason, mode).Inc()
	})
}

// RelistDone records how long a relist took.
func (s *PathSeries) RelistDone(mode string, d time.Duration) {
	s.lazy(func() { s.relistDuration.WithLabelValues(s.probe, s.path, s.apiserver, mode).Observe(d.Seconds()) })
}

// WriteSeries are the children of one probe for one write verb.
type WriteSeries struct {
	Duration prometheus.Observer
	Total    prometheus.Counter
}

// ResumeSeries are the children of one path's resume checks.
type ResumeSeries struct {
	// checks by age, then outcome, all created at zero.
	checks map[string]map[string]prometheus.Counter
	replay prometheus.Observer
	labels []string // probe, path, apiserver
	owner  *Probe
	life   *pathLife
}

// ForResume returns the children of one path's resume checks, ages being
// the configured ages as labelled. Every age and outcome exists at zero at
// once, so that a rule on the rate of incomplete replays has its zero; the
// window does not exist until a round has judged every age, so that nothing
// reads a window of 0 before one was measured. They go with the path's
// other series: DeletePath and DeleteProbe remove them, and a child a
// check sets after that is not brought back.
func (m *Probe) ForResume(probe, path, apiserver string, ages []string) *ResumeSeries {
	m.deletedMu.Lock()
	defer m.deletedMu.Unlock()
	if m.live == nil {
		m.live = map[[3]string]*pathLife{}
	}
	key := [3]string{probe, path, apiserver}
	if m.live[key] == nil {
		m.live[key] = &pathLife{}
	}
	s := &ResumeSeries{
		checks: map[string]map[string]prometheus.Counter{},
		replay: m.ResumeReplay.WithLabelValues(probe, path, apiserver),
		labels: []string{probe, path, apiserver},
		owner:  m,
		life:   m.live[key],
	}
	for _, age := range ages {
		s.checks[age] = map[string]prometheus.Counter{}
		for _, outcome := range ResumeOutcomes {
			s.checks[age][outcome] = m.ResumeChecks.WithLabelValues(probe, path, apiserver, age, outcome)
		}
	}
	return s
}

// lazy updates a child unless the path's series have been deleted.
func (s *ResumeSeries) lazy(update func()) {
	s.owner.deletedMu.RLock()
	defer s.owner.deletedMu.RUnlock()
	if !s.life.deleted {
		update()
	}
}

// Checked counts one check at a configured age with its outcome.
func (s *ResumeSeries) Checked(age, outcome string) {
	if c, ok := s.checks[age][outcome]; ok {
		s.lazy(c.Inc)
	}
}

// Replayed records how long an exact replay took.
func (s *ResumeSeries) Replayed(d time.Duration) {
	s.lazy(func() { s.replay.Observe(d.Seconds()) })
}

// SetWindow sets the window measured by a round that judged every age.
func (s *ResumeSeries) SetWindow(d time.Duration) {
	s.lazy(func() { s.owner.ResumeWindow.WithLabelValues(s.labels...).Set(d.Seconds()) })
}

// SetResumeAges exposes a probe's configured ages, by label, in seconds.
func (m *Probe) SetResumeAges(probe string, ages map[string]time.Duration) {
	for label, d := range ages {
		m.ResumeAge.WithLabelValues(probe, label).Set(d.Seconds())
	}
}
