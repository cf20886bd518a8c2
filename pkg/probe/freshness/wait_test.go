package freshness

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/tcpproxy"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// median of ds, which it sorts.
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// testAgreement: the figures a check exports agree with what an
// independent client on a warm connection of its own (client-go's
// clientset, another user) measures for the same consistent LIST, sent
// between the exporter's checks in the same run: idle, and with 300 ms
// on every etcd answer on pods' own etcd link. They agree when their
// medians differ by at most 10% of the client's, or 1 ms.
//
// Why a false failure is negligible: each figure is the median of many
// samples taken alternately, so a machine busy with other tests slows
// both sides alike. On this control plane the samples cluster tightly
// (idle: the middle half within about 0.4 ms of 1 ms; delayed: within
// 2 ms of 602 ms, twice the delay: etcd's current revision, then the
// cache's progress), against a tolerance of 1 ms and 60 ms: the medians
// part by more only if more than half of one side's samples fall outside
// the other's middle, for which a slow spell would have to strike one
// side alone, sample after sample. A LIST that failed (a machine stalled
// past a timeout) is no sample of either side; the test concludes nothing
// when more than a quarter did.
func testAgreement(t *testing.T, c *localcluster.Cluster, pods *tcpproxy.Proxy) {
	ctx := context.Background()
	// As the exporter runs by default: a read of the markers through the
	// load balancer after the checks, each round.
	f := settings([]string{"pods"}, nil)
	f.Reads = true
	chk, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: readers.Config(t, c, "fresh-agree-exporter"),
		Metrics: metrics.NewProbe(prometheus.NewRegistry()), Config: f,
		MarkerKind: config.KindConfigMap, MarkerSelector: "watchprobe.test/marker=yes", LostAfter: time.Minute, Retain: time.Minute})
	defer chk.Close()
	opened(t, chk, rec)
	independent := kubernetes.NewForConfigOrDie(readers.Config(t, c, "fresh-agree-client")).CoreV1().Pods("fresh")
	clientList := func() (time.Duration, error) {
		start := time.Now()
		_, err := independent.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + noSuchName})
		return time.Since(start), err
	}
	exporterCheck := func() Event {
		chk.Round(ctx)
		return check(t, rec.take(), "pods", "")
	}
	for _, tc := range []struct {
		delay   time.Duration
		samples int
	}{{0, 101}, {300 * time.Millisecond, 15}} {
		pods.Delay(tc.delay)
		// Both connections warm, and pods' cache past the change.
		exporterCheck()
		clientList()
		var roundTrips, waits, client []time.Duration
		var failed []string
		for i := range tc.samples {
			first, second := func() {
				if e := exporterCheck(); e.Verdict.Outcome == Fresh {
					roundTrips, waits = append(roundTrips, e.Answer.Took), append(waits, e.Verdict.Wait)
				} else {
					failed = append(failed, fmt.Sprintf("the exporter's check %+v (%+v)", e.Verdict, e.Answer))
				}
			}, func() {
				if d, err := clientList(); err == nil {
					client = append(client, d)
				} else {
					failed = append(failed, "the client's LIST: "+err.Error())
				}
			}
			if i%2 == 1 {
				first, second = second, first
			}
			first()
			second()
		}
		if len(failed) > tc.samples/2 {
			t.Fatalf("delay %s: %d of %d LISTs failed, too many to compare the rest: %v", tc.delay, len(failed), 2*tc.samples, failed)
		}
		want := median(client)
		tolerance := max(want/10, time.Millisecond)
		got := median(roundTrips)
		t.Logf("delay %s: the independent client's median %s, the exporter's %s (its wait %s), over %d and %d samples; failed: %v", tc.delay, want, got, median(waits), len(client), len(roundTrips), failed)
		if diff := got - want; diff > tolerance || diff < -tolerance {
			t.Errorf("delay %s: the exporter's median %s, the independent client's %s: they differ by more than %s (client %v, exporter %v)",
				tc.delay, got, want, tolerance, client, roundTrips)
		}
	}
	pods.Delay(0)
}

// The queued test's tiny priority level and the group its FlowSchema
// sends there.
const (
	tinyLevel = "watchprobe-test-tiny"
	saturated = "watchprobe-test:saturated"
)

// testQueued: a priority level saturated while every watch cache is
// fresh. The checker's user and a flooder's share the level; the
// flooder's consistent LISTs of podtemplates, whose etcd link is stalled,
// hold every seat until the test lets them go. First the seats stay held:
// each of the checker's LISTs waits out its queue time (a quarter of its
// timeout) and is refused with 429, counted by the apiserver. Then they
// are let go once the check's first LIST has waited in the queue for the
// bound: the check's LISTs are answered, the consistent one after its time
// in the queue, past the bound. Every check is queued, by reason, none
// fell back, failed or made the cache stuck; with the level free again,
// every check is fresh.
func testQueued(t *testing.T, c *localcluster.Cluster, templates *tcpproxy.Proxy) {
	ctx := context.Background()
	localcluster.TinyPriorityLevel(t, kubernetes.NewForConfigOrDie(c.AdminConfig()), tinyLevel, saturated)
	exporterRC, flooderRC := readers.Config(t, c, "fresh-queued", saturated), readers.Config(t, c, "fresh-flooder", saturated)
	flooder, err := ownClient(flooderRC, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	exporterClient, err := ownClient(exporterRC, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	seats := c.InPriorityLevel(t, exporterClient, "/api/v1/namespaces/fresh/configmaps?limit=1", tinyLevel)
	t.Logf("the tiny priority level has %v seats", seats)
	templates.Stall()
	defer templates.Resume()
	flood := c.NewFlood(t, flooder, "/api/v1/namespaces/fresh/podtemplates?timeout=1m", tinyLevel, seats)
	rejected := func() float64 {
		n, _ := c.PriorityLevelMetric(t, "apiserver_flowcontrol_rejected_requests_total", tinyLevel)
		return n
	}

	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	f := settings([]string{"configmaps", "pods"}, nil)
	chk, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: exporterRC, Metrics: m, Config: f})
	defer chk.Close()
	// Before the flood: the first round resolves the resources and makes
	// the series; the checks start with the next.
	opened(t, chk, rec)
	series := func(resource string) *metrics.Series { return m.ForResource("p", resource, "") }
	queued := func(want map[string]int, rounds int, events []Event) {
		t.Helper()
		for _, e := range events {
			if e.Verdict.Outcome != Queued || e.Stuck {
				t.Errorf("%s: %+v stuck %v (answer %+v, baseline %+v), want queued and not stuck", e.Resource, e.Verdict, e.Stuck, e.Answer, e.Baseline)
			}
		}
		for resource, n := range want {
			if got := testutil.ToFloat64(series(resource).Counter(metrics.ListFreshnessQueued, metrics.QueuedRejected)); got != float64(n) {
				t.Errorf("%s: queued rejected %v, want %d", resource, got, n)
			}
			if got := testutil.ToFloat64(series(resource).Counter(metrics.ListFreshnessChecks)); got != float64(rounds) {
				t.Errorf("%s: checks %v, want %d", resource, got, rounds)
			}
			for _, r := range metrics.FallbackReasons {
				if got := testutil.ToFloat64(series(resource).Counter(metrics.ListFreshnessFallbacks, r)); got != 0 {
					t.Errorf("%s: fell back %s %v, want 0", resource, r, got)
				}
			}
			for _, r := range metrics.FreshnessErrorReasons {
				if got := testutil.ToFloat64(series(resource).Counter(metrics.ListFreshnessErrors, r)); got != 0 {
					t.Errorf("%s: failed %s %v, want 0", resource, r, got)
				}
			}
			if got := testutil.ToFloat64(series(resource).Gauge(metrics.ListFreshnessStuck)); got != 0 {
				t.Errorf("%s: stuck %v, want 0", resource, got)
			}
		}
	}

	t.Run("refused", func(t *testing.T) {
		flood.Hold(t)
		before := rejected()
		const rounds = 2
		var events []Event
		for range rounds {
			chk.Round(ctx)
			events = append(events, rec.take()...)
		}
		if len(events) != 2*rounds {
			t.Fatalf("%d checks, want %d", len(events), 2*rounds)
		}
		for _, e := range events {
			if e.Verdict.Reason != metrics.QueuedRejected || e.Answer.Status != http.StatusTooManyRequests || e.Baseline.Status != http.StatusTooManyRequests {
				t.Errorf("%s: %+v (answer %+v, baseline %+v), want both refused", e.Resource, e.Verdict, e.Answer, e.Baseline)
			}
		}
		queued(map[string]int{"configmaps": rounds, "pods": rounds}, rounds, events)
		// The apiserver's own count: each check's two LISTs, refused.
		if got := rejected() - before; got != 4*rounds {
			t.Errorf("the apiserver refused %v requests of the level, want %d, the checks' two LISTs each", got, 4*rounds)
		}
		flood.Ebb()
	})

	t.Run("admitted late", func(t *testing.T) {
		// One resource a round, each round behind a flood of its own; a
		// timeout of 20 s lets a LIST wait 5 s in the queue.
		f := settings([]string{"configmaps"}, nil)
		f.Timeout = model20s
		one, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: exporterRC, Metrics: m, Config: f})
		defer one.Close()
		opened(t, one, rec)
		before := testutil.ToFloat64(series("configmaps").Counter(metrics.ListFreshnessQueued, metrics.QueuedWaited))
		const rounds = 3
		for range rounds {
			// The check's first LIST held in the queue as long as the
			// bound: a consistent LIST held so, alone, would read as a
			// fallback at the bound.
			flood.Queue(t, time.Duration(f.Bound), func() { one.Round(ctx) })
			ev := rec.take()
			if len(ev) != 1 {
				t.Fatalf("%d checks, want 1", len(ev))
			}
			e := ev[0]
			if e.Verdict.Reason != metrics.QueuedWaited || !e.Answer.answered() || !e.Baseline.answered() {
				t.Errorf("%+v (answer %+v, baseline %+v), want queued waited, both answered", e.Verdict, e.Answer, e.Baseline)
			}
			t.Logf("baseline %s behind the flood, consistent LIST %s", e.Baseline.Took, e.Answer.Took)
			queued(nil, 0, ev)
		}
		if got := testutil.ToFloat64(series("configmaps").Counter(metrics.ListFreshnessQueued, metrics.QueuedWaited)) - before; got != rounds {
			t.Errorf("configmaps queued waited %v, want %d", got, rounds)
		}
		if got := testutil.ToFloat64(series("configmaps").Gauge(metrics.ListFreshnessStuck)); got != 0 {
			t.Errorf("configmaps stuck %v, want 0", got)
		}
	})

	// The caches were fresh all along.
	templates.Resume()
	chk.Round(ctx)
	for _, e := range rec.take() {
		if e.Verdict.Outcome != Fresh || e.Stuck {
			t.Errorf("%s with the level free: %+v stuck %v, want fresh", e.Resource, e.Verdict, e.Stuck)
		}
	}
}

const model20s = 20_000_000_000
