package main

import (
	"testing"

	"github.com/watchprobe/watchprobe/pkg/check"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

// The status page's WatchList line names each resource whose syncs are
// stuck, on each apiserver, while they are, and until that apiserver is no
// longer pinned; a later run starts over.
func TestStatusWatchListLine(t *testing.T) {
	b := newBoard(5)
	b.track("p")
	hear := b.watchList("p")
	hear(watchlist.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Stuck: true})
	hear(watchlist.Event{Resource: "configmaps", Stuck: true})
	hear(watchlist.Event{Resource: "leases.coordination.k8s.io", Stuck: false})
	want := "syncs stuck (no end bookmark within the bound): configmaps on the load balancer, pods on 10.0.0.1:6443"
	if got := b.watchListLine("p"); got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	hear(watchlist.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Retired: true})
	if got, want := b.watchListLine("p"), "syncs stuck (no end bookmark within the bound): configmaps on the load balancer"; got != want {
		t.Errorf("after 10.0.0.1:6443 retired %q, want %q", got, want)
	}
	hear(watchlist.Event{Resource: "configmaps", Stuck: false})
	if got := b.watchListLine("p"); got != "" {
		t.Errorf("after recovery %q, want empty", got)
	}
	hear(watchlist.Event{Resource: "pods", Stuck: true})
	b.track("p")
	hear(watchlist.Event{Resource: "pods", Stuck: true})
	if got := b.watchListLine("p"); got != "" {
		t.Errorf("new run %q, want empty", got)
	}
}

// The text report's line of a resource's WatchList syncs.
func TestWatchListLineText(t *testing.T) {
	longest := 0.0031
	w := check.WatchListReport{Syncs: 6, Synced: 2, MaxSeconds: &longest, Stuck: true,
		Missed:  map[string]int64{metrics.WatchListNoBookmark: 3, metrics.WatchListEnded: 0},
		Refused: map[string]int64{metrics.WatchListRejected: 1}, Errors: map[string]int64{metrics.FreshnessForbidden: 0},
		Queued: map[string]int64{metrics.QueuedWaited: 1}}
	if got, want := watchListLine(w), "2 of 6 synced, max "+secs(longest)+", no end bookmark within the bound: no_bookmark 3, refused: rejected 1, queued: waited 1, STUCK"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
