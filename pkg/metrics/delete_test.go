package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// exposed is one series as a gatherer exposes it.
type exposed struct {
	family string
	labels map[string]string
	metric *dto.Metric
}

// gathered is every series g exposes.
func gathered(t *testing.T, g prometheus.Gatherer) []exposed {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []exposed
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out = append(out, exposed{mf.GetName(), labels, m})
		}
	}
	return out
}

// seriesWhere counts the series in g whose labels pick accepts.
func seriesWhere(t *testing.T, g prometheus.Gatherer, pick func(labels map[string]string) bool) int {
	t.Helper()
	n := 0
	for _, e := range gathered(t, g) {
		if pick(e.labels) {
			n++
		}
	}
	return n
}

// seriesOf counts the series in reg whose probe label is probe.
func seriesOf(t *testing.T, reg *prometheus.Registry, probe string) int {
	t.Helper()
	return seriesWhere(t, reg, func(l map[string]string) bool { return l["probe"] == probe })
}

// A relist or a failed request that ends as its path is being removed does
// not bring back the series DeletePath or DeleteProbe removed; a path made
// again under the same labels counts once more.
func TestLazySeriesStayDeleted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewProbe(reg)
	touch := func(ps *PathSeries) {
		ps.Counter(Relists, RelistExpired, ModeList).Inc()
		ps.Observer(RelistDuration, ModeList).Observe(1)
		ps.Counter(RequestsFailed, RequestWatch, "503").Inc()
	}
	// A resume check that ends as its path is removed.
	check := func(rs *Series) {
		rs.Counter(ResumeChecks, "10s", ResumeReplayed).Inc()
		rs.Observer(ResumeReplay).Observe(0.001)
		rs.Gauge(ResumeWindow).Set(10)
	}

	s := m.ForProbe("removed", []string{PathWatch})
	rs := m.ForResume("removed", PathWatch, "", []string{"10s"})
	m.DeleteProbe("removed")
	s.Gauge(ResumeAge, "10s").Set(10)
	touch(s.Paths[PathWatch])
	check(rs)
	if n := seriesOf(t, reg, "removed"); n != 0 {
		t.Errorf("%d series of a deleted probe after a late relist, a late failed request and a late resume check, want 0", n)
	}

	pinned := m.ForPath("kept", PathAPIServer, "10.0.0.1:6443", false)
	pinnedResume := m.ForResume("kept", PathAPIServer, "10.0.0.1:6443", []string{"10s"})
	m.DeletePath("kept", PathAPIServer, "10.0.0.1:6443")
	touch(pinned)
	check(pinnedResume)
	if n := seriesOf(t, reg, "kept"); n != 0 {
		t.Errorf("%d series of a deleted path after a late relist, a late failed request and a late resume check, want 0", n)
	}

	again := m.ForPath("kept", PathAPIServer, "10.0.0.1:6443", false)
	touch(again)
	touch(pinned) // the old path's late calls still count nothing
	v := sumVec(t, reg, "watchprobe_relists_total", "kept")
	if v != 1 {
		t.Errorf("the path made again counted %g relists, want 1", v)
	}
}

// sumVec sums the counters of family name for one probe.
func sumVec(t *testing.T, reg *prometheus.Registry, name, probe string) float64 {
	t.Helper()
	return sumCounters(t, reg, func(family string, labels map[string]string) bool {
		return family == name && labels["probe"] == probe
	})
}

// sumCounters gathers g and sums the counters whose family and labels
// pick accepts.
func sumCounters(t *testing.T, g prometheus.Gatherer, pick func(family string, labels map[string]string) bool) float64 {
	t.Helper()
	var sum float64
	for _, e := range gathered(t, g) {
		if pick(e.family, e.labels) {
			sum += e.metric.GetCounter().GetValue()
		}
	}
	return sum
}

// A path's resume checks exist at zero for every age and outcome from the
// start; its window exists only once a round has set it.
func TestResumeSeriesAtZeroWindowAbsent(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewProbe(reg)
	rs := m.ForResume("p", PathWatch, "", []string{"10s", "1m"})
	if n := seriesOf(t, reg, "p"); n != 2*len(ResumeOutcomes)+1 {
		t.Errorf("%d series, want %d checks at zero and the replay histogram", n, 2*len(ResumeOutcomes))
	}
	rs.Gauge(ResumeWindow).Set(60)
	if n := seriesOf(t, reg, "p"); n != 2*len(ResumeOutcomes)+2 {
		t.Errorf("%d series after a round, want the window too", n)
	}
}

// Each deletion takes its own scope's series and no other's: a CRD no
// longer checked takes its resource's series on every apiserver and
// nothing else, and an apiserver that left takes its freshness and read
// series while its pinned path's stay for their own grace.
func TestDeletionsKeepToTheirScope(t *testing.T) {
	const addr = "10.0.0.1:6443"
	reg := prometheus.NewRegistry()
	m := NewProbe(reg)
	m.ForPath("p", PathAPIServer, addr, false).Counter(Relists, RelistExpired, ModeList).Inc()
	for _, target := range []string{"", addr} {
		for _, resource := range []string{"pods", "widgets.example.com"} {
			m.ForResource("p", resource, target).Counter(ListFreshnessChecks).Inc()
		}
	}
	m.ForReads("p", addr).Counter(ListReads).Inc()
	count := func(pick func(labels map[string]string) bool) int { return seriesWhere(t, reg, pick) }
	pinnedPath := func(l map[string]string) bool { return l["path"] == PathAPIServer && l["apiserver"] == addr }
	resourceOn := func(resource, apiserver string) func(map[string]string) bool {
		return func(l map[string]string) bool { return l["resource"] == resource && l["apiserver"] == apiserver }
	}
	reads := func(l map[string]string) bool {
		_, resource := l["resource"]
		_, path := l["path"]
		return !resource && !path && l["apiserver"] == addr
	}
	pathSeries, podsSeries, readSeries := count(pinnedPath), count(resourceOn("pods", "")), count(reads)
	if pathSeries == 0 || podsSeries == 0 || readSeries == 0 {
		t.Fatalf("series before any deletion: pinned path %d, pods %d, reads %d; want some of each", pathSeries, podsSeries, readSeries)
	}

	m.DeleteResource("p", "widgets.example.com")
	m.DeleteFreshness("p", addr)
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"the deleted resource's series, load-balanced", count(resourceOn("widgets.example.com", "")), 0},
		{"the deleted resource's series, pinned", count(resourceOn("widgets.example.com", addr)), 0},
		{"pods' series on the apiserver that left", count(resourceOn("pods", addr)), 0},
		{"read series of the apiserver that left", count(reads), 0},
		{"pods' series, load-balanced", count(resourceOn("pods", "")), podsSeries},
		{"the pinned path's series", count(pinnedPath), pathSeries},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
}

// A WatchList sync series set exists whole, at zero, before its first
// increment; an apiserver that left takes its WatchList series and
// nothing else: not the load-balanced ones, not its freshness series (a
// kind of its own, with its own grace), and a late update does not bring
// them back.
func TestWatchListSeries(t *testing.T) {
	const addr = "10.0.0.1:6443"
	reg := prometheus.NewRegistry()
	m := NewProbe(reg)
	for _, target := range []string{"", addr} {
		m.ForWatchList("p", "pods", target)
		m.ForResource("p", "pods", target)
	}
	scope := map[string]Scope{}
	for _, f := range Families {
		scope[f.FullName()] = f.Scope
	}
	watchList := func(apiserver string) func(exposed) bool {
		return func(e exposed) bool { return e.labels["apiserver"] == apiserver && scope[e.family] == ScopeWatchList }
	}
	count := func(pick func(exposed) bool) (n int, zero bool) {
		zero = true
		for _, e := range gathered(t, reg) {
			if pick(e) {
				n++
				zero = zero && e.metric.GetCounter().GetValue() == 0 && e.metric.GetGauge().GetValue() == 0 && e.metric.GetHistogram().GetSampleCount() == 0
			}
		}
		return n, zero
	}
	// Every family of the scope, each closed set's every value.
	want := 1 + 1 + len(WatchListMissedReasons) + len(WatchListRefusedReasons) + len(FreshnessErrorReasons) + len(QueuedReasons) + 1
	for _, target := range []string{"", addr} {
		if n, zero := count(watchList(target)); n != want || !zero {
			t.Errorf("WatchList series on %q: %d (all zero: %v), want %d at zero", target, n, zero, want)
		}
	}
	freshness := func(e exposed) bool { return e.labels["apiserver"] == addr && scope[e.family] == ScopeResource }
	freshBefore, _ := count(freshness)
	late := m.ForWatchList("p", "pods", addr)
	m.DeleteWatchList("p", addr)
	late.Counter(WatchListSyncs).Inc()
	if n, _ := count(watchList(addr)); n != 0 {
		t.Errorf("%d WatchList series of the apiserver that left, want none", n)
	}
	if n, _ := count(watchList("")); n != want {
		t.Errorf("%d load-balanced WatchList series after deleting an apiserver's, want %d", n, want)
	}
	if n, _ := count(freshness); n != freshBefore || n == 0 {
		t.Errorf("%d freshness series of the apiserver after deleting its WatchList ones, want %d", n, freshBefore)
	}
}
