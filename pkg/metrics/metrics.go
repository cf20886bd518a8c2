// Package metrics defines every metric watchprobe exports. The names and
// labels here are a contract: the dashboard, the alert rules and the Helm
// chart are written against them.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "watchprobe"

// Label values that are part of the contract.
const (
	PathInformer = "informer"
	PathWatch    = "watch"

	EventAdded    = "added"
	EventModified = "modified"
	EventDeleted  = "deleted"

	VerbCreate = "create"
	VerbUpdate = "update"
	VerbDelete = "delete"
)

// latencyBuckets span 1 ms (a healthy loopback apiserver) to 60 s (an event
// that arrives long after any sane deadline is still worth placing).
var latencyBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// Probe holds the results of probing. It is registered on its own registry,
// apart from the exporter's process and Go metrics.
type Probe struct {
	EventLatency       *prometheus.HistogramVec
	EventsObserved     *prometheus.CounterVec
	EventsMissed       *prometheus.CounterVec
	LastEventTimestamp *prometheus.GaugeVec

	WriteDuration *prometheus.HistogramVec
	Writes        *prometheus.CounterVec
	WriteErrors   *prometheus.CounterVec

	ProbeSuccess *prometheus.GaugeVec
}

// NewProbe creates the probe metrics and registers them on reg.
func NewProbe(reg prometheus.Registerer) *Probe {
	m := &Probe{
		EventLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace,
			Name:      "event_latency_seconds",
			Help:      "Time from just before a marker write was sent to the arrival of its watch event on a path, on the exporter's monotonic clock.",
			Buckets:   latencyBuckets,
			// Native buckets too: a classic histogram cannot show a shift of
			// a few hundred microseconds around the 1-5 ms where a healthy
			// cluster lives.
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"probe", "path", "event"}),
		EventsObserved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_observed_total",
			Help:      "Marker writes whose watch event arrived on a path.",
		}, []string{"probe", "path", "event"}),
		EventsMissed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "events_missed_total",
			Help:      "Acknowledged marker writes whose watch event did not arrive on a path within the deadline.",
		}, []string{"probe", "path"}),
		LastEventTimestamp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "last_event_timestamp_seconds",
			Help:      "Unix time at which the latest marker event arrived on a path.",
		}, []string{"probe", "path"}),
		WriteDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace:                       namespace,
			Name:                            "write_duration_seconds",
			Help:                            "Round-trip time of marker writes to the apiserver, from just before the request was sent to its response.",
			Buckets:                         latencyBuckets,
			NativeHistogramBucketFactor:     1.1,
			NativeHistogramMaxBucketNumber:  160,
			NativeHistogramMinResetDuration: time.Hour,
		}, []string{"probe", "verb"}),
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
	}
	reg.MustRegister(
		m.EventLatency, m.EventsObserved, m.EventsMissed, m.LastEventTimestamp,
		m.WriteDuration, m.Writes, m.WriteErrors, m.ProbeSuccess,
	)
	return m
}

// ForProbe returns the children for one probe, created up front so that
// every series exists at zero from the first scrape: an alert on
// rate(watchprobe_events_missed_total[5m]) needs a zero to compare against,
// and `absent()` must not fire merely because nothing went wrong yet.
func (m *Probe) ForProbe(probe string, paths []string) *ProbeSeries {
	s := &ProbeSeries{
		Success:  m.ProbeSuccess.WithLabelValues(probe),
		Paths:    map[string]*PathSeries{},
		Writes:   map[string]*WriteSeries{},
		probe:    probe,
		errorsBy: m.WriteErrors,
	}
	for _, path := range paths {
		ps := &PathSeries{
			Missed:    m.EventsMissed.WithLabelValues(probe, path),
			LastEvent: m.LastEventTimestamp.WithLabelValues(probe, path),
			Latency:   map[string]prometheus.Observer{},
			Observed:  map[string]prometheus.Counter{},
		}
		for _, ev := range []string{EventAdded, EventModified, EventDeleted} {
			ps.Latency[ev] = m.EventLatency.WithLabelValues(probe, path, ev)
			ps.Observed[ev] = m.EventsObserved.WithLabelValues(probe, path, ev)
		}
		s.Paths[path] = ps
	}
	for _, verb := range []string{VerbCreate, VerbUpdate, VerbDelete} {
		s.Writes[verb] = &WriteSeries{
			Duration: m.WriteDuration.WithLabelValues(probe, verb),
			Total:    m.Writes.WithLabelValues(probe, verb),
		}
	}
	return s
}

// Forget removes every series of a probe, for a probe that was removed.
func (m *Probe) Forget(probe string) {
	l := prometheus.Labels{"probe": probe}
	m.EventLatency.DeletePartialMatch(l)
	m.EventsObserved.DeletePartialMatch(l)
	m.EventsMissed.DeletePartialMatch(l)
	m.LastEventTimestamp.DeletePartialMatch(l)
	m.WriteDuration.DeletePartialMatch(l)
	m.Writes.DeletePartialMatch(l)
	m.WriteErrors.DeletePartialMatch(l)
	m.ProbeSuccess.DeletePartialMatch(l)
}

// ProbeSeries are the pre-resolved children of one probe, so the hot path
// does no label lookups.
type ProbeSeries struct {
	Success  prometheus.Gauge
	Paths    map[string]*PathSeries
	Writes   map[string]*WriteSeries
	probe    string
	errorsBy *prometheus.CounterVec
}

// WriteError counts a failed write; code is the HTTP status, 0 if none.
func (s *ProbeSeries) WriteError(verb string, code int) {
	s.errorsBy.WithLabelValues(s.probe, verb, strconv.Itoa(code)).Inc()
}

// PathSeries are the children of one probe on one watch path.
type PathSeries struct {
	Latency   map[string]prometheus.Observer
	Observed  map[string]prometheus.Counter
	Missed    prometheus.Counter
	LastEvent prometheus.Gauge
}

// WriteSeries are the children of one probe for one write verb.
type WriteSeries struct {
	Duration prometheus.Observer
	Total    prometheus.Counter
}
