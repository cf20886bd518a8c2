package probe

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/nativehist"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/internal/tcpproxy"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// The etcd path against a real etcd that requires client certificates, as
// in a real cluster, reached through a TCP proxy so that a test can cut its
// connection alone while the apiserver's own connection stays up.

var allPaths = []string{metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd}

func etcdConfig(c *localcluster.Cluster, endpoint string) config.EtcdConfig {
	cert, key, ca := c.EtcdClientFiles()
	cfg := config.DefaultConfig().Etcd
	cfg.Endpoints = []string{endpoint}
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = cert, key, ca
	return cfg
}

// p50 of a path's latency over every event type, from native buckets.
func p50(ps exposedPath) time.Duration {
	var hs []*dto.Histogram
	for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		hs = append(hs, ps.histogram(metrics.EventLatency, ev))
	}
	return time.Duration(nativehist.Quantile(0.5, hs...) * float64(time.Second))
}

func TestEtcdPath(t *testing.T) {
	t.Parallel() // its own control plane: it overlaps the long tests on the shared one
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{EtcdTLS: true})
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	etcdProxy, err := tcpproxy.New(strings.TrimPrefix(c.EtcdURL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcdProxy.Close() })
	endpoint := "https://" + etcdProxy.Addr()

	// start runs a probe on every path in its own namespace, with sinks
	// besides its metrics and the paths routes names sent their own way.
	start := func(t *testing.T, name string, etcd config.EtcdConfig, sinks []judge.Sink, routes map[string]*rest.Config) *testProbe {
		t.Helper()
		localcluster.CreateNamespacesForTest(t, client, name)
		cfg := fastConfig(name, name)
		cfg.Paths = allPaths
		cfg.Etcd = etcd
		return startProbeWith(t, cfg, Options{Config: admin, Replica: "r1", OrphanAge: time.Hour, Sinks: sinks}, routed(t, routes))
	}

	t.Run("every write on every path, and its apiserver lag", func(t *testing.T) {
		rec := newExactLatencies()
		tp := start(t, "etcd-observed", etcdConfig(c, endpoint), []judge.Sink{rec}, nil)
		tp.settled(t, 25)
		tp.drained(t)
		snap := tp.at()
		for _, path := range allPaths {
			ps := snap.path(path)
			for event, verb := range verbOf {
				if observed, acked := ps.value(metrics.EventsObserved, event), snap.acked(t, verb); observed != float64(acked) {
					t.Errorf("%s %s: observed %g, acknowledged %d", path, event, observed, acked)
				}
			}
			expectAnomalies(t, path, ps, nil)
		}
		if got := tp.success(); got != 1 {
			t.Errorf("probe_success = %g", got)
		}
		tp.stop()
		// Exact medians of the very same writes: the histograms' buckets
		// (10% wide) are coarser than the apiserver's share on loopback.
		// Which path's median is lower is not asserted: each arrival is
		// stamped on its own goroutine, and on a loaded machine scheduling
		// can put the etcd path's behind the apiserver's.
		t.Logf("p50: etcd %s, watch %s, informer %s", rec.p50(metrics.PathEtcd), rec.p50(metrics.PathWatch), rec.p50(metrics.PathInformer))
		compatP50(t, metrics.PathEtcd, "", rec.p50(metrics.PathEtcd))
		// Every write seen on both etcd and an apiserver path has a lag,
		// and it is the difference of the two arrivals.
		etcd := rec.latencies(metrics.PathEtcd)
		for _, path := range []string{metrics.PathWatch, metrics.PathInformer} {
			lags := rec.lags(path)
			expectLags(t, path, rec.latencies(path), etcd, lags)
			if got := tp.path(path).histogram(metrics.APIServerLag).GetSampleCount(); got != uint64(len(lags)) {
				t.Errorf("%s: watchprobe_apiserver_lag_seconds counts %d writes, the probe concluded %d lags", path, got, len(lags))
			}
		}
		assertNoMarkers(t, client, "etcd-observed", "etcd-observed", "")
	})

	t.Run("a delay on the watch stream is the apiserver's share", func(t *testing.T) {
		proxy := newProxy(t, c)
		const delay = 200 * time.Millisecond
		proxy.SetDelay(delay)
		rec := newExactLatencies()
		tp := start(t, "etcd-lag", etcdConfig(c, endpoint), []judge.Sink{rec}, map[string]*rest.Config{metrics.PathWatch: proxy.Config(admin)})
		tp.settled(t, 10)
		tp.stop()
		watch, etcd := rec.latencies(metrics.PathWatch), rec.latencies(metrics.PathEtcd)
		t.Logf("p50: watch (delayed by %s) %s, informer %s, etcd %s", delay, rec.p50(metrics.PathWatch), rec.p50(metrics.PathInformer), rec.p50(metrics.PathEtcd))
		// The proxy holds each event for the delay after the apiserver sent
		// it, so every one arrives at least that long after its write:
		// the watch path's latency carries the delay, and its lag, the
		// difference with the etcd path's arrival, carries it too.
		for w, l := range watch {
			if l < delay {
				t.Errorf("%v arrived on the delayed watch path %s after its send, less than the delay %s", w, l, delay)
			}
		}
		expectLags(t, metrics.PathWatch, watch, etcd, rec.lags(metrics.PathWatch))
		if len(etcd) == 0 {
			t.Fatal("no write timed on the etcd path")
		}
		// The etcd path does not go through the proxy. The delay cannot
		// reach it but by a wrong wiring, which would delay every write.
		if fastest := slices.Min(slices.Collect(maps.Values(etcd))); fastest >= delay {
			t.Errorf("every write took the delay %s or more to reach the etcd path (fastest %s): the delay leaked into it", delay, fastest)
		}
	})

	t.Run("compacted while cut: one expired end, one expired relist", func(t *testing.T) {
		tp := start(t, "etcd-compact", etcdConfig(c, endpoint), nil, nil)
		tp.settled(t, 2)
		ps := tp.path(metrics.PathEtcd)
		etcdProxy.Refuse(true)
		etcdProxy.Cut()
		localcluster.Eventually(t, 30*time.Second, "the cut counted", func() bool { return ps.value(metrics.WatchRestarts, metrics.EndEOF) == 1 })
		time.Sleep(time.Second) // writes go on through the apiserver
		ec, err := c.EtcdClient()
		if err != nil {
			t.Fatal(err)
		}
		defer ec.Close()
		resp, err := ec.Get(ctx, "compact-me")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ec.Compact(ctx, resp.Header.Revision); err != nil {
			t.Fatal(err)
		}
		etcdProxy.Refuse(false)
		localcluster.Eventually(t, 60*time.Second, "relisted and live", func() bool {
			return tp.path(metrics.PathEtcd).relists(metrics.RelistExpired) == 1 && ps.value(metrics.PathUp) == 1
		})
		expectEnds(t, metrics.PathEtcd, ps, map[string]float64{metrics.EndEOF: 1, metrics.EndExpired: 1})
		for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistExpired: 1, metrics.RelistError: 0} {
			if got := tp.path(metrics.PathEtcd).relists(reason); got != want {
				t.Errorf("etcd relists (%s) = %g, want %g", reason, got, want)
			}
		}
		localcluster.Eventually(t, 60*time.Second, "success again", func() bool { return tp.success() == 1 })
		tp.stopLeavingNoMarkers(t, client)
	})

	t.Run("etcd restarted", func(t *testing.T) {
		tp := start(t, "etcd-restart", etcdConfig(c, endpoint), nil, nil)
		tp.settled(t, 2)
		ps := tp.path(metrics.PathEtcd)
		if err := c.StopEtcd(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := c.StartEtcd(ctx); err != nil {
			t.Fatal(err)
		}
		localcluster.Eventually(t, 90*time.Second, "success after the etcd restart", func() bool { return tp.success() == 1 })
		if got := ps.value(metrics.WatchRestarts, metrics.EndEOF) + ps.value(metrics.WatchRestarts, metrics.EndError); got < 1 {
			t.Error("no end counted on the etcd path across an etcd restart")
		}
		if got := ps.value(metrics.EventsDuplicate); got != 0 {
			t.Errorf("%g duplicates on the etcd path", got)
		}
		// etcd down stops the writes too. A write committed just before
		// etcd stopped reaches every path only once etcd is back, seconds
		// after its deadline: late, not lost. Nothing is lost silently.
		tp.resolved(t)
		for _, path := range tp.cfg.Paths {
			if got := tp.path(path).value(metrics.EventsLost, metrics.MissedSilent); got != 0 {
				t.Errorf("%s: %g events lost silently across an etcd restart", path, got)
			}
		}
		tp.stopLeavingNoMarkers(t, client)
	})

	t.Run("a stalled connection is found and ended", func(t *testing.T) {
		tp := start(t, "etcd-stall", etcdConfig(c, endpoint), nil, nil)
		tp.settled(t, 2)
		ps := tp.path(metrics.PathEtcd)
		etcdProxy.Stall()
		// Keepalive pings (10 s, 5 s timeout) find the silent connection.
		localcluster.Eventually(t, 60*time.Second, "the stalled stream ended", func() bool { return ps.value(metrics.WatchRestarts, metrics.EndEOF) >= 1 })
		etcdProxy.Resume()
		localcluster.Eventually(t, 60*time.Second, "live again", func() bool { return ps.value(metrics.PathUp) == 1 })
		localcluster.Eventually(t, 60*time.Second, "success again", func() bool { return tp.success() == 1 })
		// Until the pings find it, a stalled stream looks open: what it held
		// back is missed, then arrives late when the watch resumes.
		if late, missed := ps.value(metrics.EventsLate), ps.missed(); late == 0 || late > missed {
			t.Errorf("late %g, missed %g: the held events must arrive late, each missed first", late, missed)
		}
		tp.stop()
	})

	t.Run("no client certificate: refused with a clear error", func(t *testing.T) {
		etcd := etcdConfig(c, endpoint)
		etcd.CertFile, etcd.KeyFile = "", ""
		etcd.DialTimeout = model.Duration(2 * time.Second)
		tp := start(t, "etcd-nocert", etcd, nil, nil)
		var err error
		localcluster.Eventually(t, 60*time.Second, "the etcd path reports its error", func() bool {
			err = tp.Synced()
			return err != nil && strings.Contains(err.Error(), `path "etcd"`) && strings.Contains(err.Error(), "certificate")
		})
		t.Logf("readiness: %v", err)
		if got := tp.path(metrics.PathEtcd).value(metrics.PathUp); got != 0 {
			t.Errorf("path_up = %g without a client certificate", got)
		}
	})
}

// Values encrypted at rest cannot be read: the etcd path says so, and its
// misses are unavailable, never silent.
func TestEtcdPathEncrypted(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{EncryptConfigMaps: true})
	client := kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns := "etcd-encrypted"
	localcluster.CreateNamespacesForTest(t, client, ns)
	cfg := fastConfig(ns, ns)
	cfg.Paths = allPaths
	cfg.Deadline = model.Duration(time.Second)
	cfg.Etcd = config.DefaultConfig().Etcd
	cfg.Etcd.Endpoints = []string{c.EtcdURL}
	tp := startProbe(t, c.AdminConfig(), cfg, "r1", time.Hour)
	ps := tp.path(metrics.PathEtcd)
	localcluster.Eventually(t, 60*time.Second, "the etcd path reports encryption", func() bool {
		err := tp.Synced()
		return err != nil && strings.Contains(err.Error(), "encrypted at rest")
	})
	localcluster.Eventually(t, 30*time.Second, "misses counted", func() bool { return ps.missed() >= 3 })
	snap := ps.at()
	if got, all := snap.value(metrics.EventsMissed, metrics.MissedUnavailable), snap.missed(); got != all {
		t.Errorf("%g of %g etcd misses are unavailable", got, all)
	}
	for _, path := range config.DefaultPaths {
		expectAnomalies(t, path, tp.path(path), nil)
	}
}

// expectLags checks that every write that arrived both on path and on the
// etcd path has one apiserver lag on path, its arrival there minus its
// arrival on the etcd path, and that no other write has one.
func expectLags(t *testing.T, path string, arrived, etcd, lags map[judge.WriteKey]time.Duration) {
	t.Helper()
	want := 0
	for w, l := range arrived {
		e, ok := etcd[w]
		if !ok {
			continue
		}
		want++
		if got, ok := lags[w]; !ok {
			t.Errorf("%s: %v arrived there and on the etcd path but has no apiserver lag", path, w)
		} else if got != l-e {
			t.Errorf("%s: %v has an apiserver lag of %s, want its arrival there %s minus on the etcd path %s", path, w, got, l, e)
		}
	}
	if len(lags) != want || want == 0 {
		t.Errorf("%s: %d apiserver lags for %d writes that arrived there and on the etcd path", path, len(lags), want)
	}
}

// An apiserver that delivers past the deadline is in the apiserver's
// share, not left out of it: a fault proxy holds the watch streams of the
// apiserver paths (the watch path and a path pinned to the apiserver) for
// the deadline and 6 s more, the etcd path sees every write at once, and
// every write's share on each held path is counted, its value its arrival
// there, at least the hold after its send, minus its arrival on etcd.
func TestAPIServerShareKeepsLateArrivals(t *testing.T) {
	t.Parallel()
	const ns = "share-late"
	localcluster.CreateNamespacesForTest(t, adminClient(t), ns)
	proxy := newProxy(t, cluster)
	cfg := fastConfig("share", ns)
	cfg.Deadline = model.Duration(time.Second)
	cfg.Paths = []string{metrics.PathWatch, metrics.PathEtcd}
	cfg.Etcd = config.DefaultConfig().Etcd
	cfg.Etcd.Endpoints = []string{cluster.EtcdURL}
	addr := strings.TrimPrefix(proxy.URL, "https://")
	cfg.APIServers = config.APIServersConfig{Endpoints: []string{addr}, ServerName: "localhost", RetireAfter: model.Duration(time.Hour), SeriesGrace: model.Duration(2 * time.Minute)}
	hold := time.Duration(cfg.Deadline) + 6*time.Second
	proxy.DelayStreams(hold, func(r faultproxy.Request) bool { return r.Kind == "watch" })
	rec := newExactLatencies()
	tp := startProbeWith(t, cfg, Options{Config: cluster.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{rec}},
		routed(t, through(t, proxy, metrics.PathWatch)))
	localcluster.Eventually(t, 60*time.Second, "paths synced", func() bool { return tp.ready() && tp.pinned.synced() })
	localcluster.Eventually(t, 60*time.Second, "writes acknowledged", func() bool { return tp.acked(t, metrics.VerbCreate) >= 3 })
	tp.drained(t)
	held := map[string]exposedPath{metrics.PathWatch: tp.path(metrics.PathWatch), metrics.PathAPIServer: tp.pinnedPath(addr)}
	for _, ps := range held {
		tp.resolvedOn(t, ps)
	}
	snap := tp.at()
	tp.stop()

	var writes uint64
	for _, verb := range []string{metrics.VerbCreate, metrics.VerbUpdate, metrics.VerbDelete} {
		writes += snap.acked(t, verb)
	}
	etcd := rec.latencies(metrics.PathEtcd)
	if len(etcd) != int(writes) {
		t.Fatalf("%d of %d writes timed on the etcd path", len(etcd), writes)
	}
	for path := range held {
		ps := snap.pinnedPath(addr)
		if path != metrics.PathAPIServer {
			ps = snap.path(path)
		}
		arrived, lags := rec.latencies(path), rec.lags(path)
		probetest.WantCounts(t, []probetest.Count{
			{path + " late", ps.value(metrics.EventsLate), float64(writes)},
			{path + " lost", ps.lost(), 0},
			{path + " apiserver share samples", float64(ps.histogram(metrics.APIServerLag).GetSampleCount()), float64(writes)},
		})
		expectLags(t, path, arrived, etcd, lags)
		var slowest time.Duration
		for w, l := range arrived {
			if l < hold {
				t.Errorf("%s: %v arrived %s after its send, less than the hold %s", path, w, l, hold)
			}
			slowest = max(slowest, etcd[w])
		}
		// Every share is its arrival, at least the hold after the send,
		// minus the etcd path's: at least the hold less the slowest etcd
		// arrival, and so is their mean.
		if h := ps.histogram(metrics.APIServerLag); h.GetSampleSum() < float64(h.GetSampleCount())*(hold-slowest).Seconds() {
			t.Errorf("%s: the shares' mean %gs is less than the hold %s less the slowest etcd arrival", path, h.GetSampleSum()/float64(h.GetSampleCount()), hold)
		}
	}
}
