package freshness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// The aggregated API of the uncached tests: one namespaced resource,
// things, served by a small server of the test's.
const (
	fakeGroup   = "fake.watchprobe.test"
	fakeThings  = "things." + fakeGroup
	fakeService = "fake-things"
)

// fakeAPI is the aggregated API's server: discovery, and an empty list of
// things, whose LISTs it counts.
type fakeAPI struct {
	lists atomic.Int64
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gv := fakeGroup + "/v1"
	var body any
	switch p := r.URL.Path; {
	case p == "/apis":
		body = metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{fakeAPIGroup()}}
	case p == "/apis/"+fakeGroup:
		g := fakeAPIGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		body = g
	case p == "/apis/"+gv:
		body = metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv,
			APIResources: []metav1.APIResource{{Name: "things", SingularName: "thing", Namespaced: true, Kind: "Thing", Verbs: []string{"get", "list"}}}}
	case strings.HasPrefix(p, "/apis/"+gv+"/namespaces/") && strings.HasSuffix(p, "/things"):
		f.lists.Add(1)
		body = map[string]any{"kind": "ThingList", "apiVersion": gv, "metadata": map[string]any{"resourceVersion": "1"}, "items": []any{}}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

func fakeAPIGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: fakeGroup + "/v1", Version: "v1"}
	return metav1.APIGroup{Name: fakeGroup, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

// startAggregated serves the aggregated API on an address of the test's
// own (an EndpointSlice may not hold loopback) and registers it with an
// APIService that names a Service there; it returns once discovery serves
// its things.
func startAggregated(t *testing.T, client kubernetes.Interface, rc *rest.Config, ns string) *fakeAPI {
	t.Helper()
	ctx := context.Background()
	api := &fakeAPI{}
	l, err := net.Listen("tcp", net.JoinHostPort(localcluster.HostAddressForTest(t).String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api)
	srv.Listener = l
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := l.Addr().(*net.TCPAddr)

	if _, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fakeService},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(addr.Port))}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, port, ready := "https", int32(addr.Port), true
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fakeService, Labels: map[string]string{discoveryv1.LabelServiceName: fakeService}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-aggregator before 1.33 resolves a service by its Endpoints,
	// not its EndpointSlices; later releases accept them (deprecated).
	if _, err := client.CoreV1().Endpoints(ns).Create(ctx, &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: fakeService},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: addr.IP.String()}},
			Ports:     []corev1.EndpointPort{{Name: name, Port: port}},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1." + fakeGroup},
		"spec": map[string]any{
			"group": fakeGroup, "version": "v1", "insecureSkipTLSVerify": true,
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": ns, "name": fakeService, "port": int64(443)},
		},
	}}
	if _, err := dynamic.NewForConfigOrDie(rc).Resource(apiServices).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// In the aggregated discovery document, which the checker's
	// resolution reads: kube-aggregator adds an APIService's resources
	// to it asynchronously, after the group/version's own discovery
	// (ServerResourcesForGroupVersion, proxied to the server) serves them.
	localcluster.Eventually(t, 60*time.Second, "the aggregated things in aggregated discovery", func() bool {
		_, lists, _ := client.Discovery().ServerGroupsAndResources()
		for _, l := range lists {
			if l.GroupVersion == fakeGroup+"/v1" && len(l.APIResources) == 1 {
				return true
			}
		}
		return false
	})
	return api
}

// grant gives user rules: in namespace by a Role and a RoleBinding, or
// cluster-wide ("") by a ClusterRole and a ClusterRoleBinding, each named
// after the user.
func grant(t *testing.T, client kubernetes.Interface, namespace, user string, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	meta := metav1.ObjectMeta{Name: user}
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user}}
	var err error
	if namespace == "" {
		if _, err = client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{}); err == nil {
			_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}}, metav1.CreateOptions{})
		}
	} else {
		if _, err = client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: rules}, metav1.CreateOptions{}); err == nil {
			_, err = client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user}}, metav1.CreateOptions{})
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log destination tests read while the checker writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// self is the control plane's apiserver as a pinned target, named by its
// address.
func self(t *testing.T, rc *rest.Config) Target {
	t.Helper()
	u, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	return Target{Name: u.Host, Config: rc}
}

// One control plane that stores events without a watch cache
// (--watch-cache-sizes=events#0) and serves an aggregated API,
// things.fake.watchprobe.test, from a server of the test's
// (--enable-aggregator-routing: the aggregator dials the EndpointSlice's
// address, where the Service's cluster IP leads nowhere on this machine).
// The tests of what the series show, through the chart's rules, share it.
func TestFreshnessUncachedAndSeries(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{APIServerFlags: []string{"--watch-cache-sizes=events#0", "--enable-aggregator-routing=true"}})
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	localcluster.CreateNamespacesForTest(t, client, "fresh")
	fake := startAggregated(t, client, admin, "fresh")
	ctx := context.Background()
	resources := []string{"events", "configmaps", fakeThings}

	t.Run("events without a watch cache, an aggregated API", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := metrics.NewProbe(reg)
		pinned := self(t, admin)
		targets := []Target{pinned}
		chk, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: admin, Metrics: m, Config: settings(resources, nil),
			Pinned: func() []Target { return targets }, Retired: judge.RetiredSeries{Grace: time.Hour}})
		chk.Round(ctx) // the series, and what is cached
		rec.take()
		const rounds = 2
		want := map[string]Verdict{
			"events":   {Outcome: Uncached, Reason: metrics.UncachedNoWatchCache},
			fakeThings: {Outcome: Uncached, Reason: metrics.UncachedAggregated},
		}
		for range rounds {
			chk.Round(ctx)
			ev := rec.take()
			for _, a := range []string{"", pinned.Name} {
				for _, r := range resources {
					e := check(t, ev, r, a)
					if w, ok := want[r]; ok && e.Verdict != w {
						t.Errorf("%s on %q: %+v, want %+v", r, a, e.Verdict, w)
					}
					if _, ok := want[r]; !ok && e.Verdict.Outcome != Fresh {
						t.Errorf("%s on %q: %+v (%+v), want fresh", r, a, e.Verdict, e.Answer)
					}
				}
			}
		}
		for _, a := range []string{"", pinned.Name} {
			for _, r := range resources {
				s := m.ForResource("p", r, a)
				for _, reason := range metrics.UncachedReasons {
					g := 0.0
					if want[r].Reason == reason {
						g = 1
					}
					if got := testutil.ToFloat64(s.Gauge(metrics.ListFreshnessUncached, reason)); got != g {
						t.Errorf("watchprobe_list_freshness_uncached{resource=%q,apiserver=%q,reason=%q} %v, want %v", r, a, reason, got, g)
					}
				}
				checks := float64(rounds)
				if _, ok := want[r]; ok {
					checks = 0
				}
				if got := testutil.ToFloat64(s.Counter(metrics.ListFreshnessChecks)); got != checks {
					t.Errorf("%s on %q: %v checks, want %v", r, a, got, checks)
				}
			}
		}
		if n := fake.lists.Load(); n != 0 {
			t.Errorf("%d LISTs of things reached the aggregated server, want none", n)
		}
		// Pinned again within its grace (it may have restarted with other
		// flags): judged again on its first round back.
		targets = nil
		chk.Round(ctx)
		targets = []Target{pinned}
		chk.Round(ctx)
		if v := check(t, rec.take(), "events", pinned.Name).Verdict; v != want["events"] {
			t.Errorf("events on the apiserver pinned again: %+v, want %+v", v, want["events"])
		}
	})

	t.Run("without the permissions: checked as caches, and the log says why", func(t *testing.T) {
		const user = "fresh-uncached-reader"
		grant(t, client, "fresh", user, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events", "configmaps"}, Verbs: []string{"list"}},
			rbacv1.PolicyRule{APIGroups: []string{fakeGroup}, Resources: []string{"things"}, Verbs: []string{"list"}})
		rc, err := c.ClientCertConfig(user)
		if err != nil {
			t.Fatal(err)
		}
		var logs syncBuffer
		reader, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: rc, Metrics: metrics.NewProbe(prometheus.NewRegistry()),
			Config: settings(resources, nil), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		reader.Round(ctx) // the series
		localcluster.Eventually(t, 30*time.Second, "the Role in effect", func() bool {
			reader.Round(ctx)
			return check(t, rec.take(), "configmaps", "").Verdict.Outcome == Fresh
		})
		reader.Round(ctx)
		ev := rec.take()
		for _, r := range resources {
			if v := check(t, ev, r, "").Verdict; v.Outcome != Fresh {
				t.Errorf("%s without the permissions to tell: %+v, want fresh", r, v)
			}
		}
		for _, want := range []string{"apiservices.apiregistration.k8s.io", "nonResourceURL /metrics"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not name %s:\n%s", want, logs.String())
			}
		}
		// Granted both, the next resolution tells them apart.
		grant(t, client, "", user, rbacv1.PolicyRule{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, Verbs: []string{"list"}},
			rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
		localcluster.EventuallyShows(t, 60*time.Second, fmt.Sprintf("events and things uncached within %d rounds of the grant", 2*resolveEvery), func() bool {
			reader.Round(ctx)
			ev := rec.take()
			return check(t, ev, "events", "").Verdict.Outcome == Uncached && check(t, ev, fakeThings, "").Verdict.Outcome == Uncached
		}, logs.String)
	})

	t.Run("series at zero a round before their first count, kept for the grace, through the rules", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		x := self(t, admin)
		// y: the same apiserver under another name, pinned for a while.
		y := Target{Name: "localhost:" + x.Name[strings.LastIndex(x.Name, ":")+1:], Config: admin}
		var pinned []Target
		f := settings([]string{"configmaps"}, nil)
		f.Reads = true
		chk, _ := newChecker(t, Options{Namespace: "fresh", LoadBalanced: admin, Metrics: metrics.NewProbe(reg), Config: f,
			Pinned: func() []Target { return pinned }, MarkerKind: config.KindConfigMap, MarkerSelector: "watchprobe.test/series=yes",
			LostAfter: time.Minute, Retain: time.Hour, Retired: judge.RetiredSeries{Grace: time.Hour}})
		var s scrapes
		chk.Round(ctx) // the load balancer's series
		s.scrape(t, reg)
		// A marker acknowledged long ago that no list shows: each target
		// that reads counts it missing, once.
		chk.Acknowledged("never-listed", 1, false, time.Now().Add(-2*time.Minute))
		pinned = []Target{x}
		chk.Round(ctx) // missing through the load balancer; x's series
		s.scrape(t, reg)
		chk.Round(ctx) // missing on x
		s.scrape(t, reg)
		pinned = []Target{x, y}
		chk.Round(ctx) // y's series
		s.scrape(t, reg)
		chk.Round(ctx) // missing on y, and no scrape before
		pinned = []Target{x}
		chk.Round(ctx) // y no longer pinned
		s.scrape(t, reg)
		if bad := s.firstNotZero(); len(bad) > 0 {
			t.Errorf("series whose first scrape was not 0:\n%s", strings.Join(bad, "\n"))
		}
		s.promtoolRules(t, "WatchprobeStaleReads", firing{0: nil, 1: {""}, 2: {"", x.Name}, 3: {"", x.Name}, 4: {"", x.Name, y.Name}})
		for _, a := range []string{"", x.Name, y.Name} {
			if got := s[len(s)-1][seriesName("watchprobe_list_stale_reads_total", labelPairs("apiserver", a, "kind", metrics.StaleMissing, "probe", "p"))]; got != 1 {
				t.Errorf("missing on %q at the last scrape: %v, want 1", a, got)
			}
		}
	})

	t.Run("an unpinned apiserver's series go after the grace", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		x := self(t, admin)
		pinned := []Target{x}
		f := settings([]string{"configmaps"}, nil)
		chk, _ := newChecker(t, Options{Namespace: "fresh", LoadBalanced: admin, Metrics: metrics.NewProbe(reg), Config: f,
			Pinned: func() []Target { return pinned }, Retired: judge.RetiredSeries{Grace: 100 * time.Millisecond}})
		chk.Round(ctx)
		chk.Round(ctx)
		of := func(a string) int {
			var s scrapes
			s.scrape(t, reg)
			n := 0
			for k := range s[0] {
				if strings.Contains(k, fmt.Sprintf("apiserver=%q", a)) {
					n++
				}
			}
			return n
		}
		if of(x.Name) == 0 {
			t.Fatal("no series of the pinned apiserver")
		}
		pinned = nil
		chk.Round(ctx)
		localcluster.Eventually(t, 30*time.Second, "the unpinned apiserver's series gone", func() bool { return of(x.Name) == 0 })
		if of("") == 0 {
			t.Error("the load balancer's series went with the apiserver's")
		}
	})
}

// What each signal says of a resource: an aggregated group/version is
// another server's whatever the metrics; kube-apiserver's metrics tell a
// stored resource with a cacher from one without; a resource they do not
// show as stored (a custom resource's storage not made yet), or metrics
// not read, settle nothing.
func TestJudgeUncached(t *testing.T) {
	events, pods, widgets := schema.GroupResource{Resource: "events"}, schema.GroupResource{Resource: "pods"}, schema.GroupResource{Group: "example.com", Resource: "widgets"}
	m := &cacheMetrics{stored: map[schema.GroupResource]bool{events: true, pods: true}, cached: map[schema.GroupResource]bool{pods: true}}
	for _, tc := range []struct {
		name       string
		aggregated bool
		m          *cacheMetrics
		gr         schema.GroupResource
		reason     string
		known      bool
	}{
		{"aggregated", true, nil, widgets, metrics.UncachedAggregated, true},
		{"aggregated, whatever the metrics", true, m, pods, metrics.UncachedAggregated, true},
		{"cached", false, m, pods, "", true},
		{"stored without a cacher", false, m, events, metrics.UncachedNoWatchCache, true},
		{"not stored yet", false, m, widgets, "", false},
		{"metrics not read", false, nil, events, "", false},
	} {
		if reason, known := judgeUncached(tc.aggregated, tc.m, tc.gr); reason != tc.reason || known != tc.known {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, reason, known, tc.reason, tc.known)
		}
	}
}

// The group, resource and APIService group/version of each list path
// resolve makes.
func TestServedAt(t *testing.T) {
	for path, want := range map[string][2]string{
		"/api/v1/namespaces/%s/events":                            {"/events", "/v1"},
		"/api/v1/nodes":                                           {"/nodes", "/v1"},
		"/apis/example.com/v2/namespaces/%s/gadgets":              {"example.com/gadgets", "example.com/v2"},
		"/apis/metrics.k8s.io/v1beta1/namespaces/%s/pods":         {"metrics.k8s.io/pods", "metrics.k8s.io/v1beta1"},
		"/apis/apiextensions.k8s.io/v1/customresourcedefinitions": {"apiextensions.k8s.io/customresourcedefinitions", "apiextensions.k8s.io/v1"},
	} {
		gr, gv := servedAt(path)
		if got := gr.Group + "/" + gr.Resource; got != want[0] || gv != want[1] {
			t.Errorf("%s: %s, %s; want %s, %s", path, got, gv, want[0], want[1])
		}
	}
}

// An apiserver's /metrics, read for the families that say what it stores
// and caches, every other line skipped, in 1.34's form and in the form
// before it; a family labelled otherwise than by group and resource, or
// none stored, is an error, not a verdict.
func TestReadCacheMetrics(t *testing.T) {
	const page = `# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="events",verb="LIST"} 3
# HELP apiserver_resource_objects Number of stored objects.
# TYPE apiserver_resource_objects gauge
apiserver_resource_objects{group="",resource="events"} 0
apiserver_resource_objects{group="",resource="pods"} 2
apiserver_resource_objects{group="example.com",resource="widgets"} 1
# HELP apiserver_resource_objects_extra Not the family.
# TYPE apiserver_resource_objects_extra gauge
apiserver_resource_objects_extra{resource="x"} 1
# HELP apiserver_watch_cache_initializations_total Counter of watch cache initializations.
# TYPE apiserver_watch_cache_initializations_total counter
apiserver_watch_cache_initializations_total{group="",resource="pods"} 1
# HELP watch_cache_capacity Total capacity of watch cache.
# TYPE watch_cache_capacity gauge
watch_cache_capacity{group="",resource="pods"} 100
watch_cache_capacity{group="example.com",resource="widgets"} 100
`
	serve := func(body string) (*http.Client, string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.Client(), srv.URL
	}
	client, host := serve(page)
	cm, err := readCacheMetrics(context.Background(), client, host)
	if err != nil {
		t.Fatal(err)
	}
	gr := func(g, r string) schema.GroupResource { return schema.GroupResource{Group: g, Resource: r} }
	if want := map[schema.GroupResource]bool{gr("", "events"): true, gr("", "pods"): true, gr("example.com", "widgets"): true}; !maps.Equal(cm.stored, want) {
		t.Errorf("stored %v, want %v", cm.stored, want)
	}
	if want := map[schema.GroupResource]bool{gr("", "pods"): true, gr("example.com", "widgets"): true}; !maps.Equal(cm.cached, want) {
		t.Errorf("cached %v, want %v", cm.cached, want)
	}
	// kube-apiserver 1.31 to 1.33: objects stored in apiserver_storage_objects,
	// every family labelled by resource alone, "resource.group".
	const legacy = `# TYPE apiserver_storage_objects gauge
apiserver_storage_objects{resource="events"} 0
apiserver_storage_objects{resource="pods"} 2
apiserver_storage_objects{resource="widgets.example.com"} 1
# TYPE apiserver_watch_cache_initializations_total counter
apiserver_watch_cache_initializations_total{resource="pods"} 1
# TYPE watch_cache_capacity gauge
watch_cache_capacity{resource="pods"} 100
watch_cache_capacity{resource="widgets.example.com"} 100
`
	client, host = serve(legacy)
	if legacyCM, err := readCacheMetrics(context.Background(), client, host); err != nil || !maps.Equal(legacyCM.stored, cm.stored) || !maps.Equal(legacyCM.cached, cm.cached) {
		t.Errorf("1.33's /metrics: %+v, %v; want what 1.34's says, %+v", legacyCM, err, cm)
	}
	for name, body := range map[string]string{
		"a cache family labelled by neither": strings.Replace(page, `watch_cache_capacity{group="",resource="pods"}`, `watch_cache_capacity{kind="pods"}`, 1),
		"nothing stored":                     strings.ReplaceAll(page, "apiserver_resource_objects{", "apiserver_other_objects{"),
	} {
		client, host := serve(body)
		if _, err := readCacheMetrics(context.Background(), client, host); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
