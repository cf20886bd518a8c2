package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// seriesOf counts the series in reg whose probe label is probe.
func seriesOf(t *testing.T, reg *prometheus.Registry, probe string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "probe" && l.GetValue() == probe {
					n++
				}
			}
		}
	}
	return n
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
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if pick(mf.GetName(), labels) {
				sum += m.GetCounter().GetValue()
			}
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
