package freshness

import (
	"maps"
	"sync"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// sink is every metric write of the package: the series of each resource
// and apiserver, and of each apiserver's reads. They are made when their
// resource or apiserver first appears, at zero, a round before anything
// counts in them (open), so that a scrape sees the zero and a rule's
// increase sees the first count; an apiserver no longer pinned keeps them
// for the grace (retire).
type sink struct {
	m       *metrics.Probe
	probe   string
	retired judge.RetiredSeries

	mu        sync.Mutex
	resources map[[2]string]*metrics.Series
	reads     map[string]*metrics.Series
	// timers delete the series of each apiserver retired, by address.
	timers map[string]*time.Timer
}

func newSink(m *metrics.Probe, probe string, retired judge.RetiredSeries) *sink {
	return &sink{m: m, probe: probe, retired: retired,
		resources: map[[2]string]*metrics.Series{}, reads: map[string]*metrics.Series{}, timers: map[string]*time.Timer{}}
}

// open makes the series of resources on apiserver, and of its reads when
// reads, that do not exist yet, and returns those it made (by resource)
// and whether it made the reads': an apiserver pinned again within its
// grace goes on from its counts.
func (s *sink) open(apiserver string, resources []string, reads bool) (made map[string]bool, readsMade bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.timers[apiserver]; t != nil {
		t.Stop()
		delete(s.timers, apiserver)
	}
	made = map[string]bool{}
	for _, r := range resources {
		k := [2]string{r, apiserver}
		if s.resources[k] == nil {
			s.resources[k] = s.m.ForResource(s.probe, r, apiserver)
			made[r] = true
		}
	}
	if reads && s.reads[apiserver] == nil {
		s.reads[apiserver] = s.m.ForReads(s.probe, apiserver)
		readsMade = true
	}
	return made, readsMade
}

// resource is the series of resource on apiserver, made if open did not.
func (s *sink) resource(resource, apiserver string) *metrics.Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{resource, apiserver}
	if s.resources[k] == nil {
		s.resources[k] = s.m.ForResource(s.probe, resource, apiserver)
	}
	return s.resources[k]
}

func (s *sink) check(resource, apiserver string, v Verdict, a Answer, stuck bool) {
	ser := s.resource(resource, apiserver)
	ser.Counter(metrics.ListFreshnessChecks).Inc()
	if v.Timed {
		ser.Observer(metrics.ListFreshness).Observe(v.Wait.Seconds())
	}
	if a.answered() {
		ser.Observer(metrics.ListFreshnessRoundTrip).Observe(a.Took.Seconds())
	}
	switch v.Outcome {
	case FellBack:
		ser.Counter(metrics.ListFreshnessFallbacks, v.Reason).Inc()
	case Failed:
		ser.Counter(metrics.ListFreshnessErrors, v.Reason).Inc()
	case Queued:
		ser.Counter(metrics.ListFreshnessQueued, v.Reason).Inc()
	}
	g := 0.0
	if stuck {
		g = 1
	}
	ser.Gauge(metrics.ListFreshnessStuck).Set(g)
}

func (s *sink) read(apiserver string, v ReadVerdict) {
	s.mu.Lock()
	ser := s.reads[apiserver]
	if ser == nil {
		ser = s.m.ForReads(s.probe, apiserver)
		s.reads[apiserver] = ser
	}
	s.mu.Unlock()
	ser.Counter(metrics.ListReads).Inc()
	for _, k := range v.Kinds {
		ser.Counter(metrics.ListStaleReads, k).Inc()
	}
}

// uncached sets the resource's uncached state on apiserver: 1 for reason,
// 0 for the others ("" for a cache); an uncached resource is not stuck.
func (s *sink) uncached(resource, apiserver, reason string) {
	ser := s.resource(resource, apiserver)
	for _, r := range metrics.UncachedReasons {
		g := 0.0
		if r == reason {
			g = 1
		}
		ser.Gauge(metrics.ListFreshnessUncached, r).Set(g)
	}
	if reason != "" {
		ser.Gauge(metrics.ListFreshnessStuck).Set(0)
	}
}

// forgetResource drops a resource's series on every target, for one no
// longer checked.
func (s *sink) forgetResource(resource string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.resources, func(k [2]string, _ *metrics.Series) bool { return k[0] == resource })
	s.m.DeleteResource(s.probe, resource)
}

// retire shows an apiserver that is no longer pinned as neither stuck nor
// uncached, and deletes its series once they have been exposed for the
// grace (for a few scrapes to see what was counted just before it went),
// unless it is pinned again by then; with Keep, never.
func (s *sink) retire(apiserver string) {
	if apiserver == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ser := range s.resources {
		if k[1] == apiserver {
			clearState(ser)
		}
	}
	if s.retired.Keep {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(s.retired.Grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.timers[apiserver] != t {
			return // pinned again since, or retired anew
		}
		delete(s.timers, apiserver)
		maps.DeleteFunc(s.resources, func(k [2]string, _ *metrics.Series) bool { return k[1] == apiserver })
		delete(s.reads, apiserver)
		s.m.DeleteFreshness(s.probe, apiserver)
	})
	if old := s.timers[apiserver]; old != nil {
		old.Stop()
	}
	s.timers[apiserver] = t
}

// clearState sets the state gauges of a resource's series to zero.
func clearState(ser *metrics.Series) {
	ser.Gauge(metrics.ListFreshnessStuck).Set(0)
	for _, r := range metrics.UncachedReasons {
		ser.Gauge(metrics.ListFreshnessUncached, r).Set(0)
	}
}

// stop ends the timers of retired apiservers: the series of a probe that
// stops are the caller's to delete, and a timer must not delete those of
// the probe that replaces it.
func (s *sink) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for a, t := range s.timers {
		t.Stop()
		delete(s.timers, a)
	}
}
