package charts

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A probe's freshness checks get list on exactly their resources in the
// probe's namespace, and a ClusterRole with list on the cluster-scoped
// ones (cluster_resources, or crds) and what tells an uncached resource:
// list on APIServices, get on /metrics. Without freshness, no ClusterRole.
func TestRenderFreshnessRBAC(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, freshness string
		namespaced      []any
		cluster         []any
	}{
		{"defaults", "{}", []any{
			rule("", "configmaps"), rule("discovery.k8s.io", "endpointslices"), rule("coordination.k8s.io", "leases"), rule("", "pods"),
		}, uncachedRules()},
		{"a CRD and nodes", "{resources: [pods, widgets.example.com], cluster_resources: [nodes]}",
			[]any{rule("", "pods"), rule("example.com", "widgets")}, append([]any{rule("", "nodes")}, uncachedRules()...)},
		{"every CRD", "{resources: [], crds: true}",
			[]any{rule("*", "*")}, append([]any{rule("apiextensions.k8s.io", "customresourcedefinitions")}, uncachedRules()...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := filepath.Join(dir, tc.name+".yaml")
			data := "probes:\n  - {name: fresh, namespace: probes, freshness: " + tc.freshness + "}\n"
			if err := os.WriteFile(values, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			var role *unstructured.Unstructured
			var clusterRoles, clusterBindings []*unstructured.Unstructured
			for _, o := range render(t, "monitoring", values) {
				switch o.GetKind() {
				case "Role":
					if o.GetNamespace() == "probes" {
						role = o
					}
				case "ClusterRole":
					clusterRoles = append(clusterRoles, o)
				case "ClusterRoleBinding":
					clusterBindings = append(clusterBindings, o)
				}
			}
			if role == nil {
				t.Fatal("no Role in the probe's namespace")
			}
			rules := field(t, role, "rules").([]any)
			// The marker kind's rule first, then the freshness checks'.
			if got := rules[1:]; !equalJSON(got, tc.namespaced) {
				t.Errorf("freshness rules in probes %v, want %v", got, tc.namespaced)
			}
			if len(clusterRoles) != 1 || len(clusterBindings) != 1 {
				t.Fatalf("%d ClusterRoles, %d bindings, want one each", len(clusterRoles), len(clusterBindings))
			}
			if got := field(t, clusterRoles[0], "rules"); !equalJSON(got, tc.cluster) {
				t.Errorf("ClusterRole rules %v, want %v", got, tc.cluster)
			}
			if ref := field(t, clusterBindings[0], "roleRef", "name"); ref != clusterRoles[0].GetName() {
				t.Errorf("binding refers to %v, not %s", ref, clusterRoles[0].GetName())
			}
		})
	}
}

// uncachedRules are what the freshness checks read to tell a resource
// served without a watch cache.
func uncachedRules() []any {
	return []any{
		rule("apiregistration.k8s.io", "apiservices"),
		map[string]any{"nonResourceURLs": []any{"/metrics"}, "verbs": []any{"get"}},
	}
}

func rule(group, resource string) any {
	return map[string]any{"apiGroups": []any{group}, "resources": []any{resource}, "verbs": []any{"list"}}
}
