package watchlist

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/watchprobe/watchprobe/internal/exportertest"
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

// A priority level for the queued test: 1 share of the apiserver's
// concurrency, nothing lent or borrowed, so that a few requests saturate
// it; the FlowSchema sends the saturated group's requests there, one flow
// per user.
const (
	tinyLevel = "watchprobe-test-wl-tiny"
	saturated = "watchprobe-test:wl-saturated"
	readers   = "watchprobe-test:wl-readers"
)

func createTinyLevel(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	fc := client.FlowcontrolV1()
	if _, err := fc.PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: tinyLevel},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: ptr.To[int32](1), LendablePercent: ptr.To[int32](0), BorrowingLimitPercent: ptr.To[int32](0),
			LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{
				Queues: 16, HandSize: 4, QueueLengthLimit: 50}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fc.FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: tinyLevel},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: tinyLevel},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: saturated}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					Namespaces: []string{"*"}, ClusterScope: true}},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = fc.FlowSchemas().Delete(ctx, tinyLevel, metav1.DeleteOptions{})
		_ = fc.PriorityLevelConfigurations().Delete(ctx, tinyLevel, metav1.DeleteOptions{})
	})
}

// readerConfig is a client certificate user in the readers group (list
// and watch of configmaps, pods and podtemplates in wl) and groups.
func readerConfig(t *testing.T, c *localcluster.Cluster, user string, groups ...string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	rbac := kubernetes.NewForConfigOrDie(c.AdminConfig()).RbacV1()
	_, err := rbac.Roles("wl").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "wl-readers"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "configmaps", "podtemplates"}, Verbs: []string{"list", "watch"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = rbac.RoleBindings("wl").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "wl-readers"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: readers}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "wl-readers"},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	rc, err := c.ClientCertConfig(user, append([]string{readers}, groups...)...)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// apiserverMetrics reads the apiserver's /metrics as rc, again after a
// failure (a connection lost on a stalled machine) for up to a minute.
func apiserverMetrics(t *testing.T, rc *rest.Config) map[string]*dto.MetricFamily {
	t.Helper()
	var families map[string]*dto.MetricFamily
	var err error
	localcluster.EventuallyShows(t, time.Minute, "the apiserver's metrics read", func() bool {
		var body []byte
		body, err = kubernetes.NewForConfigOrDie(rc).CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
		if err == nil {
			families, err = exportertest.Parse(string(body))
		}
		return err == nil
	}, func() string { return err.Error() })
	return families
}

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
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	templates := c.EtcdOverride("/podtemplates")
	createTinyLevel(t, client)
	exporterRC, flooderRC := readerConfig(t, c, "wl-queued", saturated), readerConfig(t, c, "wl-flooder", saturated)
	flooder, err := rest.HTTPClientFor(flooderRC)
	if err != nil {
		t.Fatal(err)
	}
	exporterClient, err := rest.HTTPClientFor(exporterRC)
	if err != nil {
		t.Fatal(err)
	}
	level := map[string]string{"priority_level": tinyLevel}
	var seats float64
	localcluster.Eventually(t, 30*time.Second, "the checker's requests in the tiny priority level", func() bool {
		plc, err := client.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, tinyLevel, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := exporterClient.Get(c.APIServerURL + "/api/v1/namespaces/wl/configmaps?limit=1")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		var found bool
		seats, found = exportertest.Sum(apiserverMetrics(t, admin), "apiserver_flowcontrol_nominal_limit_seats", level)
		return found && resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID) == string(plc.UID)
	})

	// flood holds every seat of the level with LISTs that hang on the
	// stalled link until ebb, and returns once they hold them all.
	var flooding sync.WaitGroup
	floodCtx, release := context.WithCancel(ctx)
	defer func() {
		release()
		flooding.Wait()
	}()
	templates.Stall()
	defer templates.Resume()
	flood := func() {
		for range int(seats) {
			flooding.Go(func() {
				req, err := http.NewRequestWithContext(floodCtx, http.MethodGet, c.APIServerURL+"/api/v1/namespaces/wl/podtemplates?timeout=1m", nil)
				if err != nil {
					panic(err)
				}
				if resp, err := flooder.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		localcluster.Eventually(t, 30*time.Second, "the flood holding every seat", func() bool {
			n, _ := exportertest.Sum(apiserverMetrics(t, admin), "apiserver_flowcontrol_current_executing_seats", level)
			return n == seats
		})
	}
	ebb := func() {
		release()
		flooding.Wait()
		floodCtx, release = context.WithCancel(ctx)
	}

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
		flood()
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
		ebb()
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
			flood()
			done := make(chan struct{})
			go func() {
				defer close(done)
				one.Round(ctx)
			}()
			localcluster.Eventually(t, 30*time.Second, "the sync's baseline in the queue", func() bool {
				n, _ := exportertest.Sum(apiserverMetrics(t, admin), "apiserver_flowcontrol_current_inqueue_requests", level)
				return n == 1
			})
			// Held there longer than queued_after, as a level saturated
			// that long holds it.
			time.Sleep(queuedAfter)
			ebb()
			<-done
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
