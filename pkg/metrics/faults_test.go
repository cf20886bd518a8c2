package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

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

// faultSum sums every series that Fault counts, as the status page reads
// them.
func faultSum(t *testing.T, g prometheus.Gatherer) float64 {
	t.Helper()
	return sumCounters(t, g, Fault)
}

// Faults must rise exactly when a fault series does: the status page skips
// reading the counters while it stays, so a fault it missed would vanish
// from the page, and one it invented would cost a gather.
func TestFaultsRiseWithEveryFaultSeries(t *testing.T) {
	m := NewProbe(prometheus.NewRegistry())
	s := m.ForProbe("p", []string{PathInformer, PathWatch})
	incs := map[string]func(){}
	for r, c := range s.WriteThrottled {
		incs["write throttled "+r] = c.Inc
	}
	for _, verb := range []string{VerbCreate, VerbUpdate, VerbDelete} {
		incs["write error "+verb] = func() { s.WriteError(verb, 500) }
		incs["write "+verb] = s.Writes[verb].Total.Inc
	}
	for _, path := range []string{PathInformer, PathWatch} {
		ps := s.Paths[path]
		for r, c := range ps.Missed {
			incs[path+" missed "+r] = c.Inc
		}
		for r, c := range ps.Restarts {
			incs[path+" restart "+r] = c.Inc
		}
		for r, c := range ps.Throttled {
			incs[path+" throttled "+r] = c.Inc
		}
		for _, r := range []string{RelistInitial, RelistExpired, RelistError} {
			incs[path+" relist "+r] = func() { ps.Relist(r, ModeWatchList) }
		}
		incs[path+" request failed"] = func() { ps.RequestFailed(RequestWatch, 500) }
		incs[path+" after failed write"] = ps.AfterFailedWrite.Inc
		incs[path+" duplicate"] = ps.Duplicate.Inc
		incs[path+" replayed"] = ps.Replayed.Inc
		incs[path+" out of order"] = ps.OutOfOrder.Inc
		incs[path+" late"] = func() { ps.Late.Add(2) }
		incs[path+" observed"] = ps.Observed[EventAdded].Inc
		incs[path+" bookmark"] = ps.Bookmarks.Inc
		rs := m.ForResume("p", path, "", []string{"10s"})
		for _, outcome := range ResumeOutcomes {
			incs[path+" resume "+outcome] = func() { rs.Checked("10s", outcome) }
		}
	}
	var rose, stayed int
	for name, inc := range incs {
		sum, faults := faultSum(t, m.Anomalies()), m.Faults()
		inc()
		faultRose := faultSum(t, m.Anomalies()) > sum
		if got := m.Faults() > faults; got != faultRose {
			t.Errorf("%s: Faults rose %v, a fault series rose %v", name, got, faultRose)
		}
		if faultRose {
			rose++
		} else {
			stayed++
		}
	}
	// Both kinds must have been tried for the test to mean anything.
	if rose < 30 || stayed < 10 {
		t.Errorf("%d increments raised a fault series and %d did not; the test lost its cases", rose, stayed)
	}
}
