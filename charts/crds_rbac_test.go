package charts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
)

// freshness.crds against the real apiserver's RBAC: the chart's rendered
// RBAC, applied, lets the exporter's ServiceAccount list every resource of
// each API group crds names in the probe's namespace and nothing of any
// other group there (no Secrets, nothing of the core group but the marker
// kind's own grant, not the CRD of a group it does not name), and
// nothing of the named groups elsewhere. The exporter, running with that
// ServiceAccount and the rendered config, measures the named groups'
// custom resources without an error and never the other group's. Every
// group the apiserver serves itself is refused by the exporter's config
// and by the chart's schema.
func TestCRDGroupsRBACOnRealAPIServer(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := c.AdminConfig()
	adminClient := kubernetes.NewForConfigOrDie(admin)

	// The apiserver's own groups, before any CRD: none may be named.
	builtin, err := adminClient.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("built-in groups refused", func(t *testing.T) {
		for _, g := range builtin.Groups {
			var cfg config.Config
			err := yaml.Unmarshal([]byte(fmt.Sprintf("name: p\nfreshness: {crds: [%q]}", g.Name)), &cfg)
			if err == nil || !strings.Contains(err.Error(), "freshness.crds[0]: ") {
				t.Errorf("crds: [%q], a group kube-apiserver serves: %v, want an error at freshness.crds[0]", g.Name, err)
			}
			_, err = helm(t, "template", "wp", chartDir, "--set", "probes[0].name=x", "--set", "probes[0].namespace=probes",
				"--set", "probes[0].freshness.crds[0]="+g.Name)
			if err == nil || !strings.Contains(err.Error(), "at '/probes/0/freshness/crds/0'") {
				t.Errorf("the schema with crds: [%q], a group kube-apiserver serves: %v, want an error at /probes/0/freshness/crds/0", g.Name, err)
			}
		}
	})

	// Two named groups, and one CRD of a group crds does not name.
	crds := []*unstructured.Unstructured{
		crdOf("widgets", "Widget", "example.com"),
		crdOf("sprockets", "Sprocket", "example.net"),
		crdOf("gizmos", "Gizmo", "example.org"),
	}
	apply(t, ctx, admin, crds)
	for _, crd := range crds {
		// Served, and its watch cache ready: a new resource's cache
		// answers 429 "storage is (re)initializing" until it has listed,
		// which the freshness checks would count as an error.
		localcluster.Eventually(t, 60*time.Second, crd.GetName()+" established, served and cached", func() bool {
			dyn := dynamic.NewForConfigOrDie(admin)
			if !established(ctx, dyn, crd.GetName()) {
				return false
			}
			plural, group, _ := strings.Cut(crd.GetName(), ".")
			l, err := adminClient.Discovery().ServerResourcesForGroupVersion(group + "/v1")
			if err != nil || !slices.ContainsFunc(l.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
				return false
			}
			res := dyn.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural})
			for _, rv := range []string{"", "0"} {
				if _, err := res.List(ctx, metav1.ListOptions{ResourceVersion: rv, Limit: 1}); err != nil {
					return false
				}
			}
			return true
		})
	}

	const release, markers = "monitoring", "probes-crd"
	values := filepath.Join(t.TempDir(), "values.yaml")
	// Rounds every 3s, the shortest bound and timeout the config allows
	// with it, so that checks come soon.
	if err := os.WriteFile(values, []byte(`probes:
  - name: crds
    namespace: `+markers+`
    freshness: {resources: [], crds: [example.com, example.net], every: 3s, bound: 1500ms, timeout: 2700ms, stuck_window: 10s, reads: false}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	objs := render(t, release, values)
	releaseNS := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": release}}}
	apply(t, ctx, admin, append([]*unstructured.Unstructured{releaseNS}, objs...))
	saCfg, err := c.ServiceAccountConfig(ctx, release, "wp-watchprobe")
	if err != nil {
		t.Fatal(err)
	}
	sa := kubernetes.NewForConfigOrDie(saCfg)

	// can says whether the apiserver lets the ServiceAccount verb resource
	// of group in namespace, asked as the ServiceAccount itself.
	can := func(verb, group, resource, namespace string) bool {
		t.Helper()
		r, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: namespace, Verb: verb, Group: group, Resource: resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("reviewing %s on %s.%s in %q: %v", verb, resource, group, namespace, err)
		}
		return r.Status.Allowed
	}
	// The authorizer learns of the applied Role and ClusterRole from its
	// informers: every denial below is judged once the grants are seen.
	// The Role is one object, so what it denies is then what it denies.
	localcluster.Eventually(t, 60*time.Second, "the chart's Role and ClusterRole in effect", func() bool {
		return can("list", "example.com", "widgets", markers) && can("list", "apiextensions.k8s.io", "customresourcedefinitions", "")
	})

	t.Run("SubjectAccessReview", func(t *testing.T) {
		// Each named group's resources, those of its CRD and any other it
		// may serve later, in the marker namespace only.
		for _, r := range []schema.GroupResource{{Group: "example.com", Resource: "widgets"}, {Group: "example.net", Resource: "sprockets"}, {Group: "example.com", Resource: "gadgets"}} {
			if !can("list", r.Group, r.Resource, markers) {
				t.Errorf("may not list %s in %s, a group crds names", r, markers)
			}
			for _, ns := range []string{"default", release} {
				if can("list", r.Group, r.Resource, ns) {
					t.Errorf("may list %s in %s, where no probe is", r, ns)
				}
			}
			if can("list", r.Group, r.Resource, "") {
				t.Errorf("may list %s cluster-wide", r)
			}
		}
		for _, ns := range []string{markers, release, "default", "kube-system"} {
			for _, verb := range []string{"get", "list", "watch"} {
				if can(verb, "", "secrets", ns) {
					t.Errorf("may %s Secrets in %s", verb, ns)
				}
			}
		}
		// Every namespaced resource the apiserver serves, of every group:
		// in the marker namespace, list only on the named groups' and on
		// ConfigMaps (the marker kind's own grant), get on none.
		_, lists, err := adminClient.Discovery().ServerGroupsAndResources()
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, l := range lists {
			gv, err := schema.ParseGroupVersion(l.GroupVersion)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range l.APIResources {
				if !r.Namespaced || strings.Contains(r.Name, "/") {
					continue
				}
				checked++
				wantList := gv.Group == "example.com" || gv.Group == "example.net" || (gv.Group == "" && r.Name == "configmaps")
				if got := can("list", gv.Group, r.Name, markers); got != wantList {
					t.Errorf("list on %s in %s allowed: %v, want %v", schema.GroupResource{Group: gv.Group, Resource: r.Name}, markers, got, wantList)
				}
				if can("get", gv.Group, r.Name, markers) {
					t.Errorf("may get %s in %s: freshness only lists", schema.GroupResource{Group: gv.Group, Resource: r.Name}, markers)
				}
			}
		}
		// The core group's pods, secrets, ..., apps' and the three CRDs'.
		if checked < 20 {
			t.Errorf("discovery listed %d namespaced resources, want the apiserver's and the CRDs'", checked)
		}
	})

	t.Run("as the ServiceAccount", func(t *testing.T) {
		widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
		gizmos := schema.GroupVersionResource{Group: "example.org", Version: "v1", Resource: "gizmos"}
		dyn := dynamic.NewForConfigOrDie(saCfg)
		if _, err := dyn.Resource(widgets).Namespace(markers).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("listing widgets.example.com in %s: %v", markers, err)
		}
		if _, err := dyn.Resource(gizmos).Namespace(markers).List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("listing gizmos.example.org, a group crds does not name: %v, want forbidden", err)
		}
		if _, err := sa.CoreV1().Secrets(markers).List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("listing Secrets in %s: %v, want forbidden", markers, err)
		}
	})

	t.Run("measured: the named groups only", func(t *testing.T) {
		kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
		if err := localcluster.WriteKubeconfig(saCfg, kubeconfig); err != nil {
			t.Fatal(err)
		}
		cfgFile := filepath.Join(t.TempDir(), "config.yml")
		if err := os.WriteFile(cfgFile, []byte(renderedConfig(t, objs, "wp-watchprobe")), 0o600); err != nil {
			t.Fatal(err)
		}
		url := runExporter(t, "--kubeconfig", kubeconfig, "--config.file", cfgFile, "--probe.replica", "crds-test")
		// An answered consistent LIST of each named group's resource: a
		// check the Role refused would be an error, never a measurement.
		var body string
		answered := func(resource string) float64 {
			return sumSamples(body, "watchprobe_list_freshness_seconds_count{", resource)
		}
		localcluster.EventuallyShows(t, 120*time.Second, "freshness measures widgets and sprockets", func() bool {
			body = scrape(url)
			return answered("widgets.example.com") > 0 && answered("sprockets.example.net") > 0
		}, func() string { return grep(body, "watchprobe_list_freshness_") })
		for _, r := range []string{"widgets.example.com", "sprockets.example.net"} {
			if n := sumSamples(body, "watchprobe_list_freshness_errors_total{", r); n != 0 {
				t.Errorf("%v freshness errors of %s with the chart's RBAC:\n%s", n, r, grep(body, "watchprobe_list_freshness_errors_total{"))
			}
		}
		// gizmos.example.org was served before the exporter started, so the
		// resolution that found widgets had it too: crds left it out.
		if strings.Contains(body, `resource="gizmos.example.org"`) {
			t.Errorf("series of gizmos.example.org, a group crds does not name:\n%s", grep(body, "watchprobe_list_freshness_"))
		}
	})
}

// crdOf is a namespaced CRD plural.group of kind, served and stored in v1,
// its objects of any shape.
func crdOf(plural, kind, group string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"plural": plural, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// sumSamples is the sum of the samples in body (the text exposition) of
// the series that start with prefix and have resource as their resource
// label.
func sumSamples(body, prefix, resource string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, prefix) || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}
