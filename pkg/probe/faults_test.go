package probe

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// Watch health under faults, injected through a proxy in front of the real
// apiserver or by stopping the real processes. Every count asserted is the
// count injected.

func newProxy(t *testing.T, c *localcluster.Cluster) *faultproxy.Proxy {
	t.Helper()
	return c.FaultProxyForTest(t)
}

// through sends path through the proxy; the writes and the other path go
// straight to the apiserver.
func through(t *testing.T, p *faultproxy.Proxy, path string) map[string]*rest.Config {
	t.Helper()
	return map[string]*rest.Config{path: p.Config(cluster.AdminConfig())}
}

// proxiedProbe starts a probe named name in the namespace ns, made for
// it, with path sent through a fault proxy of its own; edit, if not nil,
// changes its configuration first.
func proxiedProbe(t *testing.T, name, ns, path string, edit func(*config.Config)) (*testProbe, *faultproxy.Proxy) {
	t.Helper()
	localcluster.CreateNamespacesForTest(t, adminClient(t), ns)
	proxy := newProxy(t, cluster)
	cfg := fastConfig(name, ns)
	if edit != nil {
		edit(&cfg)
	}
	return startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour, through(t, proxy, path)), proxy
}

func other(path string) string {
	if path == metrics.PathInformer {
		return metrics.PathWatch
	}
	return metrics.PathInformer
}

// anomalies reads every anomaly counter of a path.
func anomalies(ps exposedPath) map[string]float64 {
	return map[string]float64{
		"missed_silent": ps.value(metrics.EventsMissed, metrics.MissedSilent),
		"missed_relist": ps.value(metrics.EventsMissed, metrics.MissedRelist),
		"lost_silent":   ps.value(metrics.EventsLost, metrics.MissedSilent),
		"lost_relist":   ps.value(metrics.EventsLost, metrics.MissedRelist),
		"duplicate":     ps.value(metrics.EventsDuplicate),
		"replayed":      ps.value(metrics.EventsReplayed),
		"out_of_order":  ps.value(metrics.EventsOutOfOrder),
		"late":          ps.value(metrics.EventsLate),
		"stalled":       ps.value(metrics.WatchStalled),
	}
}

// expectAnomalies fails unless the path shows exactly want, and zero for
// every anomaly not named.
func expectAnomalies(t *testing.T, path string, ps exposedPath, want map[string]float64) {
	t.Helper()
	for name, got := range anomalies(ps) {
		if got != want[name] {
			t.Errorf("%s: %s = %g, want %g", path, name, got, want[name])
		}
	}
}

func modifiedIn(ns string) faultproxy.Match {
	return func(ev faultproxy.Event) bool { return ev.Type == "MODIFIED" && ev.Namespace == ns }
}

// N dropped, duplicated or reordered events on one path are reported as
// exactly N on that path, under the right counter, and nothing on the other:
// a dropped event is missed by its deadline and lost once lost_after has
// passed.
func TestInjectedFaultsCountedExactly(t *testing.T) {
	client := adminClient(t)
	const n = 3
	for _, tc := range []struct {
		fault  string
		inject func(*faultproxy.Proxy, string)
		want   map[string]float64
	}{
		{"drop", func(p *faultproxy.Proxy, ns string) { p.Drop(n, modifiedIn(ns)) }, map[string]float64{"missed_silent": n, "lost_silent": n}},
		{"duplicate", func(p *faultproxy.Proxy, ns string) { p.Duplicate(n, modifiedIn(ns)) }, map[string]float64{"duplicate": n}},
		{"reorder", func(p *faultproxy.Proxy, ns string) { p.Reorder(n, modifiedIn(ns)) }, map[string]float64{"out_of_order": n}},
	} {
		for _, path := range config.DefaultPaths {
			t.Run(tc.fault+"/"+path, func(t *testing.T) {
				t.Parallel()
				ns := "fault-" + tc.fault + "-" + path
				tp, proxy := proxiedProbe(t, "faults", ns, path, func(cfg *config.Config) {
					cfg.Updates = 1
					cfg.Deadline = model.Duration(time.Second)
					cfg.LostAfter = model.Duration(3 * time.Second)
					cfg.Interval = model.Duration(400 * time.Millisecond)
				})
				localcluster.Eventually(t, 60*time.Second, "paths synced", tp.ready)
				tc.inject(proxy, ns)
				localcluster.Eventually(t, 60*time.Second, "all faults injected", func() bool {
					return proxy.Applied(faultproxy.Drop)+proxy.Applied(faultproxy.Duplicate)+proxy.Applied(faultproxy.Reorder) == n
				})
				// Two clean cycles after the last fault, everything settled,
				// and every miss resolved as late or lost.
				after := tp.acked(t, metrics.VerbCreate)
				tp.settled(t, int(after)+2)
				tp.resolved(t)

				expectAnomalies(t, path, tp.path(path), tc.want)
				expectAnomalies(t, other(path), tp.path(other(path)), nil)
				if got := tp.success(); got != 1 {
					t.Errorf("probe_success = %g after the faults passed, want 1", got)
				}
				tp.stopLeavingNoMarkers(t, client)
			})
		}
	}
}

// A delay d on one path's stream is in that path's latency, every write's,
// and not in the other path's.
func TestDelayShiftsOnlyThatPath(t *testing.T) {
	t.Parallel()
	ns := "delay"
	inNamespace(t, ns)
	proxy := newProxy(t, cluster)
	const delay = 300 * time.Millisecond
	proxy.SetDelay(delay)
	cfg := fastConfig("delay", ns)
	cfg.Interval = model.Duration(time.Second) // leaves settled moments between cycles
	rec := newExactLatencies()
	tp := startProbeWith(t, cfg, Options{Config: cluster.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{rec}},
		routed(t, through(t, proxy, metrics.PathInformer)))
	tp.settled(t, 10)
	expectAnomalies(t, metrics.PathInformer, tp.path(metrics.PathInformer), nil)
	tp.stop()
	delayed, direct := rec.latencies(metrics.PathInformer), rec.latencies(metrics.PathWatch)
	t.Logf("p50 informer (delayed by %s) %s, watch (direct) %s", delay, rec.p50(metrics.PathInformer), rec.p50(metrics.PathWatch))
	if len(delayed) == 0 || len(direct) == 0 {
		t.Fatalf("%d writes timed on the delayed path, %d on the direct one", len(delayed), len(direct))
	}
	// The proxy holds each event for d after the apiserver sent it, so
	// every write arrives on the delayed path at least d after its send.
	for w, l := range delayed {
		if l < delay {
			t.Errorf("%v arrived on the delayed path %s after its send, less than the delay %s", w, l, delay)
		}
	}
	// The direct path does not go through the proxy. The delay cannot
	// reach it but by a wrong wiring, which would delay every write.
	if fastest := slices.Min(slices.Collect(maps.Values(direct))); fastest >= delay {
		t.Errorf("every write took the delay %s or more on the direct path (fastest %s): the delay leaked into it", delay, fastest)
	}
}

// A stalled stream sets the stalled gauge within the bound and clears it
// when events flow again, while the other path stays healthy.
func TestStallDetected(t *testing.T) {
	tp, proxy := proxiedProbe(t, "stall", "stall", metrics.PathWatch, func(cfg *config.Config) {
		cfg.Deadline = model.Duration(time.Second)
		cfg.StallAfter = model.Duration(2 * time.Second)
	})
	tp.settled(t, 2)
	bound := time.Duration(tp.cfg.StallAfter)

	proxy.Stall()
	stalled := func(path string) float64 {
		return tp.path(path).value(metrics.WatchStalled)
	}
	start := time.Now()
	localcluster.Eventually(t, 20*time.Second, "watch path stalled", func() bool { return stalled(metrics.PathWatch) == 1 })
	if took := time.Since(start); took < bound {
		t.Errorf("flagged stalled after %s, before the %s bound", took, bound)
	}
	if stalled(metrics.PathInformer) != 0 {
		t.Error("the direct informer path was flagged stalled")
	}
	proxy.Resume()
	localcluster.Eventually(t, 20*time.Second, "stall cleared", func() bool { return stalled(metrics.PathWatch) == 0 })
	// The held events arrive late, having been counted missed.
	ps := tp.path(metrics.PathWatch)
	localcluster.Eventually(t, 20*time.Second, "late events counted", func() bool { return ps.value(metrics.EventsLate) > 0 })
	if late, silent := ps.value(metrics.EventsLate), ps.value(metrics.EventsMissed, metrics.MissedSilent); late > silent {
		t.Errorf("late %g > missed %g: a late event must have been missed first", late, silent)
	}
	localcluster.Eventually(t, 30*time.Second, "probe success again", func() bool { return tp.success() == 1 })
}

// Watches that the apiserver ends at their requested timeout are counted as
// timeouts, at the expected lifetimes, resume without relisting, and cause
// no anomaly.
//
// kube-apiserver applies --min-request-timeout only to watches that request
// no timeoutSeconds, and client-go's reflector always requests one, so the
// lifetime is set by the probe's watch_timeout, as it would be in a cluster.
func TestWatchTimeouts(t *testing.T) {
	ns := "timeouts"
	inNamespace(t, ns)
	cfg := fastConfig("timeouts", ns)
	cfg.WatchTimeout = model.Duration(2 * time.Second) // lifetimes of 2 to 4 s
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour)
	localcluster.Eventually(t, 60*time.Second, "3 timeouts on each path", func() bool {
		for _, path := range config.DefaultPaths {
			if tp.path(path).value(metrics.WatchRestarts, metrics.EndTimeout) < 3 {
				return false
			}
		}
		return true
	})
	tp.settled(t, 1)
	for _, path := range config.DefaultPaths {
		ps := tp.path(path)
		for reason, got := range ps.ends() {
			if reason != metrics.EndTimeout && got != 0 {
				t.Errorf("%s: %g watches ended with %s", path, got, reason)
			}
		}
		h := ps.histogram(metrics.WatchDuration)
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == 1 && b.GetCumulativeCount() != 0 {
				t.Errorf("%s: %d watches ended within 1 s of a 2 s timeout", path, b.GetCumulativeCount())
			}
			if b.GetUpperBound() == 5 && b.GetCumulativeCount() != h.GetSampleCount() {
				t.Errorf("%s: %d of %d watches outlived 5 s with a 2-4 s timeout", path, h.GetSampleCount()-b.GetCumulativeCount(), h.GetSampleCount())
			}
		}
		expectRelists(t, tp, path, map[string]float64{metrics.RelistInitial: 1})
		expectAnomalies(t, path, ps, nil)
	}
}

// expectRelists checks relists by reason, summed over modes.
func expectRelists(t *testing.T, tp *testProbe, path string, want map[string]float64) {
	t.Helper()
	for _, reason := range []string{metrics.RelistInitial, metrics.RelistExpired, metrics.RelistError} {
		if got := tp.path(path).relists(reason); got != want[reason] {
			t.Errorf("%s: relists (%s) = %g, want %g", path, reason, got, want[reason])
		}
	}
}

// A cut connection ends the proxied path's stream early (eof) and it
// resumes; the probe comes back to success on its own.
func TestCutConnectionsRecovered(t *testing.T) {
	client := adminClient(t)
	onEveryPath(t, func(t *testing.T, path string) {
		tp, proxy := proxiedProbe(t, "cut", "cut-"+path, path, nil)
		tp.settled(t, 2)
		proxy.CutConnections()
		ps := tp.path(path)
		localcluster.Eventually(t, 30*time.Second, "an early end counted", func() bool {
			return ps.value(metrics.WatchRestarts, metrics.EndEOF)+ps.value(metrics.WatchRestarts, metrics.EndError) >= 1
		})
		after := tp.acked(t, metrics.VerbCreate)
		tp.settled(t, int(after)+2)
		if got := tp.success(); got != 1 {
			t.Errorf("probe_success = %g after the cut, want 1", got)
		}
		if got := ps.value(metrics.EventsMissed, metrics.MissedSilent); got != 0 {
			t.Errorf("%g silent misses: a cut is not a silent loss", got)
		}
		expectAnomalies(t, other(path), tp.path(other(path)), nil)
		tp.stopLeavingNoMarkers(t, client)
	})
}

// A clean run reports no anomaly of any kind, across several watch timeouts.
func TestCleanRunHasNoAnomalies(t *testing.T) {
	t.Parallel()
	ns := "clean"
	inNamespace(t, ns)
	cfg := fastConfig("clean", ns)
	cfg.Interval = model.Duration(250 * time.Millisecond)
	cfg.WatchTimeout = model.Duration(30 * time.Second)
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour)
	time.Sleep(3 * time.Minute)
	after := tp.acked(t, metrics.VerbCreate)
	tp.settled(t, int(after)+1)
	t.Logf("%d cycles", tp.acked(t, metrics.VerbCreate))
	for _, path := range config.DefaultPaths {
		ps := tp.path(path)
		expectAnomalies(t, path, ps, nil)
		expectRelists(t, tp, path, map[string]float64{metrics.RelistInitial: 1})
		if got := ps.value(metrics.WatchRestarts, metrics.EndTimeout); got < 2 {
			t.Errorf("%s: %g watch timeouts in 3 minutes with a 30-60 s timeout", path, got)
		}
		for reason, got := range ps.ends() {
			if reason != metrics.EndTimeout && got != 0 {
				t.Errorf("%s: %g watches ended with %s in a clean run", path, got, reason)
			}
		}
		// The apiserver sends bookmarks to watchers that ask for them, at
		// the latest just before it ends a watch on its timeout.
		if got := ps.value(metrics.Bookmarks); got == 0 {
			t.Errorf("%s: no bookmark in 3 minutes", path)
		}
		if n := tp.count(metrics.RelistDuration); n != len(config.DefaultPaths) {
			t.Errorf("relist durations recorded for %d path/mode pairs, want one per path", n)
		}
	}
	if got := tp.success(); got != 1 {
		t.Errorf("probe_success = %g", got)
	}
}

// Restarting the apiserver ends every watch; resuming from a resourceVersion
// the new apiserver's watch cache no longer has is answered "expired", and
// both paths relist for that reason. Restarting etcd is survived. After each
// fault the probe succeeds again without a restart and leaves no marker.
func TestControlPlaneRestarts(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	client := kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns := "restarts"
	localcluster.CreateNamespacesForTest(t, client, ns)
	cfg := fastConfig("restarts", ns)
	tp := startProbe(t, c.AdminConfig(), cfg, "r1", time.Hour)
	tp.settled(t, 2)
	success := func() bool { return tp.success() == 1 }

	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c.BumpEtcdRevision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	watchPath, informer := tp.path(metrics.PathWatch), tp.path(metrics.PathInformer)
	// The watch path is ours: it resumes from its resourceVersion, is told
	// it expired, and relists for that reason, every time.
	localcluster.Eventually(t, 60*time.Second, "watch path relisted after expiry", func() bool { return watchPath.relists(metrics.RelistExpired) >= 1 })
	if got := watchPath.value(metrics.WatchRestarts, metrics.EndExpired); got < 1 {
		t.Errorf("watch path: no stream ended as expired after resuming from a stale resourceVersion")
	}
	// client-go's reflector either retries the watch (refused while the
	// apiserver is down), is told it expired and relists for that, or gives
	// up on the refused watch and relists for an error, depending on its
	// backoff against the restart. Either way it relists, and a resumed
	// watch that expired must be followed by a relist for that reason.
	localcluster.Eventually(t, 60*time.Second, "informer relisted after the restart", func() bool {
		return informer.relists(metrics.RelistExpired)+informer.relists(metrics.RelistError) >= 1
	})
	if informer.value(metrics.WatchRestarts, metrics.EndExpired) >= 1 && informer.relists(metrics.RelistExpired) < 1 {
		t.Error("informer: a watch ended as expired but no relist was counted for that reason")
	}
	for _, path := range config.DefaultPaths {
		var ended float64
		for reason, n := range tp.path(path).ends() {
			if reason != metrics.EndTimeout && reason != metrics.EndClient {
				ended += n
			}
		}
		if ended == 0 {
			t.Errorf("%s: no watch end counted across an apiserver restart", path)
		}
	}
	localcluster.Eventually(t, 60*time.Second, "success after the apiserver restart", success)

	if err := c.StopEtcd(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := c.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	localcluster.Eventually(t, 90*time.Second, "success after the etcd restart", success)
	if tp.sum(metrics.WriteErrors) == 0 {
		t.Error("no write error counted while etcd was down")
	}
	for _, path := range config.DefaultPaths {
		if got := tp.path(path).value(metrics.EventsDuplicate); got != 0 {
			t.Errorf("%s: %g duplicates across restarts", path, got)
		}
	}
	tp.stopLeavingNoMarkers(t, client)
}

// Late is not lost. Events held on one path's stream past the deadline (a
// slow apiserver, a slow etcd) are missed and late, and never lost: nothing
// pages as a data loss. The same events dropped instead are lost once
// lost_after has passed. On the informer and the watch path.
func TestHeldIsLateDroppedIsLost(t *testing.T) {
	client := adminClient(t)
	onEveryPath(t, func(t *testing.T, path string) {
		ns := "held-" + path
		tp, proxy := proxiedProbe(t, "held", ns, path, func(cfg *config.Config) {
			cfg.Updates = 1
			cfg.Deadline = model.Duration(time.Second)
			cfg.LostAfter = model.Duration(10 * time.Second)
			cfg.Interval = model.Duration(time.Second)
		})
		tp.settled(t, 2)

		// Held 2 s, twice the deadline and well within lost_after.
		proxy.SetDelay(2 * time.Second)
		ps := tp.path(path)
		localcluster.Eventually(t, 30*time.Second, "late events", func() bool { return ps.value(metrics.EventsLate) >= 3 })
		proxy.SetDelay(0)
		after := tp.acked(t, metrics.VerbCreate)
		tp.settled(t, int(after)+2)
		tp.resolved(t)
		late := ps.value(metrics.EventsLate)
		probetest.WantCounts(t, []probetest.Count{
			{path + " lost", ps.lost(), 0},
			{path + " missed, all of them late", ps.missed(), late},
			{other(path) + " missed", tp.path(other(path)).missed(), 0},
		})

		// Dropped: never delivered, so lost once lost_after passes.
		const n = 2
		proxy.Drop(n, modifiedIn(ns))
		localcluster.Eventually(t, 60*time.Second, "drops injected", func() bool { return proxy.Applied(faultproxy.Drop) == n })
		after = tp.acked(t, metrics.VerbCreate)
		tp.settled(t, int(after)+2)
		tp.resolved(t)
		probetest.WantCounts(t, []probetest.Count{
			{path + " lost silently", ps.value(metrics.EventsLost, metrics.MissedSilent), n},
			{path + " lost", ps.lost(), n},
			{path + " late, as before the drops", ps.value(metrics.EventsLate), late},
			{other(path) + " lost", tp.path(other(path)).lost(), 0},
		})
		tp.stopLeavingNoMarkers(t, client)
	})
}
