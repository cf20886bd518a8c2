package freshness

import (
	"maps"
	"strings"
	"sync"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// sink is every metric write of the package: the series of each resource
// and apiserver, and of each apiserver's reads, made as they first occur
// (an apiserver appears when it is pinned) and then kept.
type sink struct {
	m     *metrics.Probe
	probe string

	mu        sync.Mutex
	resources map[[2]string]*metrics.Series
	reads     map[string]*metrics.Series
}

func newSink(m *metrics.Probe, probe string) *sink {
	return &sink{m: m, probe: probe, resources: map[[2]string]*metrics.Series{}, reads: map[string]*metrics.Series{}}
}

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

// forgetResource drops a resource's series on every target, for one no
// longer checked.
func (s *sink) forgetResource(resource string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.resources, func(k [2]string, _ *metrics.Series) bool { return k[0] == resource })
	s.m.DeleteResource(s.probe, resource)
}

// forget drops an apiserver's series, for one that is no longer pinned.
func (s *sink) forget(apiserver string) {
	if apiserver == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.resources, func(k [2]string, _ *metrics.Series) bool { return k[1] == apiserver })
	delete(s.reads, apiserver)
	s.m.DeleteFreshness(s.probe, apiserver)
}

func compareStrings(a, b string) int { return strings.Compare(a, b) }
