package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
)

// FreshnessReport is what one resource's freshness checks through one
// apiserver found (pkg/probe/freshness).
type FreshnessReport struct {
	Resource string `json:"resource"`
	// APIServer is "" for the load-balanced path.
	APIServer string `json:"apiserver"`
	Checks    int64  `json:"checks"`
	Fresh     int64  `json:"fresh"`
	// Fallbacks, Errors and Queued count by reason
	// (metrics.FallbackReasons, metrics.FreshnessErrorReasons,
	// metrics.QueuedReasons), every reason present. Queued checks were
	// held in the apiserver's queue too long to judge: the exporter's
	// priority level, not the cache.
	Fallbacks map[string]int64 `json:"fallbacks"`
	Errors    map[string]int64 `json:"errors"`
	Queued    map[string]int64 `json:"queued"`
	// MaxSeconds is the longest wait of a judged check (its time over the
	// baseline's), nil if none.
	MaxSeconds *float64 `json:"max_seconds"`
	// Uncached counts the rounds in which the resource was not checked,
	// the apiserver serving it without a watch cache, by reason
	// (metrics.UncachedReasons), every reason present: not a problem,
	// but no figure of a cache either.
	Uncached map[string]int64 `json:"uncached"`
	// Stuck: at some check, most of the window's checks had fallen back.
	Stuck    bool     `json:"stuck"`
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
}

// StaleReadsReport is what the resourceVersion=0 reads of the markers on
// one apiserver found.
type StaleReadsReport struct {
	APIServer string `json:"apiserver"`
	Reads     int64  `json:"reads"`
	// Kinds count by kind (metrics.StaleKinds), every kind present.
	Kinds map[string]int64 `json:"kinds"`
}

// freshTally counts a probe's freshness events as they come.
type freshTally struct {
	mu        sync.Mutex
	resources map[[2]string]*FreshnessReport
	reads     map[string]*StaleReadsReport
}

func newFreshTally() *freshTally {
	return &freshTally{resources: map[[2]string]*FreshnessReport{}, reads: map[string]*StaleReadsReport{}}
}

// observe is the Checker's Observe.
func (t *freshTally) observe(e freshness.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.Read != nil {
		r := t.reads[e.APIServer]
		if r == nil {
			r = &StaleReadsReport{APIServer: e.APIServer, Kinds: zeros(metrics.StaleKinds)}
			t.reads[e.APIServer] = r
		}
		r.Reads++
		for _, k := range e.Read.Kinds {
			r.Kinds[k]++
		}
		return
	}
	k := [2]string{e.Resource, e.APIServer}
	r := t.resources[k]
	if r == nil {
		r = &FreshnessReport{Resource: e.Resource, APIServer: e.APIServer,
			Fallbacks: zeros(metrics.FallbackReasons), Errors: zeros(metrics.FreshnessErrorReasons), Queued: zeros(metrics.QueuedReasons),
			Uncached: zeros(metrics.UncachedReasons)}
		t.resources[k] = r
	}
	if e.Verdict.Outcome == freshness.Uncached {
		r.Uncached[e.Verdict.Reason]++
		return
	}
	r.Checks++
	switch e.Verdict.Outcome {
	case freshness.Fresh:
		r.Fresh++
	case freshness.FellBack:
		r.Fallbacks[e.Verdict.Reason]++
	case freshness.Failed:
		r.Errors[e.Verdict.Reason]++
	case freshness.Queued:
		r.Queued[e.Verdict.Reason]++
	}
	if e.Verdict.Timed {
		s := e.Verdict.Wait.Seconds()
		if r.MaxSeconds == nil || s > *r.MaxSeconds {
			r.MaxSeconds = &s
		}
	}
	r.Stuck = r.Stuck || e.Stuck
}

// addTo judges the tally into pr: a stuck cache, a failing check or a
// stale read is a problem of the probe.
func (t *freshTally) addTo(pr *ProbeReport) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range byTarget(t.resources) {
		r := *t.resources[k]
		r.Fallbacks, r.Errors, r.Queued, r.Uncached = maps.Clone(r.Fallbacks), maps.Clone(r.Errors), maps.Clone(r.Queued), maps.Clone(r.Uncached)
		r.Problems = []string{}
		where := cmp.Or(r.APIServer, "the load balancer")
		if r.Stuck {
			r.Problems = append(r.Problems, fmt.Sprintf("freshness: %s's watch cache on %s is stuck: most of its consistent LISTs fell back (%s)", r.Resource, where, describeCounts(r.Fallbacks, metrics.FallbackReasons)))
		}
		if errs := sum(r.Errors); errs > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("freshness: %d of %d LISTs of %s on %s failed (%s)", errs, r.Checks, r.Resource, where, describeCounts(r.Errors, metrics.FreshnessErrorReasons)))
		}
		if queued := sum(r.Queued); queued > 0 && queued == r.Checks {
			// Nothing measured: not the cache's fault, and not a pass.
			r.Problems = append(r.Problems, fmt.Sprintf("freshness: all %d checks of %s on %s were held in the apiserver's priority and fairness queue (%s): the exporter's priority level is saturated, its cache not measured", queued, r.Resource, where, describeCounts(r.Queued, metrics.QueuedReasons)))
		}
		r.OK = pr.addProblems(r.Problems)
		pr.Freshness = append(pr.Freshness, r)
	}
	for _, a := range slices.Sorted(maps.Keys(t.reads)) {
		r := *t.reads[a]
		r.Kinds = maps.Clone(r.Kinds)
		if sum(r.Kinds) > 0 {
			pr.OK = false
			pr.Problems = append(pr.Problems, fmt.Sprintf("stale reads on %s: %s", cmp.Or(a, "the load balancer"), describeCounts(r.Kinds, metrics.StaleKinds)))
		}
		pr.StaleReads = append(pr.StaleReads, r)
	}
}

// describeCounts lists the non-zero counts in order, "kind n".
func describeCounts(m map[string]int64, order []string) string {
	var out string
	for _, k := range order {
		if m[k] == 0 {
			continue
		}
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%s %d", k, m[k])
	}
	return out
}
