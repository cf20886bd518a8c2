package probe

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
)

// The freshness checks' stale reads hear every marker delete: the
// probe's, and the cleaner's after the probe's failed. The fault proxy
// refuses some deletes with a 503 (never committed) and loses the
// response of others (committed, so the cleaner's retry finds the marker
// gone: a 404); the cleaner finishes them all. Listed only after every
// marker is gone, and judged past lost_after, no marker is missing on the
// load balancer or the pinned apiserver: the checks heard each delete,
// the cleaner's included, once per marker created.
func TestStaleReadsHearEveryDelete(t *testing.T) {
	const ns, refused, lost = "deletes-heard", 3, 2
	client := inNamespace(t, ns)
	proxy := newProxy(t, cluster)
	proxy.Refuse(refused, requestIn(ns, "delete"), http.StatusServiceUnavailable)
	proxy.LoseResponse(lost, requestIn(ns, "delete"))

	cfg := fastConfig("heard", ns)
	cfg.Paths = []string{metrics.PathWatch}
	var offset atomic.Int64 // the checks judge past lost_after
	f := config.DefaultFreshnessConfig()
	f.Resources = nil
	reg := prometheus.NewRegistry()
	fm := metrics.NewProbe(reg)
	admin := cluster.AdminConfig()
	host, err := url.Parse(admin.Host)
	if err != nil {
		t.Fatal(err)
	}
	pinned := host.Host
	chk, err := freshness.New(freshness.Options{
		Probe: cfg.Name, Namespace: ns, Config: f, LoadBalanced: admin,
		Pinned:     func() []freshness.Target { return []freshness.Target{{Name: pinned, Config: admin}} },
		MarkerKind: config.KindConfigMap, MarkerSelector: markerSelector(cfg.Name, "r1"),
		LostAfter: cfg.LostAfterOrDefault(), Retain: cfg.RetentionOrDefault(),
		Metrics: fm, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	created, deleted := map[string]int{}, map[string]int{}
	opts := Options{Config: proxy.Config(admin), Replica: "r1", OrphanAge: time.Hour,
		Acknowledged: func(name string, rv uint64, del bool, at time.Time) {
			mu.Lock()
			if del {
				deleted[name]++
			} else {
				created[name] = 1
			}
			mu.Unlock()
			chk.Acknowledged(name, rv, del, at)
		}}
	tp := startProbeWith(t, cfg, opts)
	localcluster.Eventually(t, 60*time.Second, "the deletes refused and lost", func() bool {
		return proxy.Applied(faultproxy.Refuse) == refused && proxy.Applied(faultproxy.LoseResponse) == lost
	})
	localcluster.Eventually(t, 60*time.Second, "the cleaner done", func() bool {
		return tp.value(metrics.MarkersPendingDeletion, cfg.Name) == 0
	})
	failed := tp.value(metrics.WriteErrors, cfg.Name, metrics.VerbDelete, "503") + tp.value(metrics.WriteErrors, cfg.Name, metrics.VerbDelete, "0")
	if failed == 0 {
		t.Fatal("no cycle's delete failed: the cleaner had nothing to finish")
	}
	tp.stopLeavingNoMarkers(t, client)

	mu.Lock()
	for name := range created {
		if deleted[name] != 1 {
			t.Errorf("%s heard deleted %d times, want once", name, deleted[name])
		}
	}
	// Every successful delete of a cycle is timed; the others are the
	// cleaner's, one per cycle whose delete failed, or the final sweep's.
	cleaners := float64(len(deleted)) - float64(tp.acked(t, metrics.VerbDelete))
	t.Logf("%d markers created, %d cycle deletes failed, %v deletes heard from the cleaner", len(created), int(failed), cleaners)
	if cleaners < failed {
		t.Errorf("%v deletes heard from the cleaner, fewer than the %v cycles whose delete failed", cleaners, failed)
	}
	mu.Unlock()

	offset.Store(int64(cfg.LostAfterOrDefault() + time.Minute))
	ctx := context.Background()
	// The first round makes the series of each target, the second reads.
	chk.Round(ctx)
	chk.Round(ctx)
	for _, apiserver := range []string{"", pinned} {
		s := fm.ForReads(cfg.Name, apiserver)
		if got := testutil.ToFloat64(s.Counter(metrics.ListReads)); got != 1 {
			t.Errorf("%q: %v reads, want 1", apiserver, got)
		}
		for _, k := range metrics.StaleKinds {
			if got := testutil.ToFloat64(s.Counter(metrics.ListStaleReads, k)); got != 0 {
				t.Errorf("%q: %v stale reads of kind %s, want 0", apiserver, got, k)
			}
		}
	}
}
