package config

import (
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// `freshness: {}` turns the checks on with the defaults; a list replaces
// the default resources; no setting leaves them off; a cluster-scoped
// resource is one only when listed under cluster_resources.
func TestFreshnessSetting(t *testing.T) {
	probes, err := LoadFile("testdata/freshness.yml")
	if err != nil {
		t.Fatal(err)
	}
	def, nodes, off := probes[0].Freshness, probes[1].Freshness, probes[2].Freshness
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
	// What is written loads back the same, off as off.
	for _, p := range probes {
		back := roundTrip(t, p)
		if back.Freshness.Enabled() != p.Freshness.Enabled() || !slices.Equal(back.Freshness.Resources, p.Freshness.Resources) {
			t.Errorf("%s: round trip %+v, want %+v", p.Name, back.Freshness, p.Freshness)
		}
	}
}

func TestFreshnessRejected(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"name: p\nfreshness: on", "probe at line 1: freshness: \"on\" is not a setting; write a mapping, e.g. `freshness: {resources: [pods, configmaps], every: 30s}`, or `freshness: {}` for the defaults"},
		{"name: p\nfreshness: {max_crds: 0, crds: true}", `probe "p" (line 1): freshness.max_crds: 0 is out of range; use 1 to 100`},
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
