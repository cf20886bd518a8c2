package resolve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
)

// Aggregated discovery hands the lists over in map order: whatever order
// they come in, a resource served in two versions resolves to its
// group's preferred one.
func TestResolvePreferredVersion(t *testing.T) {
	gv := func(v string) metav1.GroupVersionForDiscovery {
		return metav1.GroupVersionForDiscovery{GroupVersion: "example.com/" + v, Version: v}
	}
	groups := []*metav1.APIGroup{
		{Name: "", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "v1", Version: "v1"}}, PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "v1", Version: "v1"}},
		{Name: "example.com", Versions: []metav1.GroupVersionForDiscovery{gv("v2"), gv("v1")}, PreferredVersion: gv("v2")},
	}
	list := func(gv string, namespaced bool, names ...string) *metav1.APIResourceList {
		l := &metav1.APIResourceList{GroupVersion: gv}
		for _, n := range names {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: n, Namespaced: namespaced, Verbs: []string{"list", "watch"}})
		}
		return l
	}
	core := list("v1", true, "configmaps")
	v1 := list("example.com/v1", true, "gadgets", "widgets")
	v2 := list("example.com/v2", true, "gadgets")
	for _, lists := range [][]*metav1.APIResourceList{{core, v1, v2}, {v2, core, v1}, {v1, v2, core}} {
		ordered := preferredFirst(groups, lists)
		for _, tc := range []struct {
			w    config.Resource
			path string
		}{
			{config.Resource{Resource: "gadgets", Group: "example.com"}, "/apis/example.com/v2/namespaces/%s/gadgets"},
			// Served in v1 alone: v1, after the preferred v2 lacks it.
			{config.Resource{Resource: "widgets", Group: "example.com"}, "/apis/example.com/v1/namespaces/%s/widgets"},
			{config.Resource{Resource: "configmaps"}, "/api/v1/namespaces/%s/configmaps"},
		} {
			if r := resolveOne(tc.w, ordered, "watch"); r.Err != nil || r.Path != tc.path {
				t.Errorf("lists in order %s %s %s: %s resolved to %q (%v), want %q",
					lists[0].GroupVersion, lists[1].GroupVersion, lists[2].GroupVersion, tc.w, r.Path, r.Err, tc.path)
			}
		}
	}
	// A resource served without the verb the checks need fails, naming it.
	noWatch := &metav1.APIResourceList{GroupVersion: "metrics.k8s.io/v1beta1", APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Verbs: []string{"get", "list"}}}}
	w := config.Resource{Resource: "pods", Group: "metrics.k8s.io"}
	if r := resolveOne(w, []*metav1.APIResourceList{noWatch}, "watch"); r.Err == nil || r.Err.Error() != "pods.metrics.k8s.io is served without watch (verbs [get list]), which these checks need" {
		t.Errorf("pods.metrics.k8s.io without watch: %+v", r)
	}
	if r := resolveOne(w, []*metav1.APIResourceList{noWatch}, ""); r.Err != nil || r.Path != "/apis/metrics.k8s.io/v1beta1/namespaces/%s/pods" {
		t.Errorf("pods.metrics.k8s.io listed: %+v", r)
	}
	// A list no group names is kept, last.
	stray := list("stray.example.com/v1", true, "strays")
	if got := preferredFirst(groups, []*metav1.APIResourceList{stray, v1, core, v2}); len(got) != 4 || got[0] != core || got[1] != v2 || got[2] != v1 || got[3] != stray {
		t.Errorf("preferredFirst kept %d lists in the wrong order", len(got))
	}
}

// A failed or partial discovery keeps what an earlier one resolved, and a
// failed CRD listing keeps the custom resources crds found; a complete one
// replaces it all, a resource gone included.
func TestKeepResolved(t *testing.T) {
	served := func(label string) Resource { return Resource{Label: label, Path: "/" + label} }
	gone := func(label string) Resource { return Resource{Label: label, Err: errors.New(label + " is not served")} }
	before := []Resource{served("pods"), served("gadgets.example.com"), served("widgets.example.com")}
	for _, tc := range []struct {
		name            string
		before, now     []Resource
		partial, noCRDs bool
		want            []Resource
	}{
		{"complete", before, []Resource{served("pods"), gone("gadgets.example.com")}, false, false,
			[]Resource{served("pods"), gone("gadgets.example.com")}},
		{"discovery failed", before, []Resource{gone("pods"), gone("gadgets.example.com")}, true, false,
			[]Resource{served("pods"), served("gadgets.example.com")}},
		{"CRDs not listed", before, []Resource{served("pods"), served("gadgets.example.com")}, false, true,
			[]Resource{served("pods"), served("gadgets.example.com"), served("widgets.example.com")}},
		{"never resolved before", nil, []Resource{gone("pods")}, true, true, []Resource{gone("pods")}},
	} {
		got := keepResolved(tc.before, tc.now, tc.partial, tc.noCRDs)
		if len(got) != len(tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i].Label != tc.want[i].Label || got[i].Path != tc.want[i].Path || (got[i].Err == nil) != (tc.want[i].Err == nil) {
				t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
				break
			}
		}
	}
}

// Discovery that cannot be asked at all (every request refused, as by an
// apiserver not ready behind its load balancer) resolves nothing, so that
// no resource is judged not served, and Every asks again on its next call
// rather than keep the failure for n calls; once the apiserver answers,
// the resources resolve, and a later failure keeps that resolution.
func TestResolveDiscoveryDown(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{})
	proxy := c.FaultProxyForTest(t)
	all := func(faultproxy.Request) bool { return true }
	r := New(proxy.Config(c.AdminConfig()), []config.Resource{{Resource: "pods"}, {Resource: "nodes", Cluster: true}}, nil, 0,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := context.Background()
	const n = 10
	proxy.Refuse(1<<30, all, http.StatusServiceUnavailable)
	for call := range 2 {
		if got := r.Every(ctx, n); got != nil {
			t.Fatalf("call %d, discovery refused: %+v, want no resolution", call, got)
		}
	}
	if proxy.Applied(faultproxy.Refuse) < 2 {
		t.Fatalf("the proxy refused %d requests, want discovery asked on each call", proxy.Applied(faultproxy.Refuse))
	}
	proxy.Clear()
	want := []Resource{{Label: "pods", Path: "/api/v1/namespaces/%s/pods"}, {Label: "nodes", Path: "/api/v1/nodes", Cluster: true}}
	got := r.Every(ctx, n)
	if len(got) != len(want) {
		t.Fatalf("discovery answered: %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("discovery answered: %+v, want %+v", got[i], want[i])
		}
	}
	proxy.Refuse(1<<30, all, http.StatusServiceUnavailable)
	if again, dropped := r.Resolve(ctx); len(again) != len(want) || again[0] != want[0] || again[1] != want[1] || dropped != nil {
		t.Errorf("discovery refused after it answered: %+v (dropped %v), want the earlier %+v", again, dropped, want)
	}
}
