package config

import (
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// `freshness: {}` turns the checks on with the defaults; a list replaces
// the default resources; no setting leaves them off; a cluster-scoped
// resource is one only when listed under cluster_resources; named CRD
// groups alone turn the checks on.
func TestFreshnessSetting(t *testing.T) {
	probes, err := LoadFile("testdata/freshness.yml")
	if err != nil {
		t.Fatal(err)
	}
	def, nodes, off, crds := probes[0].Freshness, probes[1].Freshness, probes[2].Freshness, probes[3].Freshness
	if !def.Enabled() || !slices.Equal(def.Resources, DefaultFreshnessConfig().Resources) || time.Duration(def.Every) != 30*time.Second || !def.Reads || time.Duration(def.QueuedAfter) != 300*time.Millisecond {
		t.Errorf("freshness: {} = %+v, want the defaults", def)
	}
	if got := nodes.ParseResources(); !slices.Equal(got, []Resource{{Resource: "widgets", Group: "example.com"}, {Resource: "nodes", Cluster: true}}) {
		t.Errorf("resources %+v", got)
	}
	if got := nodes.ParseResources()[0].String(); got != "widgets.example.com" {
		t.Errorf("label %q", got)
	}
	if off.Enabled() {
		t.Errorf("no freshness setting: %+v, want off", off)
	}
	if !crds.Enabled() || !slices.Equal(crds.CRDs, CRDGroups{"example.com", "cert-manager.io"}) || !crds.CRDs.Has("cert-manager.io") || crds.CRDs.Has("") {
		t.Errorf("crds: [example.com, cert-manager.io] = %+v", crds)
	}
	// What is written loads back the same, off as off.
	for _, p := range probes {
		back := roundTrip(t, p)
		if back.Freshness.Enabled() != p.Freshness.Enabled() || !slices.Equal(back.Freshness.Resources, p.Freshness.Resources) || !slices.Equal(back.Freshness.CRDs, p.Freshness.CRDs) {
			t.Errorf("%s: round trip %+v, want %+v", p.Name, back.Freshness, p.Freshness)
		}
	}
}

func TestFreshnessRejected(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"name: p\nfreshness: on", "probe at line 1: freshness: \"on\" is not a setting; write a mapping, e.g. `freshness: {resources: [pods, configmaps], every: 30s}`, or `freshness: {}` for the defaults"},
		{"name: p\nfreshness: {max_crds: 0, crds: [example.com]}", `probe "p" (line 1): freshness.max_crds: 0 is out of range; use 1 to 100`},
		{"name: p\nfreshness: {bound: 5s}", `probe "p" (line 1): freshness.timeout: 5s is too short for the bound (5s); use at least 7s400ms (4/3 x (bound + 500ms)), or lower the bound: the apiserver may queue a LIST for a quarter of its timeout, then wait the bound before it asks etcd, so a shorter timeout turns every fallback into a timeout`},
		// Longer than the bound is not enough: 4s leaves 3s after a quarter
		// of it in the queue, the whole bound and nothing for etcd.
		{"name: p\nfreshness: {timeout: 4s}", `probe "p" (line 1): freshness.timeout: 4s is too short for the bound (3s); use at least 4s700ms (4/3 x (bound + 500ms)), or lower the bound: the apiserver may queue a LIST for a quarter of its timeout, then wait the bound before it asks etcd, so a shorter timeout turns every fallback into a timeout`},
		{"name: p\nfreshness: {timeout: 4600ms}", `probe "p" (line 1): freshness.timeout: 4s600ms is too short for the bound (3s); use at least 4s700ms (4/3 x (bound + 500ms)), or lower the bound: the apiserver may queue a LIST for a quarter of its timeout, then wait the bound before it asks etcd, so a shorter timeout turns every fallback into a timeout`},
		{"name: p\nfreshness: {every: 500ms}", `probe "p" (line 1): freshness.every: 500ms is too short; use at least 1s (30s is the default); freshness.timeout: 5s must be shorter than every (500ms), so that rounds do not overlap`},
		{"name: p\nfreshness: {resources: [pods.Bad_Group]}", `probe "p" (line 1): freshness.resources[0]: "pods.Bad_Group" has an invalid group; write resource or resource.group, e.g. pods or endpointslices.discovery.k8s.io`},
		{"name: p\nfreshness: {queued_after: 3s}", `probe "p" (line 1): freshness.queued_after: 3s is out of range; use more than 0 and less than the bound (3s): a cache read slower than that was queued (300ms is the default)`},
		{"name: p\nfreshness: {queued_after: 0s}", `probe "p" (line 1): freshness.queued_after: 0s is out of range; use more than 0 and less than the bound (3s): a cache read slower than that was queued (300ms is the default)`},
		{"name: p\nfreshness: {cluster_resources: [pods]}", `probe "p" (line 1): freshness.cluster_resources[0]: "pods" is listed twice (also freshness.resources[0])`},
	} {
		var c Config
		err := yaml.Unmarshal([]byte(tc.yaml), &c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got: %v\nwant: %s", tc.yaml, err, tc.want)
		}
	}
}

// crds takes named API groups only, each a group a CRD can have: never
// every group (true, a wildcard) nor the core group, whose list would
// include Secrets, nor one kube-apiserver serves itself.
func TestFreshnessCRDGroupsRejected(t *testing.T) {
	const hint = "name the API groups of the CRDs to check, e.g. `crds: [example.com, cert-manager.io]`; the chart grants list on those groups only"
	for _, tc := range []struct{ yaml, want string }{
		{"name: p\nfreshness: {crds: true}", `probe at line 1: freshness.crds: "true" is not a list of API groups; ` + hint},
		{"name: p\nfreshness: {crds: example.com}", `probe at line 1: freshness.crds: "example.com" is not a list of API groups; ` + hint},
		{"name: p\nfreshness: {crds: [{group: example.com}]}", "probe at line 1: freshness.crds: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!map into string; " + hint},
		{"name: p\nfreshness: {crds: ['']}", `probe "p" (line 1): freshness.crds[0]: "" is the core group (Secrets, ConfigMaps, ...), which has no custom resources; ` + hint},
		{"name: p\nfreshness: {crds: ['*']}", `probe "p" (line 1): freshness.crds[0]: "*" is a wildcard: it would grant list on every group, Secrets included; ` + hint},
		{"name: p\nfreshness: {crds: ['*.example.com']}", `probe "p" (line 1): freshness.crds[0]: "*.example.com" is a wildcard: it would grant list on every group, Secrets included; ` + hint},
		{"name: p\nfreshness: {crds: [Example.com]}", `probe "p" (line 1): freshness.crds[0]: "Example.com" is not an API group (a lowercase DNS name); ` + hint},
		{"name: p\nfreshness: {crds: [apps]}", `probe "p" (line 1): freshness.crds[0]: "apps" has no dot: a CRD's group is a domain with at least one dot, and the groups without one are kube-apiserver's own; ` + hint},
		{"name: p\nfreshness: {crds: [example.com, rbac.authorization.k8s.io]}", `probe "p" (line 1): freshness.crds[1]: "rbac.authorization.k8s.io" is a group kube-apiserver serves itself, which has no custom resources; ` + hint},
		{"name: p\nfreshness: {crds: [example.com, example.org, example.com]}", `probe "p" (line 1): freshness.crds[2]: "example.com" is listed twice (also freshness.crds[0])`},
	} {
		var c Config
		err := yaml.Unmarshal([]byte(tc.yaml), &c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got: %v\nwant: %s", tc.yaml, err, tc.want)
		}
	}
}

func TestFreshnessStuckWindow(t *testing.T) {
	var c Config
	err := yaml.Unmarshal([]byte("name: p\nfreshness: {every: 10s, stuck_window: 20s}"), &c)
	want := `probe "p" (line 1): freshness.stuck_window: 20s is too short; use at least 3 x every (30s), so that one slow check is not a stuck cache`
	if err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
}

// The shortest timeout the bound allows is accepted, as are the defaults.
func TestFreshnessTimeoutAtItsLeast(t *testing.T) {
	for _, y := range []string{"name: p\nfreshness: {timeout: 4700ms}", "name: p\nfreshness: {bound: 1500ms, timeout: 2700ms}", "name: p\nfreshness: {}"} {
		var c Config
		if err := yaml.Unmarshal([]byte(y), &c); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
}
