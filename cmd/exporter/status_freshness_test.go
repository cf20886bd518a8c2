package main

import (
	"testing"

	"github.com/watchprobe/watchprobe/pkg/check"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
)

// The status page's freshness line names each stuck cache while it is
// stuck, each resource served without a watch cache while it is, and the
// stale reads counted, by kind and apiserver.
func TestStatusFreshnessLine(t *testing.T) {
	b := newBoard(5)
	b.track("p")
	hear := b.freshness("p")
	hear(freshness.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Stuck: true})
	hear(freshness.Event{Resource: "configmaps", Stuck: false})
	hear(freshness.Event{Resource: "events", Verdict: freshness.Verdict{Outcome: freshness.Uncached, Reason: metrics.UncachedNoWatchCache}})
	hear(freshness.Event{APIServer: "10.0.0.1:6443", Read: &freshness.ReadVerdict{Kinds: []string{metrics.StaleGhost, metrics.StaleGhost}}})
	want := "watch caches stuck: pods on 10.0.0.1:6443; not checked, no watch cache: events on the load balancer (no_watch_cache); stale reads ghost on 10.0.0.1:6443: 2"
	if got := b.freshnessLine("p"); got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	hear(freshness.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Stuck: false})
	hear(freshness.Event{Resource: "events", Verdict: freshness.Verdict{Outcome: freshness.Fresh}})
	if got, want := b.freshnessLine("p"), "stale reads ghost on 10.0.0.1:6443: 2"; got != want {
		t.Errorf("after recovery %q, want %q", got, want)
	}
	// A later run of the probe starts over; the old run's checks go nowhere.
	b.track("p")
	hear(freshness.Event{Resource: "pods", Stuck: true})
	if got := b.freshnessLine("p"); got != "" {
		t.Errorf("new run %q, want empty", got)
	}
}

// The text report's line of a resource's freshness checks.
func TestFreshnessLineText(t *testing.T) {
	maxWait := 0.0042
	f := check.FreshnessReport{Checks: 5, Fresh: 3, MaxSeconds: &maxWait, Stuck: true,
		Fallbacks: map[string]int64{metrics.FallbackTimeout: 2, metrics.FallbackBound: 0}, Errors: map[string]int64{metrics.FreshnessForbidden: 0}}
	if got, want := freshnessLine(f), "3 of 5 fresh, max "+secs(maxWait)+", fell back: timeout 2, STUCK"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	// Queued checks, the exporter's own queueing, named as such.
	f = check.FreshnessReport{Checks: 5, Fresh: 2, MaxSeconds: &maxWait,
		Queued: map[string]int64{metrics.QueuedWaited: 2, metrics.QueuedRejected: 1}}
	if got, want := freshnessLine(f), "2 of 5 fresh, max "+secs(maxWait)+", queued (the exporter's priority level): waited 2, rejected 1"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	u := check.FreshnessReport{Uncached: map[string]int64{metrics.UncachedAggregated: 4, metrics.UncachedNoWatchCache: 0}}
	if got, want := freshnessLine(u), "0 of 0 fresh, not checked, no watch cache: aggregated 4"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
