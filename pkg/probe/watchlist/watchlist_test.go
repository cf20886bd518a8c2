package watchlist

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// of is the sync of resource on apiserver among events.
func of(t *testing.T, events []Event, resource, apiserver string) Event {
	t.Helper()
	for _, e := range events {
		if e.Resource == resource && e.APIServer == apiserver {
			return e
		}
	}
	t.Fatalf("no sync of %s on %q among %+v", resource, apiserver, events)
	return Event{}
}

// settings are rounds driven by the test (Round, not Every), a stuck
// window of three rounds, and bound. No baseline is slow enough to make a
// sync queued, however busy the machine: the tests of the queue set
// QueuedAfter.
func settings(bound time.Duration, resources, cluster []string) config.WatchListConfig {
	w := config.DefaultWatchListConfig()
	w.Resources, w.ClusterResources = resources, cluster
	w.Every = model.Duration(10 * time.Second)
	w.StuckWindow = 3 * w.Every
	w.Bound = model.Duration(bound)
	w.QueuedAfter = model.Duration(time.Hour)
	return w
}

// unbounded lets chk's syncs and baselines run until they end: a test
// that wants a sync to reach its end bookmark waits for it, not for the
// clock. Misses come from faults that end nothing (a stalled etcd link, a
// dropped bookmark) and a bound that ends the sync on an event or after
// the fault is certain.
func unbounded(chk *Checker) {
	chk.bound = func(ctx context.Context, _, _ string, _ bool) (context.Context, context.CancelFunc) {
		return context.WithCancel(ctx)
	}
}

// newChecker is a Checker of opts and what it judged: take returns the
// syncs judged since its last call (a Round returns once each of its
// syncs is judged).
func newChecker(t *testing.T, opts Options) (chk *Checker, take func() []Event) {
	t.Helper()
	judged := make(chan Event, 1024)
	opts.Observe = func(e Event) { judged <- e }
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Now = time.Now
	opts.Probe = "p"
	opts.Namespace = "wl"
	chk, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return chk, func() (out []Event) {
		for {
			select {
			case e := <-judged:
				out = append(out, e)
			default:
				return out
			}
		}
	}
}

// counts are one resource's series on one apiserver.
type counts struct {
	syncs, synced float64
	missed        map[string]float64
	refused       map[string]float64
	errors        map[string]float64
	stuck         float64
}

func read(t *testing.T, m *metrics.Probe, resource, apiserver string) counts {
	t.Helper()
	s := m.ForWatchList("p", resource, apiserver)
	c := counts{syncs: testutil.ToFloat64(s.Counter(metrics.WatchListSyncs)), stuck: testutil.ToFloat64(s.Gauge(metrics.WatchListStuck)),
		missed: map[string]float64{}, refused: map[string]float64{}, errors: map[string]float64{}}
	for _, r := range metrics.WatchListMissedReasons {
		c.missed[r] = testutil.ToFloat64(s.Counter(metrics.WatchListMissed, r))
	}
	for _, r := range metrics.WatchListRefusedReasons {
		c.refused[r] = testutil.ToFloat64(s.Counter(metrics.WatchListRefused, r))
	}
	for _, r := range metrics.FreshnessErrorReasons {
		c.errors[r] = testutil.ToFloat64(s.Counter(metrics.WatchListErrors, r))
	}
	c.synced = float64(histogramCount(t, s.Observer(metrics.WatchListSync).(prometheus.Metric)))
	return c
}

func histogramCount(t *testing.T, m prometheus.Metric) uint64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleCount()
}

// series counts the series reg exposes with apiserver's label.
func series(t *testing.T, reg *prometheus.Registry, apiserver string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "watchprobe_watchlist_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "apiserver" && l.GetValue() == apiserver {
					n++
				}
			}
		}
	}
	return n
}

// One control plane whose pods are stored through an etcd client of their
// own (--etcd-servers-overrides=/pods#<proxy>), in front of the same etcd:
// delaying or stalling that proxy slows pods' storage and watch cache
// alone; and a fault proxy in front of its apiserver.
func TestWatchListOneResourceAtATime(t *testing.T) {
	opts := localcluster.Options{EtcdOverrides: []string{"/pods", "/podtemplates"}}
	// 1.31 and 1.33 serve WatchList only with the gate turned on, as a
	// cluster that measures it there must (TestWatchListRefused: off).
	v, err := kube.ParseServerVersion(version.Info{GitVersion: localcluster.KubeVersionForTest(t, opts)})
	if err != nil {
		t.Fatal(err)
	}
	if !v.WatchListByDefault() {
		opts.APIServerFlags = append(opts.APIServerFlags, "--feature-gates=WatchList=true")
	}
	c := localcluster.StartForTest(t, opts)
	admin := c.AdminConfig()
	localcluster.CreateNamespacesForTest(t, kubernetes.NewForConfigOrDie(admin), "wl")
	pods := c.EtcdOverride("/pods")
	t.Cleanup(pods.Resume) // a stalled link must not hold the shutdown
	ctx := context.Background()

	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	const bound = 2500 * time.Millisecond
	chk, take := newChecker(t, Options{LoadBalanced: admin, Metrics: m,
		Config: settings(bound, []string{"pods", "configmaps", "gadgets.example.com"}, []string{"nodes"})})
	unbounded(chk)

	t.Run("healthy, from zero", func(t *testing.T) {
		// The first round makes every series, at zero, and syncs nothing:
		// a scrape sees the zero before the first count.
		chk.Round(ctx)
		if ev := take(); len(ev) != 0 {
			t.Errorf("the first round synced %+v, want nothing", ev)
		}
		for _, r := range []string{"pods", "configmaps", "gadgets.example.com", "nodes"} {
			if got := read(t, m, r, ""); got.syncs != 0 || series(t, reg, "") == 0 {
				t.Fatalf("%s after the first round: %+v, want series at zero", r, got)
			}
		}
		want := series(t, reg, "")
		chk.Round(ctx)
		ev := take()
		for _, r := range []string{"pods", "configmaps", "nodes"} {
			if e := of(t, ev, r, ""); e.Verdict != (Verdict{Outcome: Synced}) || e.Sync.Events != 0 {
				t.Errorf("%s: %+v (%+v), want synced at the end bookmark, no event before it", r, e.Verdict, e.Sync)
			}
			if got := read(t, m, r, ""); got.syncs != 1 || got.synced != 1 {
				t.Errorf("%s: %+v, want one sync, timed", r, got)
			}
		}
		// A resource that is not served is reported as such, not dropped,
		// and not counted as a sync: nothing was sent.
		if v := of(t, ev, "gadgets.example.com", "").Verdict; v != (Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}) {
			t.Errorf("gadgets: %+v, want failed not_found", v)
		}
		if got := read(t, m, "gadgets.example.com", ""); got.syncs != 0 || got.errors[metrics.FreshnessNotFound] != 1 {
			t.Errorf("gadgets: %+v, want no sync sent, one not_found", got)
		}
		if got := series(t, reg, ""); got != want {
			t.Errorf("%d series after a round, want the %d there were at zero", got, want)
		}
	})

	t.Run("delayed pods", func(t *testing.T) {
		// Every etcd answer to the pods client comes 300ms late: the sync
		// asks etcd for its current revision through it, so it cannot
		// take less; configmaps' client is untouched.
		const delay = 300 * time.Millisecond
		pods.Delay(delay)
		chk.Round(ctx)
		pods.Delay(0)
		ev := take()
		p, cm := of(t, ev, "pods", ""), of(t, ev, "configmaps", "")
		if p.Verdict.Outcome != Synced || p.Sync.Took < delay {
			t.Errorf("pods: %+v took %s, want a sync after at least the %s delay", p.Verdict, p.Sync.Took, delay)
		}
		if cm.Verdict.Outcome != Synced {
			t.Errorf("configmaps: %+v, want synced", cm.Verdict)
		}
		t.Logf("WatchList sync of pods %s behind a %s delay, of configmaps %s", p.Sync.Took, delay, cm.Sync.Took)
	})

	t.Run("stalled pods", func(t *testing.T) {
		before, cmBefore := read(t, m, "pods", ""), read(t, m, "configmaps", "")
		// The stalled link answers nothing: pods' WatchList cannot be
		// answered, and the bound is the only way out of it. Its baseline
		// (from the cache) and configmaps run unbounded.
		chk.bound = func(ctx context.Context, _, resource string, baseline bool) (context.Context, context.CancelFunc) {
			if resource == "pods" && !baseline {
				return context.WithTimeout(ctx, bound)
			}
			return context.WithCancel(ctx)
		}
		defer unbounded(chk)
		pods.Stall()
		const rounds = 3
		for range rounds {
			chk.Round(ctx)
			ev := take()
			if p := of(t, ev, "pods", ""); p.Verdict != missed(metrics.WatchListNoResponse) || p.Sync.Took < bound {
				t.Errorf("stalled pods: %+v (%+v), want no response within the %s bound", p.Verdict, p.Sync, bound)
			}
			if cm := of(t, ev, "configmaps", ""); cm.Verdict.Outcome != Synced || cm.Stuck {
				t.Errorf("configmaps beside stalled pods: %+v stuck %v, want synced", cm.Verdict, cm.Stuck)
			}
		}
		after, cmAfter := read(t, m, "pods", ""), read(t, m, "configmaps", "")
		if got := after.missed[metrics.WatchListNoResponse] - before.missed[metrics.WatchListNoResponse]; got != rounds {
			t.Errorf("pods' syncs without an end bookmark: %v, want %d", got, rounds)
		}
		if after.syncs-before.syncs != rounds || after.synced != before.synced {
			t.Errorf("pods: %v syncs, %v timed; want %d syncs, none timed", after.syncs-before.syncs, after.synced-before.synced, rounds)
		}
		if after.stuck != 1 {
			t.Errorf("watchprobe_watchlist_stuck{resource=pods} %v after %d stalled rounds (the whole window), want 1", after.stuck, rounds)
		}
		if cmAfter.synced-cmBefore.synced != rounds || cmAfter.missed[metrics.WatchListNoResponse] != 0 || cmAfter.stuck != 0 {
			t.Errorf("configmaps beside stalled pods: %+v, want %d more timed syncs, no miss, not stuck", cmAfter, rounds)
		}
		pods.Resume()
		unbounded(chk)
		// Resumed, pods' storage answers again: syncs end at their
		// bookmark, and two in the window of three are not stuck.
		synced := 0
		for round := 1; synced < 2; round++ {
			if round > 5 {
				t.Fatalf("pods not synced twice in %d rounds after the stall ended", round-1)
			}
			chk.Round(ctx)
			if p := of(t, take(), "pods", ""); p.Verdict.Outcome == Synced {
				synced++
			} else {
				synced = 0
			}
		}
		if got := read(t, m, "pods", "").stuck; got != 0 {
			t.Errorf("watchprobe_watchlist_stuck{resource=pods} %v after two syncs in a window of three, want 0", got)
		}
	})

	t.Run("a pinned apiserver: series first, syncs from the next round, kept for the grace", func(t *testing.T) {
		u, err := url.Parse(c.APIServerURL)
		if err != nil {
			t.Fatal(err)
		}
		addr := u.Host
		var mu sync.Mutex
		var pinned []string
		pin := func(addrs ...string) {
			mu.Lock()
			defer mu.Unlock()
			pinned = addrs
		}
		reg := prometheus.NewRegistry()
		m := metrics.NewProbe(reg)
		// Longer than a round on a loaded machine (its load-balanced sync
		// included), so that "right away" is within it whatever the load.
		const grace = 5 * time.Second
		pc, ptake := newChecker(t, Options{LoadBalanced: admin, Metrics: m, Config: settings(bound, []string{"configmaps"}, nil),
			ServerName: "localhost", Retired: judge.RetiredSeries{Grace: grace},
			Pinned: func() []string { mu.Lock(); defer mu.Unlock(); return pinned }})
		unbounded(pc)
		pc.Round(ctx) // the load balancer's series, at zero
		ptake()
		pin(addr)
		pc.Round(ctx)
		if ev := ptake(); len(ev) != 1 || ev[0].APIServer != "" {
			t.Errorf("the round the apiserver was pinned in: %+v, want the load-balanced sync alone", ev)
		}
		if got := read(t, m, "configmaps", addr); got.syncs != 0 || series(t, reg, addr) == 0 {
			t.Errorf("a newly pinned apiserver: %+v, %d series; want its series at zero", got, series(t, reg, addr))
		}
		pc.Round(ctx)
		if e := of(t, ptake(), "configmaps", addr); e.Verdict.Outcome != Synced {
			t.Errorf("configmaps on %s: %+v, want synced", addr, e.Verdict)
		}
		if got := read(t, m, "configmaps", addr); got.syncs != 1 || got.synced != 1 {
			t.Errorf("configmaps on %s: %+v, want one timed sync", addr, got)
		}
		pin()
		pc.Round(ctx)
		if n := series(t, reg, addr); n == 0 {
			t.Errorf("an apiserver no longer pinned: no series right away, want them for the %s grace", grace)
		}
		// Whoever shows what is stuck (the status page) hears that it is
		// no longer, there.
		if e := of(t, ptake(), "configmaps", addr); !e.Retired || e.Stuck {
			t.Errorf("configmaps on %s once no longer pinned: %+v, want retired, not stuck", addr, e)
		}
		localcluster.Eventually(t, 30*time.Second, "the retired apiserver's series gone after the grace", func() bool { return series(t, reg, addr) == 0 })
		if n := series(t, reg, ""); n == 0 {
			t.Error("the load-balanced series went with the apiserver's")
		}
	})

	t.Run("a proxy that strips bookmarks", func(t *testing.T) {
		// The proxy stands for one apiserver, pinned by its address; the
		// load-balanced path reaches the apiserver directly.
		proxy := c.FaultProxyForTest(t)
		proxy.Drop(1<<30, func(e faultproxy.Event) bool { return e.Type == "BOOKMARK" })
		addr := strings.TrimPrefix(proxy.URL, "https://")
		reg := prometheus.NewRegistry()
		m := metrics.NewProbe(reg)
		resources := []string{"pods", "configmaps"}
		// responses counts the WatchList responses through the proxy that
		// reached the checker's client.
		var responses atomic.Int64
		watched := rest.CopyConfig(admin)
		watched.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				if err == nil && "https://"+req.URL.Host == proxy.URL && req.URL.Query().Get("sendInitialEvents") == "true" {
					responses.Add(1)
				}
				return resp, err
			})
		})
		pc, ptake := newChecker(t, Options{LoadBalanced: watched, Metrics: m, Config: settings(bound, resources, nil),
			ServerName: "localhost", Retired: judge.RetiredSeries{Grace: time.Minute}, Pinned: func() []string { return []string{addr} }})
		// A WatchList through the proxy ends once its response reached the
		// checker and the proxy dropped its end bookmark: nothing more can
		// end it. Everything else runs unbounded.
		pc.bound = func(ctx context.Context, apiserver, _ string, baseline bool) (context.Context, context.CancelFunc) {
			bctx, cancel := context.WithCancel(ctx)
			if apiserver != addr || baseline {
				return bctx, cancel
			}
			dropped, answered := droppedEnds(proxy), responses.Load()
			go func() {
				for droppedEnds(proxy) == dropped || responses.Load() == answered {
					select {
					case <-bctx.Done():
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
				cancel()
			}()
			return bctx, cancel
		}
		pc.Round(ctx) // the series, at zero
		ptake()
		const rounds = 3
		for range rounds {
			pc.Round(ctx)
			ev := ptake()
			for _, r := range resources {
				if e := of(t, ev, r, addr); e.Verdict != missed(metrics.WatchListNoBookmark) {
					t.Errorf("%s through the proxy: %+v (%+v), want no end bookmark within the bound", r, e.Verdict, e.Sync)
				}
				if e := of(t, ev, r, ""); e.Verdict.Outcome != Synced {
					t.Errorf("%s directly: %+v, want synced", r, e.Verdict)
				}
			}
		}
		if want, dropped := rounds*len(resources), droppedEnds(proxy); dropped != want {
			t.Errorf("the proxy dropped %d end bookmarks, want %d", dropped, want)
		}
		for _, r := range resources {
			through, direct := read(t, m, r, addr), read(t, m, r, "")
			if through.missed[metrics.WatchListNoBookmark] != rounds || through.syncs != rounds || through.synced != 0 || through.stuck != 1 {
				t.Errorf("%s through the proxy: %+v, want %d syncs, each without its end bookmark, none timed, stuck", r, through, rounds)
			}
			if direct.synced != rounds || direct.missed[metrics.WatchListNoBookmark] != 0 || direct.stuck != 0 {
				t.Errorf("%s directly: %+v, want %d timed syncs and no miss", r, direct, rounds)
			}
		}
		// Without the rule, the same proxy passes the end bookmark.
		proxy.Clear()
		pc.Round(ctx)
		ev := ptake()
		for _, r := range resources {
			if e := of(t, ev, r, addr); e.Verdict.Outcome != Synced {
				t.Errorf("%s through the proxy without the rule: %+v, want synced", r, e.Verdict)
			}
		}
	})

	t.Run("an apiserver no connection reaches", func(t *testing.T) { testUnreachable(t, c) })
	t.Run("a saturated priority level", func(t *testing.T) { testQueued(t, c) })
}

func testutilCounter(s *metrics.Series, f *metrics.Family, label string) float64 {
	return testutil.ToFloat64(s.Counter(f, label))
}

// An apiserver with the WatchList feature gate off refuses every sync
// (422): counted as refused, never as a miss or an error, and never
// stuck: informers list there instead.
func TestWatchListRefused(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{APIServerFlags: []string{"--feature-gates=WatchList=false"}})
	admin := c.AdminConfig()
	localcluster.CreateNamespacesForTest(t, kubernetes.NewForConfigOrDie(admin), "wl")
	m := metrics.NewProbe(prometheus.NewRegistry())
	// A report's series (Keep): syncs from the first round.
	chk, take := newChecker(t, Options{LoadBalanced: admin, Metrics: m, Config: settings(2*time.Second, []string{"configmaps"}, []string{"nodes"}),
		Retired: judge.RetiredSeries{Keep: true}})
	unbounded(chk)
	const rounds = 3
	for range rounds {
		chk.Round(context.Background())
		for _, e := range take() {
			if e.Verdict != (Verdict{Outcome: Refused, Reason: metrics.WatchListRejected}) || e.Sync.Status == nil ||
				!strings.Contains(e.Sync.Status.Message, "WatchList feature gate") {
				t.Errorf("%s: %+v (%+v), want refused: the WatchList gate is off", e.Resource, e.Verdict, e.Sync.Status)
			}
		}
	}
	for _, r := range []string{"configmaps", "nodes"} {
		got := read(t, m, r, "")
		var missed, errs float64
		for _, n := range got.missed {
			missed += n
		}
		for _, n := range got.errors {
			errs += n
		}
		if got.syncs != rounds || got.refused[metrics.WatchListRejected] != rounds || missed != 0 || errs != 0 || got.synced != 0 || got.stuck != 0 {
			t.Errorf("%s: %+v, want %d syncs, each refused, nothing else", r, got, rounds)
		}
	}
}

// droppedEnds counts the end bookmarks proxy dropped.
func droppedEnds(proxy *faultproxy.Proxy) int {
	n := 0
	for _, rec := range proxy.Records() {
		if rec.Fault == faultproxy.Drop && rec.Event.InitialEventsEnd {
			n++
		}
	}
	return n
}
