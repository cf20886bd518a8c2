package check

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

// A probe's WatchList syncs in the report: per resource and apiserver the
// counts by outcome and reason, the longest sync and whether it was stuck;
// a missed end bookmark and a failure each fail the probe with a problem
// that names them, a refusal (informers list instead) does not. The JSON
// form matches the schema, strictly.
func TestReportWatchList(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathWatch)
	cfg.WatchList.Resources = []string{"pods", "configmaps"}
	tl := f.probe(cfg)
	deliver(tl, path(metrics.PathWatch, ""), 3)
	cycles(tl, true, true, true)
	st := newSyncTally()
	f.c.syncs[cfg.Name] = st
	synced := watchlist.Verdict{Outcome: watchlist.Synced}
	noBookmark := watchlist.Verdict{Outcome: watchlist.Missed, Reason: metrics.WatchListNoBookmark, Blocks: true}
	rejected := watchlist.Verdict{Outcome: watchlist.Refused, Reason: metrics.WatchListRejected}
	for i := range 3 {
		st.observe(watchlist.Event{Resource: "configmaps", Verdict: synced, Sync: watchlist.Sync{Bookmark: true, Took: time.Duration(i+1) * time.Millisecond}})
		st.observe(watchlist.Event{Resource: "configmaps", APIServer: "10.0.0.1:6443", Verdict: rejected})
		st.observe(watchlist.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Verdict: noBookmark, Sync: watchlist.Sync{Took: 5 * time.Second}, Stuck: i > 1})
	}
	st.observe(watchlist.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Verdict: watchlist.Verdict{Outcome: watchlist.Failed, Reason: metrics.FreshnessForbidden}})

	r := f.report()
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got := validateReport(t, string(out))
	pr := got.Probes[0]
	if len(pr.WatchList) != 3 {
		t.Fatalf("watch_list %+v, want three resources on apiservers", pr.WatchList)
	}
	lb, refused, pods := pr.WatchList[0], pr.WatchList[1], pr.WatchList[2] // the load balancer first
	if lb.Resource != "configmaps" || lb.APIServer != "" || lb.Syncs != 3 || lb.Synced != 3 || lb.MaxSeconds == nil || *lb.MaxSeconds != 0.003 || lb.Stuck || !lb.OK {
		t.Errorf("configmaps on the load balancer %+v", lb)
	}
	if refused.Resource != "configmaps" || refused.Syncs != 3 || refused.Refused[metrics.WatchListRejected] != 3 || refused.MaxSeconds != nil || !refused.OK {
		t.Errorf("configmaps refused %+v", refused)
	}
	if pods.Syncs != 4 || pods.Missed[metrics.WatchListNoBookmark] != 3 || pods.Errors[metrics.FreshnessForbidden] != 1 || !pods.Stuck || pods.OK {
		t.Errorf("pods %+v", pods)
	}
	want := []string{
		"probe configmaps: watch_list: 3 of 4 WatchList syncs of pods on 10.0.0.1:6443 missed their end bookmark (no_bookmark 3, most of a window's: stuck)",
		"probe configmaps: watch_list: 1 of 4 WatchList syncs of pods on 10.0.0.1:6443 failed (forbidden 1)",
	}
	if got.OK || !slices.Equal(got.Problems, want) || r.Verdict() != Fails {
		t.Errorf("ok %v, problems %q, want %q", got.OK, got.Problems, want)
	}
}
