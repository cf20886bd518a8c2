package watchlist

import (
	"maps"
	"sync"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// sink is every metric write of the package: the series of each resource
// and apiserver, made whole at zero a round before anything counts in them
// (open), kept for the grace after their apiserver is no longer pinned
// (retire).
type sink struct {
	m       *metrics.Probe
	probe   string
	retired judge.RetiredSeries

	mu     sync.Mutex
	series map[[2]string]*metrics.Series
	timers map[string]*time.Timer // by retired apiserver
}

func newSink(m *metrics.Probe, probe string, retired judge.RetiredSeries) *sink {
	return &sink{m: m, probe: probe, retired: retired, series: map[[2]string]*metrics.Series{}, timers: map[string]*time.Timer{}}
}

// open makes the series of resources on apiserver, at zero, where they are
// not yet, and says whether it made any: an apiserver pinned again within
// its grace goes on from its counts.
func (s *sink) open(apiserver string, resources []string) (made bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.timers[apiserver]; t != nil {
		t.Stop()
		delete(s.timers, apiserver)
	}
	for _, r := range resources {
		k := [2]string{r, apiserver}
		if s.series[k] == nil {
			s.series[k] = s.m.ForWatchList(s.probe, r, apiserver)
			made = true
		}
	}
	return made
}

// check counts one judged sync: in syncs_total only when its WatchList
// was written to a connection (a resource not served, a baseline held or
// without a connection sent none).
func (s *sink) check(resource, apiserver string, v Verdict, sy Sync, stuck bool) {
	s.mu.Lock()
	ser := s.series[[2]string{resource, apiserver}]
	s.mu.Unlock()
	if ser == nil {
		return // its apiserver retired while it ran, and its grace is over
	}
	if sy.Sent {
		ser.Counter(metrics.WatchListSyncs).Inc()
	}
	switch v.Outcome {
	case Synced:
		ser.Observer(metrics.WatchListSync).Observe(sy.Took.Seconds())
	case Queued:
		ser.Counter(metrics.WatchListQueued, v.Reason).Inc()
	case Missed:
		ser.Counter(metrics.WatchListMissed, v.Reason).Inc()
	case Refused:
		ser.Counter(metrics.WatchListRefused, v.Reason).Inc()
	case Failed:
		ser.Counter(metrics.WatchListErrors, v.Reason).Inc()
	}
	g := 0.0
	if stuck {
		g = 1
	}
	ser.Gauge(metrics.WatchListStuck).Set(g)
}

// retire shows an apiserver no longer pinned as not stuck and deletes its
// series once they have been exposed for the grace, unless it is back by
// then: what it counted just before it went is scraped.
func (s *sink) retire(apiserver string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ser := range s.series {
		if k[1] == apiserver {
			ser.Gauge(metrics.WatchListStuck).Set(0)
		}
	}
	if s.retired.Keep || s.timers[apiserver] != nil {
		return
	}
	s.timers[apiserver] = time.AfterFunc(s.retired.Grace, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.timers[apiserver] == nil {
			return // back since
		}
		delete(s.timers, apiserver)
		maps.DeleteFunc(s.series, func(k [2]string, _ *metrics.Series) bool { return k[1] == apiserver })
		s.m.DeleteWatchList(s.probe, apiserver)
	})
}

// stop ends the timers of retired apiservers: the series of a probe that
// stops are the caller's to delete.
func (s *sink) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.timers {
		t.Stop()
	}
	clear(s.timers)
}
