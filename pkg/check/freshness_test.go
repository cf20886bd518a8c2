package check

import (
	"slices"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
)

// A probe's freshness checks in the report: per resource and apiserver
// the counts, the longest wait and whether the cache was stuck, per
// apiserver the stale reads; a stuck cache, a failed check and a stale
// read each fail the probe with a problem that names it. Queued checks
// are counted apart, and fail the probe only when no check of a resource
// was judged, naming the exporter's priority level. A resource served
// without a watch cache is counted apart, not as a check, and is no
// problem. The JSON form matches the schema, strictly.
func TestReportFreshness(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathWatch)
	cfg.Freshness.Resources = []string{"pods", "configmaps", "events"}
	tl := f.probe(cfg)
	deliver(tl, path(metrics.PathWatch, ""), 3)
	cycles(tl, true, true, true)
	ft := newFreshTally()
	f.c.fresh[cfg.Name] = ft
	timeout := freshness.Verdict{Outcome: freshness.FellBack, Reason: metrics.FallbackTimeout}
	waited, rejected := freshness.Verdict{Outcome: freshness.Queued, Reason: metrics.QueuedWaited}, freshness.Verdict{Outcome: freshness.Queued, Reason: metrics.QueuedRejected}
	for i := range 3 {
		ft.observe(freshness.Event{Resource: "configmaps", Verdict: freshness.Verdict{Outcome: freshness.Fresh, Timed: true, Wait: time.Duration(i+1) * time.Millisecond}})
		ft.observe(freshness.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Verdict: timeout, Stuck: i > 0})
		ft.observe(freshness.Event{Resource: "leases.coordination.k8s.io", Verdict: []freshness.Verdict{waited, rejected, waited}[i]})
		ft.observe(freshness.Event{APIServer: "10.0.0.1:6443", Read: &freshness.ReadVerdict{}})
	}
	ft.observe(freshness.Event{Resource: "configmaps", Verdict: waited})
	ft.observe(freshness.Event{APIServer: "10.0.0.1:6443", Read: &freshness.ReadVerdict{Kinds: []string{metrics.StaleGhost}}})
	for range 2 {
		ft.observe(freshness.Event{Resource: "events", Verdict: freshness.Verdict{Outcome: freshness.Uncached, Reason: metrics.UncachedNoWatchCache}})
	}

	r := f.report()
	got := asJSON(t, r)
	pr := got.Probes[0]
	if len(pr.Freshness) != 4 || len(pr.StaleReads) != 1 {
		t.Fatalf("freshness %+v, stale reads %+v", pr.Freshness, pr.StaleReads)
	}
	cm, events, leases, pods := pr.Freshness[0], pr.Freshness[1], pr.Freshness[2], pr.Freshness[3] // the load balancer first
	if events.Resource != "events" || events.Checks != 0 || events.Uncached[metrics.UncachedNoWatchCache] != 2 || events.Uncached[metrics.UncachedAggregated] != 0 ||
		events.MaxSeconds != nil || !events.OK || len(events.Problems) != 0 {
		t.Errorf("events %+v", events)
	}
	if cm.Resource != "configmaps" || cm.Checks != 4 || cm.Fresh != 3 || cm.Queued[metrics.QueuedWaited] != 1 || cm.MaxSeconds == nil || *cm.MaxSeconds != 0.003 || cm.Stuck || !cm.OK {
		t.Errorf("configmaps %+v", cm)
	}
	if leases.Checks != 3 || leases.Fresh != 0 || leases.Queued[metrics.QueuedWaited] != 2 || leases.Queued[metrics.QueuedRejected] != 1 || leases.MaxSeconds != nil || leases.Stuck || leases.OK {
		t.Errorf("leases %+v", leases)
	}
	if pods.Resource != "pods" || pods.Checks != 3 || pods.Fallbacks[metrics.FallbackTimeout] != 3 || pods.MaxSeconds != nil || !pods.Stuck || pods.OK {
		t.Errorf("pods %+v", pods)
	}
	if sr := pr.StaleReads[0]; sr.Reads != 4 || sr.Kinds[metrics.StaleGhost] != 1 || sr.Kinds[metrics.StaleMissing] != 0 {
		t.Errorf("stale reads %+v", sr)
	}
	want := []string{
		"probe configmaps: freshness: all 3 checks of leases.coordination.k8s.io on the load balancer were held in the apiserver's priority and fairness queue (waited 2, rejected 1): the exporter's priority level is saturated, its cache not measured",
		"probe configmaps: freshness: pods's watch cache on 10.0.0.1:6443 is stuck: most of its consistent LISTs fell back (timeout 3)",
		"probe configmaps: stale reads on 10.0.0.1:6443: ghost 1",
	}
	if got.OK || !slices.Equal(got.Problems, want) || r.Verdict() != Fails {
		t.Errorf("ok %v, problems %q, want %q", got.OK, got.Problems, want)
	}
}
