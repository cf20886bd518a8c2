package freshness

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// recorder keeps every event a Checker judged, by round.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) observe(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// take returns the events since the last take.
func (r *recorder) take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

// check is the event of resource on apiserver among events.
func check(t *testing.T, events []Event, resource, apiserver string) Event {
	t.Helper()
	for _, e := range events {
		if e.Read == nil && e.Resource == resource && e.APIServer == apiserver {
			return e
		}
	}
	t.Fatalf("no check of %s on %q among %+v", resource, apiserver, events)
	return Event{}
}

func read(t *testing.T, events []Event, apiserver string) Event {
	t.Helper()
	for _, e := range events {
		if e.Read != nil && e.APIServer == apiserver {
			return e
		}
	}
	t.Fatalf("no read on %q among %+v", apiserver, events)
	return Event{}
}

func settings(resources, cluster []string) config.FreshnessConfig {
	f := config.DefaultFreshnessConfig()
	f.Resources, f.ClusterResources = resources, cluster
	// Rounds are driven by the tests (Round), not by Every; the stuck
	// window is three rounds.
	f.Every = 10_000_000_000
	f.StuckWindow = 3 * f.Every
	// The shortest timeout config accepts for the bound.
	f.Timeout = model2700ms
	f.Bound = model1500ms
	f.Reads = false
	return f
}

const (
	model2700ms = 2_700_000_000
	model1500ms = 1_500_000_000
)

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

var crdsResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// namespacedCRD is a CRD of group example.com, namespaced, whose kind is
// kind and singular name singular (its plural adds an s), served and
// stored in v1 alone, its objects of any shape.
func namespacedCRD(singular, kind string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": singular + "s.example.com"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": singular + "s", "singular": singular, "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// createCRD serves widgets.example.com, namespaced, and waits until it is
// established.
func createCRD(t *testing.T, rc *rest.Config) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(rc)
	if _, err := dyn.Resource(crdsResource).Create(context.Background(), namespacedCRD("widget", "Widget"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	localcluster.Eventually(t, 30*time.Second, "widgets served", func() bool {
		_, err := dyn.Resource(widgets).Namespace("default").List(context.Background(), metav1.ListOptions{})
		return err == nil
	})
}

// inDiscovery is 1 if discovery serves resource in example.com/v1, 0 if
// it does not, -1 if discovery failed.
func inDiscovery(client kubernetes.Interface, resource string) int {
	l, err := client.Discovery().ServerResourcesForGroupVersion("example.com/v1")
	if apierrors.IsNotFound(err) {
		return 0 // the group version has no resource left
	}
	if err != nil {
		return -1
	}
	for _, r := range l.APIResources {
		if r.Name == resource {
			return 1
		}
	}
	return 0
}

func newChecker(t *testing.T, opts Options) (*Checker, *recorder) {
	t.Helper()
	rec := &recorder{}
	opts.Observe = rec.observe
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Probe == "" {
		opts.Probe = "p"
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

// opened runs a new checker's first round, which makes its series at zero
// and checks nothing (Round: a scrape must see the zero before the first
// count), and fails if it checked anything.
func opened(t *testing.T, chk *Checker, rec *recorder) {
	t.Helper()
	chk.Round(context.Background())
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("a checker's first round checked: %+v", ev)
	}
}

// One control plane whose pods are stored through an etcd client of their
// own (--etcd-servers-overrides=/pods#<proxy>), in front of the same etcd:
// delaying or stalling that proxy slows pods' storage and watch cache alone.
func TestFreshnessOneResourceAtATime(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{EtcdOverrides: []string{"/pods", "/podtemplates"}})
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	localcluster.CreateNamespacesForTest(t, client, "fresh")
	createCRD(t, admin)
	pods := c.EtcdOverride("/pods")
	t.Cleanup(pods.Resume) // a stalled link must not hold the shutdown

	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	chk, rec := newChecker(t, Options{
		Namespace: "fresh", LoadBalanced: admin, Metrics: m,
		Config: settings([]string{"pods", "configmaps", "widgets.example.com", "gadgets.example.com"}, []string{"nodes"}),
	})
	ctx := context.Background()
	counter := func(resource string, f *metrics.Family, values ...string) float64 {
		return testutil.ToFloat64(m.ForResource("p", resource, "").Counter(f, values...))
	}

	t.Run("healthy", func(t *testing.T) {
		// The first round makes the series, at zero; the checks start
		// with the next.
		chk.Round(ctx)
		if ev := rec.take(); len(ev) != 0 {
			t.Errorf("the first round checked: %+v", ev)
		}
		chk.Round(ctx)
		ev := rec.take()
		for _, r := range []string{"pods", "configmaps", "widgets.example.com", "nodes"} {
			if v := check(t, ev, r, "").Verdict; v.Outcome != Fresh {
				t.Errorf("%s: %+v, want fresh", r, v)
			}
		}
		// A CRD that is not installed is reported as such, not dropped.
		if v := check(t, ev, "gadgets.example.com", "").Verdict; v != (Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}) {
			t.Errorf("gadgets: %+v, want failed not_found", v)
		}
	})

	t.Run("warm connections", func(t *testing.T) { testConnections(t, c) })

	// delayedFellBack: the delayed pods check below took the bound or
	// more (1.0 to 1.5 s behind the 500 ms delay, the bound 1.5 s).
	var delayedFellBack bool
	t.Run("delayed pods", func(t *testing.T) {
		// Every etcd answer to the pods client comes 500ms late: the
		// consistent LIST asks etcd for its current revision through it,
		// so it cannot take less; configmaps' client is untouched.
		const delay = 500 * time.Millisecond
		pods.Delay(delay)
		chk.Round(ctx)
		pods.Delay(0)
		ev := rec.take()
		p, cm := check(t, ev, "pods", ""), check(t, ev, "configmaps", "")
		delayedFellBack = p.Verdict.Outcome == FellBack
		// Fresh, waited at the bound or timed out: whichever, it took the
		// delay (on a pods cache that just started it can take more than
		// the timeout).
		if p.Verdict.Outcome == Failed || p.Answer.Took < delay {
			t.Errorf("pods: %+v took %s, want an answer (or a timeout) after at least the %s delay", p.Verdict, p.Answer.Took, delay)
		}
		if cm.Verdict.Outcome != Fresh || cm.Answer.Took >= p.Answer.Took {
			t.Errorf("configmaps: %+v took %s, want fresh and quicker than pods (%s)", cm.Verdict, cm.Answer.Took, p.Answer.Took)
		}
		t.Logf("pods %s behind a %s delay, configmaps %s", p.Answer.Took, delay, cm.Answer.Took)
		// The alternative docs/configuration.md weighs: NotOlderThan the
		// probe's own newest write (here a ConfigMap's), measured, not
		// asserted: it waits only for the cache to reach that revision.
		pods.Delay(delay)
		defer pods.Delay(0)
		w, err := client.CoreV1().ConfigMaps("fresh").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "w-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, opts := range []metav1.ListOptions{{}, {ResourceVersion: w.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}} {
			start := time.Now()
			if _, err := client.CoreV1().Pods("fresh").List(ctx, opts); err != nil {
				t.Fatal(err)
			}
			t.Logf("pods LIST resourceVersion=%q resourceVersionMatch=%q behind a %s delay: %s", opts.ResourceVersion, opts.ResourceVersionMatch, delay, time.Since(start))
		}
	})

	t.Run("agrees with a client beside it", func(t *testing.T) { testAgreement(t, c, pods) })
	t.Run("a saturated priority level", func(t *testing.T) { testQueued(t, c, c.EtcdOverride("/podtemplates")) })

	t.Run("stalled pods are stuck", func(t *testing.T) {
		before := counter("pods", metrics.ListFreshnessFallbacks, metrics.FallbackTimeout)
		pods.Stall()
		var stuck []bool
		for range 3 {
			chk.Round(ctx)
			ev := rec.take()
			p := check(t, ev, "pods", "")
			if p.Verdict != (Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}) {
				t.Errorf("stalled pods: %+v (%+v), want a timeout", p.Verdict, p.Answer)
			}
			stuck = append(stuck, p.Stuck)
			if cm := check(t, ev, "configmaps", ""); cm.Verdict.Outcome != Fresh || cm.Stuck {
				t.Errorf("configmaps beside stalled pods: %+v stuck %v, want fresh", cm.Verdict, cm.Stuck)
			}
		}
		pods.Resume()
		// The window is three rounds: a healthy one, the delayed one (timed),
		// then three timeouts; stuck from the second timeout on (2 of 3),
		// or from the first if the delayed one fell back.
		if want := []bool{delayedFellBack, true, true}; stuck[0] != want[0] || stuck[1] != want[1] || stuck[2] != want[2] {
			t.Errorf("stuck after each stalled round %v, want %v", stuck, want)
		}
		if got := counter("pods", metrics.ListFreshnessFallbacks, metrics.FallbackTimeout) - before; got != 3 {
			t.Errorf("pods timeouts counted %v, want 3", got)
		}
		if got := testutil.ToFloat64(m.ForResource("p", "pods", "").Gauge(metrics.ListFreshnessStuck)); got != 1 {
			t.Errorf("watchprobe_list_freshness_stuck{resource=pods} %v, want 1", got)
		}
		if got := counter("configmaps", metrics.ListFreshnessFallbacks, metrics.FallbackTimeout); got != 0 {
			t.Errorf("configmaps timeouts %v, want 0", got)
		}
		// Resumed, pods' cache catches up: two fresh rounds make the
		// window one timeout in three, not stuck.
		var after []bool
		for range 2 {
			chk.Round(ctx)
			p := check(t, rec.take(), "pods", "")
			if p.Verdict.Outcome != Fresh {
				t.Errorf("pods after resume: %+v (%+v), want fresh", p.Verdict, p.Answer)
			}
			after = append(after, p.Stuck)
		}
		if after[0] != true || after[1] != false {
			t.Errorf("stuck after each resumed round %v, want [true false] (2 timeouts in 3, then 1)", after)
		}
		if got := counter("pods", metrics.ListFreshnessChecks); got != 7 {
			t.Errorf("pods checks %v, want 7 (one per round)", got)
		}
	})

	t.Run("a CRD installed after the start", func(t *testing.T) {
		// gadgets.example.com was not served when the checker resolved its
		// resources; once discovery serves it, the checker's next
		// resolution, at most resolveEvery rounds later, lists it.
		dyn := dynamic.NewForConfigOrDie(admin)
		if _, err := dyn.Resource(crdsResource).Create(ctx, namespacedCRD("gadget", "Gadget"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		localcluster.Eventually(t, 60*time.Second, "gadgets in discovery", func() bool { return inDiscovery(client, "gadgets") == 1 })
		notFound := Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}
		for round := 1; ; round++ {
			chk.Round(ctx)
			if v := check(t, rec.take(), "gadgets.example.com", "").Verdict; v != notFound {
				break
			}
			if round == resolveEvery {
				t.Fatalf("gadgets still not found %d rounds after discovery served it", round)
			}
		}
		// Resolved: its new cache answers fresh once initialized.
		localcluster.Eventually(t, 30*time.Second, "gadgets fresh", func() bool {
			chk.Round(ctx)
			return check(t, rec.take(), "gadgets.example.com", "").Verdict.Outcome == Fresh
		})
	})

	t.Run("a CRD crds found, deleted: its series go", func(t *testing.T) {
		f := settings([]string{"configmaps"}, nil)
		f.CRDs = config.CRDGroups{"example.com"}
		reg := prometheus.NewRegistry()
		found, frec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: admin, Metrics: metrics.NewProbe(reg), Config: f})
		series := func() int {
			n := 0
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "resource" && l.GetValue() == "gadgets.example.com" {
							n++
						}
					}
				}
			}
			return n
		}
		found.Round(ctx) // the series
		found.Round(ctx)
		check(t, frec.take(), "gadgets.example.com", "")
		if series() == 0 {
			t.Fatal("no series of gadgets.example.com after a round with crds")
		}
		dyn := dynamic.NewForConfigOrDie(admin)
		if err := dyn.Resource(crdsResource).Delete(ctx, "gadgets.example.com", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		localcluster.Eventually(t, 60*time.Second, "gadgets out of discovery", func() bool { return inDiscovery(client, "gadgets") == 0 })
		for round := 1; series() > 0; round++ {
			if round > resolveEvery {
				t.Fatalf("%d series of gadgets.example.com %d rounds after its CRD left discovery, want none", series(), round-1)
			}
			found.Round(ctx)
			frec.take()
		}
	})

	t.Run("RBAC: namespaced resources in the namespace only, cluster-scoped with a ClusterRole", func(t *testing.T) {
		const user = "fresh-reader"
		ctx := context.Background()
		grant(t, client, "fresh", user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "configmaps"}, Verbs: []string{"list"}})
		rc, err := c.ClientCertConfig(user)
		if err != nil {
			t.Fatal(err)
		}
		reader, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: rc, Metrics: metrics.NewProbe(prometheus.NewRegistry()),
			Config: settings([]string{"pods", "configmaps"}, []string{"nodes"})})
		reader.Round(ctx) // the series, at zero
		localcluster.Eventually(t, 30*time.Second, "the Role in effect", func() bool {
			reader.Round(ctx)
			ev := rec.take()
			return check(t, ev, "pods", "").Verdict.Outcome == Fresh
		})
		reader.Round(ctx)
		ev := rec.take()
		if v := check(t, ev, "configmaps", "").Verdict; v.Outcome != Fresh {
			t.Errorf("configmaps with the Role: %+v, want fresh", v)
		}
		if v := check(t, ev, "nodes", "").Verdict; v != (Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}) {
			t.Errorf("nodes without a ClusterRole: %+v, want forbidden", v)
		}
		grant(t, client, "", user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list"}})
		localcluster.Eventually(t, 30*time.Second, "nodes listed with the ClusterRole", func() bool {
			reader.Round(ctx)
			return check(t, rec.take(), "nodes", "").Verdict.Outcome == Fresh
		})
	})
}

// An HA control plane of two apiservers, each storing pods through an etcd
// link of its own. First a's pods link alone stalls: pods' consistent
// LISTs time out on a only, while pods on b and configmaps on both are
// fresh. Then a stalls its whole etcd link (its watch caches stop
// advancing, its storage answers nothing) while writes go through b. a's consistent LISTs time out and b's are fresh; a's
// resourceVersion=0 reads keep listing a deleted marker (a ghost), lack a
// created one (missing) and are behind an acknowledged write (stale);
// through the load balancer, reads that reach a after b go back in time.
func TestFreshnessHA(t *testing.T) {
	h := localcluster.StartHAForTest(t, localcluster.HAOptions{APIServers: 2, Options: localcluster.Options{EtcdOverrides: []string{"/pods"}}})
	a, b := h.APIServers()[0], h.APIServers()[1]
	bc := kubernetes.NewForConfigOrDie(b.RESTConfig())
	localcluster.CreateNamespacesForTest(t, bc, "fresh")
	t.Cleanup(a.EtcdLink().Resume)

	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	f := settings([]string{"configmaps", "pods"}, nil)
	f.Reads = true
	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	const selector = "watchprobe.test/marker=yes"
	chk, rec := newChecker(t, Options{
		Namespace: "fresh", LoadBalanced: h.RESTConfig(), Metrics: m, Now: now, Config: f,
		Pinned: func() []Target {
			return []Target{{Name: a.Address(), Config: a.RESTConfig()}, {Name: b.Address(), Config: b.RESTConfig()}}
		},
		MarkerKind: config.KindConfigMap, MarkerSelector: selector, LostAfter: time.Minute, Retain: 10 * time.Minute,
	})
	ctx := context.Background()
	write := func(name string) uint64 {
		cm, err := bc.CoreV1().ConfigMaps("fresh").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: map[string]string{"watchprobe.test/marker": "yes"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rv, _ := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		chk.Acknowledged(name, rv, false, now())
		return rv
	}
	lists := func(api *localcluster.APIServer, name string) bool {
		l, err := kubernetes.NewForConfigOrDie(api.RESTConfig()).CoreV1().ConfigMaps("fresh").List(ctx,
			metav1.ListOptions{ResourceVersion: "0", LabelSelector: selector})
		if err != nil {
			return false
		}
		for _, cm := range l.Items {
			if cm.Name == name {
				return true
			}
		}
		return false
	}

	cases := []struct {
		resource, apiserver string
		want                Outcome
	}{
		{"pods", a.Address(), FellBack},
		{"pods", b.Address(), Fresh},
		{"configmaps", a.Address(), Fresh},
		{"configmaps", b.Address(), Fresh},
	}
	timeouts := func(resource, apiserver string) float64 {
		return testutil.ToFloat64(m.ForResource("p", resource, apiserver).Counter(metrics.ListFreshnessFallbacks, metrics.FallbackTimeout))
	}
	chk.Round(ctx) // the series, at zero
	localcluster.Eventually(t, 60*time.Second, "every cache fresh on both apiservers", func() bool {
		chk.Round(ctx)
		ev := rec.take()
		for _, tc := range cases {
			if check(t, ev, tc.resource, tc.apiserver).Verdict.Outcome != Fresh {
				return false
			}
		}
		return true
	})
	before := make([]float64, len(cases))
	for i, tc := range cases {
		before[i] = timeouts(tc.resource, tc.apiserver)
	}
	podsOnA := a.EtcdOverride("/pods")
	t.Cleanup(podsOnA.Resume)
	podsOnA.Stall()
	chk.Round(ctx)
	podsOnA.Resume()
	ev := rec.take()
	for i, tc := range cases {
		e := check(t, ev, tc.resource, tc.apiserver)
		if e.Verdict.Outcome != tc.want || (tc.want == FellBack && e.Verdict.Reason != metrics.FallbackTimeout) {
			t.Errorf("%s on %s with a's pods link stalled: %+v (%+v), want %v", tc.resource, tc.apiserver, e.Verdict, e.Answer, tc.want)
		}
		want := 0.0
		if tc.want == FellBack {
			want = 1
		}
		if got := timeouts(tc.resource, tc.apiserver) - before[i]; got != want {
			t.Errorf("watchprobe_list_freshness_fallbacks_total{resource=%q,apiserver=%q,reason=timeout} rose by %v, want %v", tc.resource, tc.apiserver, got, want)
		}
	}

	// Through the load balancer, each round's checks on a connection of
	// their own: with a's pods link stalled, pods' load-balanced checks
	// reach a in some rounds (a timeout) and b in others (fresh), where a
	// connection kept for good would reach one of them in every round.
	// No reads: the balancer's turns are the checks' alone.
	lbOnly := settings([]string{"pods"}, nil)
	lb, lbRec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: h.RESTConfig(), Metrics: metrics.NewProbe(prometheus.NewRegistry()), Config: lbOnly})
	defer lb.Close()
	opened(t, lb, lbRec)
	podsOnA.Stall()
	seen := map[Outcome]int{}
	for round := 1; seen[Fresh] == 0 || seen[FellBack] == 0; round++ {
		if round > 8 {
			podsOnA.Resume()
			t.Fatalf("pods through the load balancer, a's pods link stalled, over %d rounds: %v, want both fresh (b) and timed out (a)", round-1, seen)
		}
		lb.Round(ctx)
		e := check(t, lbRec.take(), "pods", "")
		seen[e.Verdict.Outcome]++
		if o := e.Verdict.Outcome; o != Fresh && e.Verdict != (Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}) {
			t.Errorf("pods through the load balancer: %+v (%+v), want fresh or a timeout", e.Verdict, e.Answer)
		}
	}
	podsOnA.Resume()
	rec.take()

	write("m1")
	localcluster.Eventually(t, 30*time.Second, "a's cache lists m1", func() bool { return lists(a, "m1") })
	a.EtcdLink().Stall()
	if err := bc.CoreV1().ConfigMaps("fresh").Delete(ctx, "m1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	chk.Acknowledged("m1", 0, true, now())
	rv2 := write("m2")
	localcluster.Eventually(t, 30*time.Second, "b's cache lists m2 and not m1", func() bool { return lists(b, "m2") && !lists(b, "m1") })
	offset.Store(int64(2 * time.Minute)) // past lost_after for both writes

	chk.Round(ctx)
	ev = rec.take()
	if v := check(t, ev, "configmaps", a.Address()).Verdict; v != (Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}) {
		t.Errorf("configmaps on a, stalled: %+v, want a timeout", v)
	}
	if v := check(t, ev, "configmaps", b.Address()).Verdict; v.Outcome != Fresh {
		t.Errorf("configmaps on b: %+v, want fresh", v)
	}
	ra, rb := read(t, ev, a.Address()), read(t, ev, b.Address())
	for _, tc := range []struct {
		e    Event
		want map[string]int
	}{
		{ra, map[string]int{metrics.StaleGhost: 1, metrics.StaleMissing: 1, metrics.StaleBehind: 1}},
		{rb, map[string]int{}},
	} {
		for _, k := range metrics.StaleKinds {
			if got := findings(*tc.e.Read, k); got != tc.want[k] {
				t.Errorf("%s: %s %d, want %d (list at %d, m2 written at %d)", tc.e.APIServer, k, got, tc.want[k], tc.e.Listing.RV, rv2)
			}
			if got := testutil.ToFloat64(m.ForReads("p", tc.e.APIServer).Counter(metrics.ListStaleReads, k)); got != float64(tc.want[k]) {
				t.Errorf("watchprobe_list_stale_reads_total{apiserver=%q,kind=%q} %v, want %d", tc.e.APIServer, k, got, tc.want[k])
			}
		}
	}
	if ra.Listing.RV >= rv2 || rb.Listing.RV < rv2 {
		t.Errorf("list resourceVersions a %d, b %d: want a below m2's %d and b at or above it", ra.Listing.RV, rb.Listing.RV, rv2)
	}

	// Through the load balancer, each read a connection of its own: once
	// one reaches a after one reached b, the list went back in time.
	cl, err := chk.client(Target{Config: h.RESTConfig()})
	if err != nil {
		t.Fatal(err)
	}
	var rvs []uint64
	localcluster.Eventually(t, 30*time.Second, "a read through the load balancer back in time", func() bool {
		chk.read(ctx, cl, "")
		for _, e := range rec.take() {
			if e.Read != nil && e.APIServer == "" {
				rvs = append(rvs, e.Listing.RV)
			}
		}
		return testutil.ToFloat64(m.ForReads("p", "").Counter(metrics.ListStaleReads, metrics.StaleBackInTime)) > 0
	})
	// Exactly the reads whose list resourceVersion fell below the highest
	// the load balancer had returned before (the first round's read too).
	want, highest := 0, uint64(0)
	for _, e := range ev {
		if e.Read != nil && e.APIServer == "" {
			highest = e.Listing.RV
		}
	}
	for _, rv := range rvs {
		if rv < highest {
			want++
		}
		highest = max(highest, rv)
	}
	if got := testutil.ToFloat64(m.ForReads("p", "").Counter(metrics.ListStaleReads, metrics.StaleBackInTime)); got != float64(want) {
		t.Errorf("back_in_time through the load balancer %v, want %d (list resourceVersions %v)", got, want, rvs)
	}
}
