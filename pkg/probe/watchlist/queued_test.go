package watchlist

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// testUnreachable: an apiserver pinned at an address that accepts TCP
// connections and never answers (a TLS handshake that never ends, as a
// black-holed or hung apiserver's): no request reaches a server within the
// bound, so every sync there is unavailable, never a missed end bookmark,
// never stuck, and no WatchList is counted as sent. The load-balanced path
// syncs beside it.
func testUnreachable(t *testing.T, c *localcluster.Cluster) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	held.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn) // held open, never answered
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		held.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range conns {
			conn.Close()
		}
	})
	addr := ln.Addr().String()
	m := metrics.NewProbe(prometheus.NewRegistry())
	const bound = time.Second
	resources := []string{"configmaps"}
	chk, take := newChecker(t, Options{LoadBalanced: c.AdminConfig(), Metrics: m, Config: settings(bound, resources, nil),
		ServerName: "localhost", Retired: judge.RetiredSeries{Keep: true}, Pinned: func() []string { return []string{addr} }})
	// The handshake never ends, so the bound is the only way out there;
	// the load-balanced path runs unbounded.
	chk.bound = func(ctx context.Context, apiserver, _ string, _ bool) (context.Context, context.CancelFunc) {
		if apiserver == addr {
			return context.WithTimeout(ctx, bound)
		}
		return context.WithCancel(ctx)
	}
	const rounds = 3
	for range rounds {
		chk.Round(context.Background())
		ev := take()
		e := of(t, ev, "configmaps", addr)
		if e.Verdict != (Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}) || e.Stuck || e.Baseline.Sent || e.Sync.Sent {
			t.Errorf("configmaps on the unreachable %s: %+v stuck %v (baseline %+v, sync %+v), want unavailable, nothing sent, not stuck", addr, e.Verdict, e.Stuck, e.Baseline, e.Sync)
		}
		if lb := of(t, ev, "configmaps", ""); lb.Verdict.Outcome != Synced {
			t.Errorf("configmaps on the load balancer: %+v, want synced", lb.Verdict)
		}
	}
	got := read(t, m, "configmaps", addr)
	var missed float64
	for _, n := range got.missed {
		missed += n
	}
	if got.errors[metrics.FreshnessUnavailable] != rounds || got.syncs != 0 || missed != 0 || got.stuck != 0 {
		t.Errorf("configmaps on the unreachable %s: %+v, want %d unavailable, no sync sent, no miss, not stuck", addr, got, rounds)
	}
}

// The queued test's tiny priority level, the group its FlowSchema sends
// there, and the users that may read what the checks read.
const (
	tinyLevel = "watchprobe-test-wl-tiny"
	saturated = "watchprobe-test:wl-saturated"
)

var readers = localcluster.Readers{Group: "watchprobe-test:wl-readers", Namespace: "wl",
	Resources: []string{"pods", "configmaps", "podtemplates"}, Verbs: []string{"list", "watch"}}

// testQueued: the exporter's priority level saturated while every watch
// cache is fresh, as when other clients of the exporter's FlowSchema hold
// it. The checker's user and a flooder's share the level; the flooder's
// consistent LISTs of podtemplates, whose etcd link is stalled, hold every
// seat until the test lets them go. First the seats stay held: each sync's
// baseline waits in the queue until the bound, and the sync is queued, its
// WatchList not sent. Then the seats are let go once the baseline has
// waited in the queue longer than queued_after: the baseline is answered,
// the WatchList sent and synced, and the sync is queued all the same (its
// time holds the queue's). Nothing is missed, timed or stuck; with the
// level free again, every sync is synced.
func testQueued(t *testing.T, c *localcluster.Cluster) {
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(c.AdminConfig())
	templates := c.EtcdOverride("/podtemplates")
	localcluster.TinyPriorityLevel(t, client, tinyLevel, saturated)
	exporterRC, flooderRC := readers.Config(t, c, "wl-queued", saturated), readers.Config(t, c, "wl-flooder", saturated)
	flooder, err := rest.HTTPClientFor(flooderRC)
	if err != nil {
		t.Fatal(err)
	}
	exporterClient, err := rest.HTTPClientFor(exporterRC)
	if err != nil {
		t.Fatal(err)
	}
	seats := c.InPriorityLevel(t, exporterClient, "/api/v1/namespaces/wl/configmaps?limit=1", tinyLevel)
	templates.Stall()
	defer templates.Resume()
	flood := c.NewFlood(t, flooder, "/api/v1/namespaces/wl/podtemplates?timeout=1m", tinyLevel, seats)

	m := metrics.NewProbe(prometheus.NewRegistry())
	// nothingJudged: resource's series counted queued (by reason) and
	// sent WatchLists as given, and nothing timed, missed, failed or stuck.
	nothingJudged := func(resource string, queued map[string]float64, sent float64) {
		t.Helper()
		got := read(t, m, resource, "")
		s := m.ForWatchList("p", resource, "")
		for _, r := range metrics.QueuedReasons {
			if n := testutilCounter(s, metrics.WatchListQueued, r); n != queued[r] {
				t.Errorf("%s: queued %s %v, want %v", resource, r, n, queued[r])
			}
		}
		var missed, errs float64
		for _, n := range got.missed {
			missed += n
		}
		for _, n := range got.errors {
			errs += n
		}
		if got.syncs != sent || got.synced != 0 || missed != 0 || errs != 0 || got.stuck != 0 {
			t.Errorf("%s: %+v, want %v WatchLists sent, nothing timed, missed, failed or stuck", resource, got, sent)
		}
	}

	t.Run("held until the bound", func(t *testing.T) {
		const bound = 2 * time.Second
		cfg := settings(bound, []string{"configmaps", "pods"}, nil)
		cfg.QueuedAfter = model.Duration(300 * time.Millisecond)
		// A report's series (Keep): syncs from the first round; the bound
		// as configured: the seats are held throughout, so no baseline can
		// be admitted before it.
		chk, take := newChecker(t, Options{LoadBalanced: exporterRC, Metrics: m, Config: cfg, Retired: judge.RetiredSeries{Keep: true}})
		flood.Hold(t)
		const rounds = 3
		for range rounds {
			chk.Round(ctx)
			ev := take()
			if len(ev) != 2 {
				t.Fatalf("%d syncs, want 2", len(ev))
			}
			for _, e := range ev {
				if e.Verdict != (Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}) || e.Stuck || !e.Baseline.Sent || e.Baseline.Answered || e.Sync.Sent {
					t.Errorf("%s: %+v stuck %v (baseline %+v, sync %+v), want queued waited, the baseline sent and unanswered, no WatchList sent",
						e.Resource, e.Verdict, e.Stuck, e.Baseline, e.Sync)
				}
			}
		}
		for _, r := range []string{"configmaps", "pods"} {
			nothingJudged(r, map[string]float64{metrics.QueuedWaited: rounds}, 0)
		}
		flood.Ebb()
	})

	t.Run("admitted after queued_after", func(t *testing.T) {
		m = metrics.NewProbe(prometheus.NewRegistry())
		const queuedAfter = 500 * time.Millisecond
		cfg := settings(5*time.Second, []string{"configmaps"}, nil)
		cfg.QueuedAfter = model.Duration(queuedAfter)
		one, take := newChecker(t, Options{LoadBalanced: exporterRC, Metrics: m, Config: cfg, Retired: judge.RetiredSeries{Keep: true}})
		unbounded(one)
		const rounds = 3
		for range rounds {
			// The sync's baseline held in the queue longer than
			// queued_after.
			flood.Queue(t, queuedAfter, func() { one.Round(ctx) })
			ev := take()
			if len(ev) != 1 {
				t.Fatalf("%d syncs, want 1", len(ev))
			}
			e := ev[0]
			if e.Verdict != (Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}) || e.Stuck || !e.Baseline.Answered || e.Baseline.Took < queuedAfter ||
				!e.Sync.Sent || !e.Sync.Bookmark {
				t.Errorf("%+v stuck %v (baseline %+v, sync %+v), want queued waited: the baseline answered after %s or more, the WatchList synced",
					e.Verdict, e.Stuck, e.Baseline, e.Sync, queuedAfter)
			}
		}
		nothingJudged("configmaps", map[string]float64{metrics.QueuedWaited: rounds}, rounds)
	})

	// The caches were fresh all along.
	templates.Resume()
	cfg := settings(5*time.Second, []string{"configmaps", "pods"}, nil)
	free, take := newChecker(t, Options{LoadBalanced: exporterRC, Metrics: metrics.NewProbe(prometheus.NewRegistry()), Config: cfg, Retired: judge.RetiredSeries{Keep: true}})
	unbounded(free)
	free.Round(ctx)
	for _, e := range take() {
		if e.Verdict.Outcome != Synced || e.Stuck {
			t.Errorf("%s with the level free: %+v stuck %v, want synced", e.Resource, e.Verdict, e.Stuck)
		}
	}
}
