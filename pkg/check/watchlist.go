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
	Syncs     int64  `json:"syncs"`
	Synced    int64  `json:"synced"`
	// Missed, Refused and Errors count by reason
	// (metrics.WatchListMissedReasons, metrics.WatchListRefusedReasons,
	// metrics.FreshnessErrorReasons), every reason present.
	Missed  map[string]int64 `json:"missed"`
	Refused map[string]int64 `json:"refused"`
	Errors  map[string]int64 `json:"errors"`
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

// observe counts one judged sync.
func (t *syncTally) observe(e watchlist.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := [2]string{e.Resource, e.APIServer}
	r := t.resources[k]
	if r == nil {
		r = &WatchListReport{Resource: e.Resource, APIServer: e.APIServer, Missed: zeros(metrics.WatchListMissedReasons),
			Refused: zeros(metrics.WatchListRefusedReasons), Errors: zeros(metrics.FreshnessErrorReasons)}
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
	}
	r.Stuck = r.Stuck || e.Stuck
}

// addTo judges the tally into pr: a sync that missed its end bookmark (an
// informer would not have synced) or failed is a problem of the probe; a
// refused one is not (informers list instead), the report counts it.
func (t *syncTally) addTo(pr *ProbeReport) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range byTarget(t.resources) {
		r := *t.resources[k]
		r.Missed, r.Refused, r.Errors = maps.Clone(r.Missed), maps.Clone(r.Refused), maps.Clone(r.Errors)
		r.OK, r.Problems = true, []string{}
		where := cmp.Or(r.APIServer, "the load balancer")
		if n := sum(r.Missed); n > 0 {
			stuck := ""
			if r.Stuck {
				stuck = ", most of a window's: stuck"
			}
			r.Problems = append(r.Problems, fmt.Sprintf("watch_list: %d of %d WatchList syncs of %s on %s missed their end bookmark (%s%s)",
				n, r.Syncs, r.Resource, where, describeCounts(r.Missed, metrics.WatchListMissedReasons), stuck))
		}
		if n := sum(r.Errors); n > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("watch_list: %d of %d WatchList syncs of %s on %s failed (%s)",
				n, r.Syncs, r.Resource, where, describeCounts(r.Errors, metrics.FreshnessErrorReasons)))
		}
		if len(r.Problems) > 0 {
			r.OK = false
			pr.OK = false
			pr.Problems = append(pr.Problems, r.Problems...)
		}
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
