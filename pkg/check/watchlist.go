package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

// WatchListReport is what one resource's WatchList sync checks through one
// apiserver found (pkg/probe/watchlist).
type WatchListReport struct {
	Resource string `json:"resource"`
	// APIServer is "" for the load-balanced path.
	APIServer string `json:"apiserver"`
	// Syncs are the sync checks judged, queued ones included.
	Syncs  int64 `json:"syncs"`
	Synced int64 `json:"synced"`
	// Missed, Refused, Errors and Queued count by reason
	// (metrics.WatchListMissedReasons, metrics.WatchListRefusedReasons,
	// metrics.FreshnessErrorReasons, metrics.QueuedReasons), every reason
	// present.
	Missed  map[string]int64 `json:"missed"`
	Refused map[string]int64 `json:"refused"`
	Errors  map[string]int64 `json:"errors"`
	Queued  map[string]int64 `json:"queued"`
	// MaxSeconds is the longest sync to its end bookmark, nil if none
	// reached it.
	MaxSeconds *float64 `json:"max_seconds"`
	// Stuck: at some sync, most of the window's syncs had blocked.
	Stuck    bool     `json:"stuck"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
}

// syncTally counts a probe's WatchList syncs as they come.
type syncTally struct {
	mu        sync.Mutex
	resources map[[2]string]*WatchListReport
}

func newSyncTally() *syncTally {
	return &syncTally{resources: map[[2]string]*WatchListReport{}}
}

// observer is the Checker's Observe: nil for a probe without watch_list.
func (t *syncTally) observer() func(watchlist.Event) {
	if t == nil {
		return nil
	}
	return t.observe
}

// observe counts one judged sync; an apiserver's retirement counts none.
func (t *syncTally) observe(e watchlist.Event) {
	if e.Retired {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := [2]string{e.Resource, e.APIServer}
	r := t.resources[k]
	if r == nil {
		r = &WatchListReport{Resource: e.Resource, APIServer: e.APIServer, Missed: zeros(metrics.WatchListMissedReasons),
			Refused: zeros(metrics.WatchListRefusedReasons), Errors: zeros(metrics.FreshnessErrorReasons), Queued: zeros(metrics.QueuedReasons)}
		t.resources[k] = r
	}
	r.Syncs++
	switch e.Verdict.Outcome {
	case watchlist.Synced:
		r.Synced++
		if s := e.Sync.Took.Seconds(); r.MaxSeconds == nil || s > *r.MaxSeconds {
			r.MaxSeconds = &s
		}
	case watchlist.Missed:
		r.Missed[e.Verdict.Reason]++
	case watchlist.Refused:
		r.Refused[e.Verdict.Reason]++
	case watchlist.Failed:
		r.Errors[e.Verdict.Reason]++
	case watchlist.Queued:
		r.Queued[e.Verdict.Reason]++
	}
	r.Stuck = r.Stuck || e.Stuck
}

// addTo judges the tally into pr, as the alert judges the series: a
// resource stuck (most of a window's syncs without their end bookmark
// within the bound) is a problem of the probe, a miss alone is not (an
// informer, which has no bound, may still have synced: the report counts
// it); a failed sync is a problem, and so is every sync held in the
// exporter's queue (nothing measured); a refused one is not (informers
// list instead).
func (t *syncTally) addTo(pr *ProbeReport) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range byTarget(t.resources) {
		r := *t.resources[k]
		r.Missed, r.Refused, r.Errors, r.Queued = maps.Clone(r.Missed), maps.Clone(r.Refused), maps.Clone(r.Errors), maps.Clone(r.Queued)
		r.Problems = []string{}
		where := cmp.Or(r.APIServer, "the load balancer")
		if r.Stuck {
			r.Problems = append(r.Problems, fmt.Sprintf("watch_list: WatchList syncs of %s on %s are stuck: most of a window's did not reach their end bookmark within the bound (%d of %d missed: %s)",
				r.Resource, where, sum(r.Missed), r.Syncs, describeCounts(r.Missed, metrics.WatchListMissedReasons)))
		}
		if n := sum(r.Errors); n > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("watch_list: %d of %d WatchList syncs of %s on %s failed (%s)",
				n, r.Syncs, r.Resource, where, describeCounts(r.Errors, metrics.FreshnessErrorReasons)))
		}
		if n := sum(r.Queued); n > 0 && n == r.Syncs {
			r.Problems = append(r.Problems, fmt.Sprintf("watch_list: all %d WatchList syncs of %s on %s were held in the apiserver's priority and fairness queue (%s): the exporter's priority level is saturated, the syncs not measured",
				n, r.Resource, where, describeCounts(r.Queued, metrics.QueuedReasons)))
		}
		r.OK = pr.addProblems(r.Problems)
		pr.WatchList = append(pr.WatchList, r)
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// byTarget are the keys (resource, apiserver) of m, the load balancer's
// first, then by apiserver and resource.
func byTarget[V any](m map[[2]string]V) [][2]string {
	return slices.SortedFunc(maps.Keys(m), func(a, b [2]string) int { return cmp.Or(cmp.Compare(a[1], b[1]), cmp.Compare(a[0], b[0])) })
}
