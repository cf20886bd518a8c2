package config

import (
	"slices"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// `watch_list: {}` turns the checks on with the defaults; a list replaces
// the default resources; no setting leaves them off; a cluster-scoped
// resource is one only when listed under cluster_resources; what is
// written loads back the same.
func TestWatchListSetting(t *testing.T) {
	probes, err := LoadFile("testdata/watchlist.yml")
	if err != nil {
		t.Fatal(err)
	}
	def, nodes, off := probes[0].WatchList, probes[1].WatchList, probes[2].WatchList
	if !def.Enabled() || !slices.Equal(def.Resources, DefaultWatchListConfig().Resources) || time.Duration(def.Every) != 30*time.Second ||
		time.Duration(def.Bound) != 5*time.Second || time.Duration(def.QueuedAfter) != 300*time.Millisecond || time.Duration(def.StuckWindow) != 5*time.Minute {
		t.Errorf("watch_list: {} = %+v, want the defaults", def)
	}
	if got := nodes.ParseResources(); !slices.Equal(got, []Resource{{Resource: "widgets", Group: "example.com"}, {Resource: "nodes", Cluster: true}}) {
		t.Errorf("resources %+v", got)
	}
	if time.Duration(nodes.Bound) != 2*time.Second || time.Duration(nodes.StuckWindow) != 5*time.Minute {
		t.Errorf("bound %s, stuck_window %s: want 2s and the default 5m", nodes.Bound, nodes.StuckWindow)
	}
	if off.Enabled() {
		t.Errorf("no watch_list setting: %+v, want off", off)
	}
	for _, p := range probes {
		back := roundTrip(t, p)
		if back.WatchList.Enabled() != p.WatchList.Enabled() || !slices.Equal(back.WatchList.Resources, p.WatchList.Resources) ||
			back.WatchList.Bound != p.WatchList.Bound {
			t.Errorf("%s: round trip %+v, want %+v", p.Name, back.WatchList, p.WatchList)
		}
	}
}

func TestWatchListRejected(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"name: p\nwatch_list: on", "probe at line 1: watch_list: \"on\" is not a setting; write a mapping, e.g. `watch_list: {resources: [pods, configmaps], every: 30s}`, or `watch_list: {}` for the defaults"},
		{"name: p\nwatch_list: {bound: 0s}", `probe "p" (line 1): watch_list.bound: must be positive, got 0s; 5s is the default`},
		{"name: p\nwatch_list: {every: 500ms}", `probe "p" (line 1): watch_list.every: 500ms is too short; use at least 1s (30s is the default); watch_list.bound: 5s must be shorter than every (500ms), so that a check ends before the next round`},
		{"name: p\nwatch_list: {queued_after: 5s}", `probe "p" (line 1): watch_list.queued_after: 5s is out of range; use more than 0 and less than the bound (5s): a sync whose baseline took that long waited in the apiserver's queue (300ms is the default)`},
		{"name: p\nwatch_list: {queued_after: 0s}", `probe "p" (line 1): watch_list.queued_after: 0s is out of range; use more than 0 and less than the bound (5s): a sync whose baseline took that long waited in the apiserver's queue (300ms is the default)`},
		{"name: p\nwatch_list: {every: 10s, stuck_window: 20s}", `probe "p" (line 1): watch_list.stuck_window: 20s is too short; use at least 3 x every (30s), so that one slow sync is not a stuck one`},
		{"name: p\nwatch_list: {resources: [pods.Bad_Group]}", `probe "p" (line 1): watch_list.resources[0]: "pods.Bad_Group" has an invalid group; write resource or resource.group, e.g. pods or endpointslices.discovery.k8s.io`},
		{"name: p\nwatch_list: {cluster_resources: [pods]}", `probe "p" (line 1): watch_list.cluster_resources[0]: "pods" is listed twice (also watch_list.resources[0])`},
		{"name: p\nwatch_list: {every: often}", `probe at line 1: watch_list.every: "often" is not a duration; write a number and a unit, e.g. 10s or 1m`},
	} {
		var c Config
		err := yaml.Unmarshal([]byte(tc.yaml), &c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got: %v\nwant: %s", tc.yaml, err, tc.want)
		}
	}
}
