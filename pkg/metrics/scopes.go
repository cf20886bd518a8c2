package metrics

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// ProbeSeries are the series of one probe: its own, its writes' requests
// throttled, and each configured path's.
type ProbeSeries struct {
	*Series
	// WriteRequests are the probe's writes' and cleanup's throttled
	// requests, under path "write".
	WriteRequests *Series
	Paths         map[string]*PathSeries
}

// PathSeries are the series of one path of a probe.
type PathSeries struct {
	*Series
	// Idle is the path's activity, which watchprobe_watch_idle_seconds
	// reports at scrape time.
	Idle *Activity
}

// families are those of scope carried by a series set: a path's lag only
// with an etcd path to pair with, a resume check's only by a resume set.
func families(scope Scope, lag, resume bool) []*Family {
	var out []*Family
	for _, f := range Families {
		if f.Scope == scope && !f.Collected && f.Resume == resume && (!f.Lag || lag) {
			out = append(out, f)
		}
	}
	return out
}

// ForProbe returns the series of one probe and its configured paths. Paths
// added later (one per apiserver) get theirs from ForPath.
func (m *Probe) ForProbe(probe string, paths []string) *ProbeSeries {
	s := &ProbeSeries{
		Series: m.newSeries([3]string{probe, "", ""}, []string{probe}, families(ScopeProbe, false, false), nil),
		WriteRequests: m.newSeries([3]string{probe, SourceWrite, ""}, []string{probe, SourceWrite, ""}, []*Family{RequestsThrottled},
			map[*Family]map[string][]string{RequestsThrottled: {"request": WriteRequests}}),
		Paths: map[string]*PathSeries{},
	}
	etcd := false
	for _, p := range paths {
		etcd = etcd || p == PathEtcd
	}
	for _, path := range paths {
		s.Paths[path] = m.ForPath(probe, path, "", etcd && path != PathEtcd)
	}
	return s
}

// ForPath returns the series of one path of a probe. apiserver is empty
// except on a path pinned to one apiserver, where it is that apiserver's
// address. lag: the probe has an etcd path to pair this path's arrivals
// with.
func (m *Probe) ForPath(probe, path, apiserver string, lag bool) *PathSeries {
	key := [3]string{probe, path, apiserver}
	return &PathSeries{
		Series: m.newSeries(key, key[:], families(ScopePath, lag, false), nil),
		Idle:   m.idle.track(probe, path, apiserver),
	}
}

// ForResume returns the series of one path's resume checks, ages being the
// configured ages as labelled: every age and outcome at zero at once, so
// that a rule on the rate of incomplete replays has its zero; the window
// only once a round has judged every age. They go with the path's other
// series: DeletePath and DeleteProbe remove them.
func (m *Probe) ForResume(probe, path, apiserver string, ages []string) *Series {
	key := [3]string{probe, path, apiserver}
	return m.newSeries(key, key[:], families(ScopePath, false, true),
		map[*Family]map[string][]string{ResumeChecks: {"age": ages}})
}

// ForControllers returns the series of a probe's controllers, by name.
func (m *Probe) ForControllers(probe string, controllers []string) map[string]*Series {
	out := make(map[string]*Series, len(controllers))
	for _, c := range controllers {
		out[c] = m.newSeries([3]string{probe, "", c}, []string{probe, c}, families(ScopeController, false, false), nil)
	}
	return out
}

// DeletePath removes every series of one path of a probe: an apiserver
// that left the cluster must not leave its last values behind, nor grow the
// series without bound as apiservers come and go.
func (m *Probe) DeletePath(probe, path, apiserver string) {
	m.delete(func(k [3]string) bool { return k == [3]string{probe, path, apiserver} },
		prometheus.Labels{"probe": probe, "path": path, "apiserver": apiserver}, ScopePath)
	m.idle.untrack(probe, path, apiserver)
}

// DeleteProbe removes every series of a probe, for a probe that a reload
// removed.
func (m *Probe) DeleteProbe(probe string) {
	m.delete(func(k [3]string) bool { return k[0] == probe }, prometheus.Labels{"probe": probe})
	m.idle.untrackProbe(probe)
}

// delete marks the series sets whose keys match deleted, so that a late
// update cannot bring them back, and removes every series with labels of
// the families of scopes (of every family if none is named).
func (m *Probe) delete(match func([3]string) bool, labels prometheus.Labels, scopes ...Scope) {
	m.mu.Lock()
	for k, l := range m.live {
		if match(k) {
			l.deleted = true
			delete(m.live, k)
		}
	}
	m.mu.Unlock()
	for f, v := range m.vecs {
		if len(scopes) == 0 || slices.Contains(scopes, f.Scope) {
			v.deletePartial(labels)
		}
	}
}

// ForResource returns the series of one resource type of a probe's
// freshness checks through one apiserver ("" for the load-balanced path).
func (m *Probe) ForResource(probe, resource, apiserver string) *Series {
	return m.newSeries([3]string{probe, "resource/" + resource, apiserver}, []string{probe, resource, apiserver},
		families(ScopeResource, false, false), nil)
}

// ForReads returns the series of a probe's stale and ghost read checks on
// one pinned apiserver.
func (m *Probe) ForReads(probe, apiserver string) *Series {
	return m.newSeries([3]string{probe, "reads", apiserver}, []string{probe, apiserver}, families(ScopeReads, false, false), nil)
}

// DeleteResource removes every series of one resource's freshness checks
// of a probe, on every apiserver: a custom resource no longer checked (its
// CRD deleted) must not leave its last values, a stuck gauge among them.
func (m *Probe) DeleteResource(probe, resource string) {
	m.delete(func(k [3]string) bool { return k[0] == probe && k[1] == "resource/"+resource },
		prometheus.Labels{"probe": probe, "resource": resource}, ScopeResource)
}

// DeleteFreshness removes the freshness and read series of one apiserver
// of a probe, for an apiserver that left: as DeletePath does for its path.
func (m *Probe) DeleteFreshness(probe, apiserver string) {
	m.delete(func(k [3]string) bool {
		return k[0] == probe && k[2] == apiserver && (k[1] == "reads" || strings.HasPrefix(k[1], "resource/"))
	}, prometheus.Labels{"probe": probe, "apiserver": apiserver}, ScopeResource, ScopeReads)
}

// ForWatchList returns the series of one resource type of a probe's
// WatchList sync checks through one apiserver ("" for the load-balanced
// path), every one at zero.
func (m *Probe) ForWatchList(probe, resource, apiserver string) *Series {
	return m.newSeries([3]string{probe, "watchlist/" + resource, apiserver}, []string{probe, resource, apiserver},
		families(ScopeWatchList, false, false), nil)
}

// DeleteWatchList removes the WatchList sync series of one apiserver of a
// probe, for an apiserver that left: as DeletePath does for its path.
func (m *Probe) DeleteWatchList(probe, apiserver string) {
	m.delete(func(k [3]string) bool {
		return k[0] == probe && k[2] == apiserver && strings.HasPrefix(k[1], "watchlist/")
	}, prometheus.Labels{"probe": probe, "apiserver": apiserver}, ScopeWatchList)
}
