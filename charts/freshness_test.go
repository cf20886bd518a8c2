package charts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A probe's freshness checks get list on exactly their resources in the
// probe's namespace, and a ClusterRole with list on the cluster-scoped
// ones (cluster_resources, or the CRDs for crds) and what tells an
// uncached resource: list on APIServices, get on /metrics. crds grants
// list on the groups it names, each group's every resource, and on no
// other group. Without freshness, no ClusterRole.
func TestRenderFreshnessRBAC(t *testing.T) {
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
		{"CRD groups", "{resources: [], crds: [example.com, cert-manager.io]}",
			[]any{rule("cert-manager.io", "*"), rule("example.com", "*")},
			append([]any{rule("apiextensions.k8s.io", "customresourcedefinitions")}, uncachedRules()...)},
		{"a CRD group beside resources", "{resources: [pods, widgets.example.org], crds: [example.com]}",
			[]any{rule("example.com", "*"), rule("", "pods"), rule("example.org", "widgets")},
			append([]any{rule("apiextensions.k8s.io", "customresourcedefinitions")}, uncachedRules()...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRBAC(t, "freshness: "+tc.freshness, tc.namespaced, map[string][]any{"-freshness": tc.cluster})
		})
	}
}

// The schema refuses a crds that is not a list of groups a CRD can have,
// at the setting, as pkg/config does: true (which once meant every
// group), the core group, a wildcard, a group kube-apiserver serves.
func TestSchemaRejectsCRDs(t *testing.T) {
	probe := []string{"probes[0].name=x", "probes[0].namespace=probes"}
	for _, tc := range []struct{ set, want string }{
		{"probes[0].freshness.crds=true", "at '/probes/0/freshness/crds': value must be 'a list of API groups, e.g. [example.com]'"},
		{"probes[0].freshness.crds=example.com", "at '/probes/0/freshness/crds': value must be 'a list of API groups, e.g. [example.com]'"},
		{"probes[0].freshness.crds[0]=", "at '/probes/0/freshness/crds/0': '' does not match pattern"},
		{"probes[0].freshness.crds[0]=*", "at '/probes/0/freshness/crds/0': '*' does not match pattern"},
		{"probes[0].freshness.crds[0]=*.example.com", "at '/probes/0/freshness/crds/0': '*.example.com' does not match pattern"},
		{"probes[0].freshness.crds[0]=apps", "at '/probes/0/freshness/crds/0': 'apps' does not match pattern"},
		{"probes[0].freshness.crds[0]=rbac.authorization.k8s.io", "at '/probes/0/freshness/crds/0': 'not' failed"},
		{"probes[0].freshness.crds={example.com,example.com}", "at '/probes/0/freshness/crds': items at 0 and 1 are equal"},
	} {
		args := []string{"template", "wp", chartDir}
		for _, s := range append(probe, tc.set) {
			args = append(args, "--set", s)
		}
		_, err := helm(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: %v, want an error with %q", tc.set, err, tc.want)
		}
	}
}

// A probe's WatchList sync checks get watch on exactly their resources in
// the probe's namespace, beside the freshness checks' list; a ClusterRole
// of their own only for cluster_resources.
func TestRenderWatchListRBAC(t *testing.T) {
	for _, tc := range []struct {
		name, probe string
		namespaced  []any
		cluster     map[string][]any
	}{
		{"defaults", "watch_list: {}", []any{
			watchRule("", "configmaps"), watchRule("discovery.k8s.io", "endpointslices"), watchRule("coordination.k8s.io", "leases"), watchRule("", "pods"),
		}, nil},
		{"beside freshness with nodes", "freshness: {resources: [pods]}, watch_list: {resources: [pods, widgets.example.com], cluster_resources: [nodes]}",
			[]any{rule("", "pods"), watchRule("", "pods"), watchRule("example.com", "widgets")},
			map[string][]any{"-freshness": uncachedRules(), "-watchlist": {watchRule("", "nodes")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkRBAC(t, tc.probe, tc.namespaced, tc.cluster)
		})
	}
}

// checkRBAC renders a probe in namespace probes with fields (flow YAML)
// and checks the rules of its namespace's Role after the marker kind's,
// and that the ClusterRoles are exactly those of cluster, by the suffix of
// their names, each with its rules and bound.
func checkRBAC(t *testing.T, fields string, namespaced []any, cluster map[string][]any) {
	t.Helper()
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("probes:\n  - {name: p, namespace: probes, "+fields+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var role *unstructured.Unstructured
	clusterRoles, bound := map[string]*unstructured.Unstructured{}, map[string]bool{}
	for _, o := range render(t, "monitoring", values) {
		switch o.GetKind() {
		case "Role":
			if o.GetNamespace() == "probes" {
				role = o
			}
		case "ClusterRole":
			clusterRoles[o.GetName()] = o
		case "ClusterRoleBinding":
			bound[field(t, o, "roleRef", "name").(string)] = true
		}
	}
	if role == nil {
		t.Fatal("no Role in the probe's namespace")
	}
	// The marker kind's rule first, then the checks'.
	if got := field(t, role, "rules").([]any)[1:]; !equalJSON(got, namespaced) {
		t.Errorf("rules in probes %v, want %v", got, namespaced)
	}
	if len(clusterRoles) != len(cluster) || len(bound) != len(cluster) {
		t.Errorf("%d ClusterRoles, %d bound, want %d", len(clusterRoles), len(bound), len(cluster))
	}
	for name, cr := range clusterRoles {
		var want []any
		for suffix, rules := range cluster {
			if strings.HasSuffix(name, suffix) {
				want = rules
			}
		}
		if got := field(t, cr, "rules"); want == nil || !equalJSON(got, want) {
			t.Errorf("ClusterRole %s rules %v, want %v", name, got, want)
		}
		if !bound[name] {
			t.Errorf("ClusterRole %s not bound", name)
		}
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

func watchRule(group, resource string) any {
	return map[string]any{"apiGroups": []any{group}, "resources": []any{resource}, "verbs": []any{"watch"}}
}
