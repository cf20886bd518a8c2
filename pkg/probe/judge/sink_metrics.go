package judge

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// MetricsSink counts a probe's outcomes in its series. It is the only
// writer of the probe's series: it resolves them from the outcomes' paths
// and controllers, makes those of a path pinned to an apiserver when it is
// added and deletes them a while after it is removed.
type MetricsSink struct {
	m       *metrics.Probe
	probe   string
	series  *metrics.ProbeSeries
	lag     bool // the probe has an etcd path to pair other paths with
	ctls    map[string]*metrics.Series
	ages    []string // the resume checks' ages, as labelled; nil when off
	retired RetiredSeries

	// paths are the series of each path by the tracker's PathInfo, and
	// byName by path name and apiserver; resume the series of each path's
	// resume checks. mu guards them against the timers that delete a
	// retired path's series.
	mu     sync.Mutex
	paths  map[*PathInfo]*metrics.PathSeries
	byName map[PathInfo]*metrics.PathSeries
	resume map[PathInfo]*metrics.Series
	timers map[PathInfo]*time.Timer
}

// RetiredSeries says how long the series of a path pinned to an apiserver
// that left stay: keep for the whole run (a one-shot report must keep
// every miss it counted, and an apiserver that comes back goes on from its
// counts); else grace, for a few scrapes to see what was counted just
// before it went.
type RetiredSeries struct {
	Keep  bool
	Grace time.Duration
}

// NewMetricsSink makes the series of a probe, its configured paths (and
// their resume checks, on resumed), and its controllers.
func NewMetricsSink(m *metrics.Probe, probe string, paths, resumed, controllers []string, ages map[string]time.Duration, retired RetiredSeries) *MetricsSink {
	s := &MetricsSink{
		m: m, probe: probe, series: m.ForProbe(probe, paths), lag: slices.Contains(paths, metrics.PathEtcd),
		ctls: m.ForControllers(probe, controllers), retired: retired,
		paths: map[*PathInfo]*metrics.PathSeries{}, byName: map[PathInfo]*metrics.PathSeries{},
		resume: map[PathInfo]*metrics.Series{}, timers: map[PathInfo]*time.Timer{},
	}
	for name, ps := range s.series.Paths {
		s.byName[PathInfo{Name: name}] = ps
	}
	for label, d := range ages {
		s.ages = append(s.ages, label)
		s.series.Gauge(metrics.ResumeAge, label).Set(d.Seconds())
	}
	slices.Sort(s.ages)
	for _, name := range resumed {
		s.resumeOf(PathInfo{Name: name})
	}
	return s
}

// path is the series of p.
func (s *MetricsSink) path(p *PathInfo) *metrics.PathSeries {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ps := s.paths[p]; ps != nil {
		return ps
	}
	ps := s.byName[*p]
	if ps == nil {
		ps = s.m.ForPath(s.probe, p.Name, p.APIServer, s.lag && p.Name != metrics.PathEtcd)
		s.byName[*p] = ps
	}
	s.paths[p] = ps
	return ps
}

// resumed is the series of p's resume checks, nil once they were deleted
// with their retired path: a round of checks that outlasts its apiserver's
// grace must not bring them back, for good, since no removal follows.
func (s *MetricsSink) resumed(p PathInfo) *metrics.Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resume[p]
}

// resumeOf makes the series of p's resume checks, configured or added;
// the caller holds mu, or is the constructor.
func (s *MetricsSink) resumeOf(p PathInfo) *metrics.Series {
	if rs := s.resume[p]; rs != nil {
		return rs
	}
	rs := s.m.ForResume(s.probe, p.Name, p.APIServer, s.ages)
	s.resume[p] = rs
	return rs
}

func (s *MetricsSink) Outcome(o Outcome) {
	if o.Controller != "" {
		s.controllerOutcome(o)
		return
	}
	if o.Path == nil {
		s.probeOutcome(o)
		return
	}
	switch o.Kind {
	case PathAdded:
		s.added(o.Path)
		return
	case PathRemoved:
		s.removed(o.Path)
		return
	case ResumeChecked:
		rs := s.resumed(*o.Path)
		if rs == nil {
			return
		}
		rs.Counter(metrics.ResumeChecks, ageLabel(o.Limit), o.Reason).Inc()
		if v := o.Resume; v != nil && v.Outcome == metrics.ResumeReplayed {
			rs.Observer(metrics.ResumeReplay).Observe(v.Replay.Seconds())
		}
		return
	case ResumeWindow:
		rs := s.resumed(*o.Path)
		if rs == nil {
			return
		}
		rs.Gauge(metrics.ResumeWindow).Set(o.Limit.Seconds())
		return
	}
	ps := s.path(o.Path)
	if f := Counted(o.Kind); f != nil {
		ps.Counter(f, labelValues(o, f)...).Inc()
	}
	switch o.Kind {
	case Arrived:
		observe(ps.Observer(metrics.EventLatency, o.Event), o.Latency, o.Trace)
		ps.Counter(metrics.EventsObserved, o.Event).Inc()
		if o.Late {
			ps.Counter(metrics.EventsLate).Inc()
		}
	case APIServerLag:
		if ps.Has(metrics.APIServerLag) {
			ps.Observer(metrics.APIServerLag).Observe(o.Latency.Seconds())
		}
	case Activity:
		ps.Gauge(metrics.LastEventTimestamp).Set(float64(o.At.UnixNano()) / 1e9)
		ps.Idle.Touch(o.At)
	case Bookmark:
		ps.Idle.Touch(o.At)
	case Up:
		ps.Gauge(metrics.PathUp).Set(1)
	case Down:
		ps.Gauge(metrics.PathUp).Set(0)
	case Refused:
		setRefused(ps.Series, o.Reason)
	case Stalled:
		ps.Gauge(metrics.WatchStalled).Set(1)
	case Unstalled:
		ps.Gauge(metrics.WatchStalled).Set(0)
	case StreamEnded:
		ps.Counter(metrics.WatchRestarts, o.Reason).Inc()
		ps.Observer(metrics.WatchDuration).Observe(o.Latency.Seconds())
	case RelistDone:
		ps.Observer(metrics.RelistDuration, o.Mode).Observe(o.Latency.Seconds())
	case Throttled:
		if o.Request == metrics.RequestList || o.Request == metrics.RequestWatch {
			ps.Counter(metrics.RequestsThrottled, o.Request).Inc()
		}
	}
}

// setRefused shows a path refused for reason, or not refused at all for
// "".
func setRefused(ps *metrics.Series, reason string) {
	for _, r := range metrics.PathRefusals {
		v := 0.0
		if r == reason {
			v = 1
		}
		ps.Gauge(metrics.PathRefused, r).Set(v)
	}
}

// labelValues are the values of f's labels for o.
func labelValues(o Outcome, f *metrics.Family) []string {
	values := make([]string, len(f.Labels))
	for i, l := range f.Labels {
		values[i] = o.labelValue(l.Name)
	}
	return values
}

// ageLabel is a resume age as labelled.
func ageLabel(d time.Duration) string { return Outcome{Limit: d}.labelValue("age") }

// added makes the series of a path pinned to an apiserver, or keeps those
// of one back within the grace.
func (s *MetricsSink) added(p *PathInfo) {
	s.mu.Lock()
	if t := s.timers[*p]; t != nil {
		t.Stop()
		delete(s.timers, *p)
	}
	s.mu.Unlock()
	s.path(p)
	if s.ages != nil {
		s.mu.Lock()
		s.resumeOf(*p)
		s.mu.Unlock()
	}
}

// removed shows the path of an apiserver that left neither up nor
// stalled, and deletes its series once they have been exposed for the
// grace, unless it is back by then.
func (s *MetricsSink) removed(p *PathInfo) {
	ps := s.path(p)
	ps.Gauge(metrics.PathUp).Set(0)
	ps.Gauge(metrics.WatchStalled).Set(0)
	setRefused(ps.Series, "")
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.paths, p)
	if s.retired.Keep {
		return
	}
	key := *p
	s.timers[key] = time.AfterFunc(s.retired.Grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.timers[key] == nil {
			return // back since
		}
		delete(s.timers, key)
		delete(s.byName, key)
		delete(s.resume, key)
		s.m.DeletePath(s.probe, key.Name, key.APIServer)
	})
}

// Stop ends the timers of retired paths: the series of a probe that
// stops are the caller's to delete.
func (s *MetricsSink) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.timers {
		t.Stop()
		delete(s.timers, k)
	}
}

// probeOutcome counts the outcomes of a probe's writes and cycles.
func (s *MetricsSink) probeOutcome(o Outcome) {
	switch o.Kind {
	case Answered:
		s.series.Counter(metrics.Writes, o.Verb).Inc()
		if f := o.anomaly(); f != nil {
			s.series.Counter(f, labelValues(o, f)...).Inc()
		} else {
			observe(s.series.Observer(metrics.WriteDuration, o.Verb), o.Latency, o.Trace)
		}
	case Throttled:
		if slices.Contains(metrics.WriteRequests, o.Request) {
			s.series.WriteRequests.Counter(metrics.RequestsThrottled, o.Request).Inc()
		}
	case MarkersPending:
		s.series.Gauge(metrics.MarkersPendingDeletion).Set(float64(o.Count))
		s.series.Gauge(metrics.MarkersHeld).Set(float64(o.Held))
	case CycleJudged:
		if o.Reason != "" {
			s.series.Counter(metrics.CyclesUnjudged).Inc()
			return
		}
		if !o.Newest {
			return
		}
		if o.OK {
			s.series.Gauge(metrics.ProbeSuccess).Set(1)
		} else {
			s.series.Gauge(metrics.ProbeSuccess).Set(0)
		}
	}
}

// controllerOutcome counts the outcomes of a controller's marker object.
func (s *MetricsSink) controllerOutcome(o Outcome) {
	cs := s.ctls[o.Controller]
	if cs == nil {
		return
	}
	if f := Counted(o.Kind); f != nil {
		cs.Counter(f, labelValues(o, f)...).Inc()
	}
	switch o.Kind {
	case ControllerChanged:
		switch {
		case o.Err != nil:
			cs.Counter(metrics.ControllerChangeErrors).Inc()
		case o.Verb == metrics.VerbUpdate:
			cs.Counter(metrics.ControllerChanges).Inc()
		}
	case Reacted:
		cs.Observer(metrics.ControllerReaction).Observe(o.Latency.Seconds())
		if o.Share >= 0 {
			cs.Observer(metrics.ControllerShare).Observe(o.Share.Seconds())
			cs.Observer(metrics.ControllerDelivery).Observe((o.Latency - o.Share).Seconds())
		}
		if o.Late {
			cs.Counter(metrics.ReactionsLate).Inc()
		}
	}
}

// observe records d, with the write's trace ID as an exemplar when its
// trace is sampled, so a latency point on a dashboard leads to its trace.
func observe(o prometheus.Observer, d time.Duration, sc trace.SpanContext) {
	if sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(d.Seconds())
}
