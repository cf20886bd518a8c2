package check

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

// A probe's WatchList syncs in the report: per resource and apiserver the
// counts by outcome and reason, the longest sync and whether it was stuck;
// a stuck resource, a failure and syncs all queued each fail the probe
// with a problem that names them; a miss that left the resource not stuck
// (an informer without a bound may have synced), a refusal (informers list
// instead), a queued sync beside judged ones and an apiserver's retirement
// do not. The JSON form matches the schema, strictly.
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
	waited := watchlist.Verdict{Outcome: watchlist.Queued, Reason: metrics.QueuedWaited}
	// leases: one miss among syncs, never stuck; one queued.
	st.observe(watchlist.Event{Resource: "leases.coordination.k8s.io", Verdict: synced, Sync: watchlist.Sync{Bookmark: true, Took: time.Millisecond}})
	st.observe(watchlist.Event{Resource: "leases.coordination.k8s.io", Verdict: noBookmark, Sync: watchlist.Sync{Took: 5 * time.Second}})
	st.observe(watchlist.Event{Resource: "leases.coordination.k8s.io", Verdict: waited})
	st.observe(watchlist.Event{Resource: "leases.coordination.k8s.io", Verdict: synced, Sync: watchlist.Sync{Bookmark: true, Took: time.Millisecond}})
	// endpointslices: every sync queued.
	st.observe(watchlist.Event{Resource: "endpointslices.discovery.k8s.io", Verdict: waited})
	st.observe(watchlist.Event{Resource: "endpointslices.discovery.k8s.io", Verdict: watchlist.Verdict{Outcome: watchlist.Queued, Reason: metrics.QueuedRejected}})
	// An apiserver retired: not a sync.
	st.observe(watchlist.Event{Resource: "configmaps", APIServer: "10.0.0.9:6443", Retired: true})
	for i := range 3 {
		st.observe(watchlist.Event{Resource: "configmaps", Verdict: synced, Sync: watchlist.Sync{Bookmark: true, Took: time.Duration(i+1) * time.Millisecond}})
		st.observe(watchlist.Event{Resource: "configmaps", APIServer: "10.0.0.1:6443", Verdict: rejected})
		st.observe(watchlist.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Verdict: noBookmark, Sync: watchlist.Sync{Took: 5 * time.Second}, Stuck: i > 1})
	}
	st.observe(watchlist.Event{Resource: "pods", APIServer: "10.0.0.1:6443", Verdict: watchlist.Verdict{Outcome: watchlist.Failed, Reason: metrics.FreshnessForbidden}})

	r := f.report()
	got := asJSON(t, r)
	pr := got.Probes[0]
	if len(pr.WatchList) != 5 {
		t.Fatalf("watch_list %+v, want five resources on apiservers", pr.WatchList)
	}
	lb, queuedAll, leases, refused, pods := pr.WatchList[0], pr.WatchList[1], pr.WatchList[2], pr.WatchList[3], pr.WatchList[4] // the load balancer first
	if lb.Resource != "configmaps" || lb.APIServer != "" || lb.Syncs != 3 || lb.Synced != 3 || lb.MaxSeconds == nil || *lb.MaxSeconds != 0.003 || lb.Stuck || !lb.OK {
		t.Errorf("configmaps on the load balancer %+v", lb)
	}
	if refused.Resource != "configmaps" || refused.Syncs != 3 || refused.Refused[metrics.WatchListRejected] != 3 || refused.MaxSeconds != nil || !refused.OK {
		t.Errorf("configmaps refused %+v", refused)
	}
	if pods.Syncs != 4 || pods.Missed[metrics.WatchListNoBookmark] != 3 || pods.Errors[metrics.FreshnessForbidden] != 1 || !pods.Stuck || pods.OK {
		t.Errorf("pods %+v", pods)
	}
	if leases.Syncs != 4 || leases.Synced != 2 || leases.Missed[metrics.WatchListNoBookmark] != 1 || leases.Queued[metrics.QueuedWaited] != 1 ||
		leases.Stuck || !leases.OK || len(leases.Problems) != 0 {
		t.Errorf("leases, one miss and one queued sync, not stuck: %+v, want counted and ok", leases)
	}
	if queuedAll.Syncs != 2 || queuedAll.Queued[metrics.QueuedWaited] != 1 || queuedAll.Queued[metrics.QueuedRejected] != 1 || queuedAll.OK {
		t.Errorf("endpointslices, every sync queued: %+v, want counted and a problem", queuedAll)
	}
	want := []string{
		"probe configmaps: watch_list: all 2 WatchList syncs of endpointslices.discovery.k8s.io on the load balancer were held in the apiserver's priority and fairness queue (waited 1, rejected 1): the exporter's priority level is saturated, the syncs not measured",
		"probe configmaps: watch_list: WatchList syncs of pods on 10.0.0.1:6443 are stuck: most of a window's did not reach their end bookmark within the bound (3 of 4 missed: no_bookmark 3)",
		"probe configmaps: watch_list: 1 of 4 WatchList syncs of pods on 10.0.0.1:6443 failed (forbidden 1)",
	}
	if got.OK || !slices.Equal(got.Problems, want) || r.Verdict() != Fails {
		t.Errorf("ok %v, problems %q, want %q", got.OK, got.Problems, want)
	}
}

// The report notes, failing nothing, a release outside the tested range
// and a WatchList the server refused or, by its release's default, may
// refuse; a tested release that serves WatchList gets no note.
func TestReportNotesServerVersion(t *testing.T) {
	rejected := watchlist.Verdict{Outcome: watchlist.Refused, Reason: metrics.WatchListRejected}
	for _, tc := range []struct {
		name    string
		server  kube.ServerVersion
		refused bool
		want    []string // each note's start
	}{
		{"1.37", kube.ServerVersion{GitVersion: "v1.37.2", Major: 1, Minor: 37}, false, nil},
		{"1.33 refusing", kube.ServerVersion{GitVersion: "v1.33.13", Major: 1, Minor: 33}, true, []string{"WatchList refused: kube-apiserver v1.33.13 refuses"}},
		{"1.33 with the gate on", kube.ServerVersion{GitVersion: "v1.33.13", Major: 1, Minor: 33}, false, []string{"WatchList off by default: kube-apiserver v1.33.13 serves"}},
		{"newer", kube.ServerVersion{GitVersion: "v1.40.1", Major: 1, Minor: kube.NewestTestedMinor + 3}, false, []string{"untested version: kube-apiserver v1.40.1 is newer"}},
		{"unknown, refusing", kube.ServerVersion{}, true, []string{"WatchList refused: this kube-apiserver refuses"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newReportFixture()
			f.c.server = tc.server
			cfg := reportConfig(metrics.PathWatch)
			cfg.WatchList.Resources = []string{"configmaps"}
			tl := f.probe(cfg)
			deliver(tl, path(metrics.PathWatch, ""), 3)
			cycles(tl, true, true, true)
			st := newSyncTally()
			f.c.syncs[cfg.Name] = st
			if tc.refused {
				st.observe(watchlist.Event{Resource: "configmaps", Verdict: rejected})
			}
			got := asJSON(t, f.report())
			if !got.OK || got.ServerVersion != tc.server.GitVersion || len(got.Notes) != len(tc.want) {
				t.Fatalf("ok %v, server_version %q, notes %q; want ok, %q, notes starting %q", got.OK, got.ServerVersion, got.Notes, tc.server.GitVersion, tc.want)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got.Notes[i], w) {
					t.Errorf("note %q, want it to start %q", got.Notes[i], w)
				}
			}
		})
	}
}
