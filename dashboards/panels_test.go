package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// over5m replaces Grafana's variables with what they stand for when every
// value is selected, over 5 minutes.
func over5m(expr string) string {
	return strings.NewReplacer(
		"$__rate_interval", "5m", "$__range", "5m",
		"$cluster", ".*", "$job", ".*", "$pod", ".*", "$probe", ".*", "$path", ".*", "$apiserver", ".*",
	).Replace(expr)
}

// The panels' queries, run by promtool over a fleet Prometheus holds in
// different forms, give every exporter and cluster its due: a cluster with
// native histograms only next to one with classic buckets (a fleet half
// through a migration to --no-metrics.classic-histograms), both forms of
// one target (always_scrape_classic_histograms), and two clusters whose
// apiservers share an address (kubeadm's and kind's defaults); and the
// verdicts, the fleet table and the vantage row read what pages and who
// reports: a cluster whose exporter stopped, alerts pending or of one
// replica, two replicas on one node.
func TestPanelsOverMixedFleet(t *testing.T) {
	q := panelQueries(t)
	panel := func(title string, i int) string {
		t.Helper()
		if len(q[title]) <= i {
			t.Fatalf("panel %q has %d queries, want more than %d", title, len(q[title]), i)
		}
		return over5m(q[title][i])
	}
	type sample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	type exprTest struct {
		Expr       string   `yaml:"expr"`
		EvalTime   string   `yaml:"eval_time"`
		ExpSamples []sample `yaml:"exp_samples"`
	}
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type group struct {
		Name  string     `yaml:"name"`
		Inter string     `yaml:"interval"`
		Input []series   `yaml:"input_series"`
		Exprs []exprTest `yaml:"promql_expr_test"`
	}
	const (
		// 60 events a minute in 4 ms, as classic buckets and as a native
		// histogram (bucket -63 of schema 3); and 60 in about 2.5 s, in
		// native bucket 11, (2.378, 2.594].
		fastClassic = `0+60x10`
		fastNative  = `{{schema:3 count:0 sum:0}}+{{schema:3 count:60 sum:0.24 offset:-63 buckets:[60]}}x10`
		slowNative  = `{{schema:3 count:0 sum:0}}+{{schema:3 count:60 sum:150 offset:11 buckets:[60]}}x10`
	)
	lat := func(cluster, path, extra string) string {
		return `watchprobe_event_latency_seconds{cluster="` + cluster + `",job="wp",instance="a",probe="p",path="` + path + `",event="added"` + extra
	}
	bucket := func(cluster, path, extra, le string) string {
		return strings.Replace(lat(cluster, path, extra), "{", "_bucket{", 1) + `,le="` + le + `"}`
	}
	api := `,apiserver="172.18.0.2:6443"`
	// in is a panel's query with one cluster selected.
	in := func(title string, i int, cluster string) string {
		t.Helper()
		panel(title, i)
		return over5m(strings.ReplaceAll(q[title][i], "$cluster", cluster))
	}
	target := func(cluster, instance, pod, node string) string {
		return `{cluster="` + cluster + `",job="watchprobe",instance="` + instance + `",pod="` + pod + `",node="` + node + `"}`
	}
	ofPath := func(name, cluster, path, extra string) string {
		return name + `{cluster="` + cluster + `",job="watchprobe",instance="a",pod="p1",probe="p",path="` + path + `"` + extra + `}`
	}
	alert := func(name, state, vantage, severity, path string) string {
		return `ALERTS{alertname="` + name + `",alertstate="` + state + `",vantage_points="` + vantage + `",severity="` + severity + `",cluster="x",job="watchprobe",probe="p",path="` + path + `"}`
	}
	// The node agents' row over 30 minutes of cluster x, one minute a
	// sample: n1 (zone z1) healthy and fast, reported by two agents at
	// once (a DaemonSet's pod replaced); n2 (z1) missing events since 20m;
	// n3 (z2) unhealthy throughout and slow; n4, whose agent found no zone,
	// one broken stream end at 6m, outside the degraded verdict's 10
	// minutes; n5 (z3), whose agent started at 28m and is not healthy yet;
	// 22 healthy nodes in z3, more than the table's 20. Cluster
	// y's one node is healthy while WatchprobeNodesWatchDegraded pages there.
	agent := func(name, cluster, node, zone, instance string) string {
		return name + `{cluster="` + cluster + `",job="agents",instance="` + instance + `",node="` + node + `",zone="` + zone + `"}`
	}
	agentNode := func(cluster, node, zone, instance, healthy, missed, stalls, ends string) []series {
		return []series{
			{agent("watchprobe_agent_healthy", cluster, node, zone, instance), healthy},
			{agent("watchprobe_agent_events_missed_total", cluster, node, zone, instance), missed},
			{agent("watchprobe_agent_events_lost_total", cluster, node, zone, instance), `0x40`},
			{agent("watchprobe_agent_stalls_total", cluster, node, zone, instance), stalls},
			{agent("watchprobe_agent_stream_ends_total", cluster, node, zone, instance), ends},
		}
	}
	var agents []series
	agents = append(agents, agentNode("x", "n1", "z1", "a", `1x40`, `0x40`, `0x40`, `0x40`)...)
	agents = append(agents, agentNode("x", "n1", "z1", "b", `1x40`, `0x40`, `0x40`, `0x40`)...)
	agents = append(agents, agentNode("x", "n2", "z1", "c", `1x40`, `0x20 1+1x20`, `0x40`, `0x40`)...)
	agents = append(agents, agentNode("x", "n3", "z2", "d", `0x40`, `0x40`, `0x40`, `0x40`)...)
	agents = append(agents, agentNode("x", "n4", "", "e", `1x40`, `0x40`, `0x40`, `0x5 1x35`)...)
	agents = append(agents, agentNode("x", "n5", "z3", "f", `_x27 0x12`, `_x27 0x12`, `_x27 0x12`, `_x27 0x12`)...)
	for i := range 22 {
		agents = append(agents, agentNode("x", fmt.Sprintf("h%02d", i), "z3", fmt.Sprintf("h%02d", i), `1x40`, `0x40`, `0x40`, `0x40`)...)
	}
	agents = append(agents, agentNode("y", "m1", "z1", "a", `1x40`, `0x40`, `0x40`, `0x40`)...)
	agents = append(agents,
		series{agent("watchprobe_agent_event_latency_seconds", "x", "n1", "z1", "a"), strings.Replace(fastNative, "x10", "x40", 1)},
		series{agent("watchprobe_agent_event_latency_seconds", "x", "n3", "z2", "d"), strings.Replace(slowNative, "x10", "x40", 1)},
		series{`ALERTS{alertname="WatchprobeNodesWatchDegraded",alertstate="firing",severity="critical",cluster="y"}`, `1x40`},
		series{`ALERTS{alertname="WatchprobeNodesWatchDegraded",alertstate="firing",severity="warning",cluster="x"}`, `1x40`},
	)
	// overRange is an agent panel's query with cluster selected, over a
	// dashboard range of 30 minutes, in parentheses.
	overRange := func(title string, i int, cluster string) string {
		t.Helper()
		panel(title, i)
		return "(" + strings.NewReplacer("$__rate_interval", "5m", "$__range", "30m", "$cluster", cluster).Replace(q[title][i]) + ")"
	}
	one := func(e string) string { return `(` + e + `) * 0 + 1` }
	suite := map[string]any{
		"rule_files":          []string{},
		"evaluation_interval": "1m",
		"tests": []group{
			{
				Name:  "a slow cluster with native histograms only is not hidden by a fast one with classic buckets",
				Inter: "1m",
				Input: []series{
					{bucket("x", "watch", "", "0.005"), fastClassic},
					{bucket("x", "watch", "", "+Inf"), fastClassic},
					{lat("y", "watch", "") + "}", slowNative},
					{bucket("x", "apiserver", api, "0.005"), fastClassic},
					{bucket("x", "apiserver", api, "+Inf"), fastClassic},
					{lat("y", "apiserver", api) + "}", slowNative},
				},
				Exprs: []exprTest{
					// The p99 of each path is the slowest cluster's: y's,
					// in its bucket above 2.378 s.
					{Expr: `count(` + panel("Latency by path (p50, p90, p99)", 2) + ` > 2.378)`, EvalTime: "10m",
						ExpSamples: []sample{{Labels: `{}`, Value: 2}}},
					{Expr: `count(` + panel("p99 event latency", 0) + ` > 2.378)`, EvalTime: "10m",
						ExpSamples: []sample{{Labels: `{}`, Value: 1}}},
					// Per apiserver: one line per cluster, y's the slow one.
					{Expr: `round(` + panel("p99 by apiserver over the range", 0) + ` > 2.378, 0.01)`, EvalTime: "10m",
						ExpSamples: []sample{{Labels: `{cluster="y",apiserver="172.18.0.2:6443"}`, Value: 2.59}}},
					{Expr: `count(` + panel("Latency by apiserver (p99)", 0) + `)`, EvalTime: "10m",
						ExpSamples: []sample{{Labels: `{}`, Value: 2}}},
				},
			},
			{
				Name:  "a target stored in both forms is one distribution in the heatmap",
				Inter: "1m",
				Input: []series{
					{lat("c", "watch", "") + "}", fastNative},
					{bucket("c", "watch", "", "0.005"), fastClassic},
					{bucket("c", "watch", "", "+Inf"), fastClassic},
				},
				Exprs: []exprTest{
					// The classic buckets alone: 0.005 and +Inf.
					{Expr: `count(` + panel("Latency distribution", 0) + `)`, EvalTime: "10m",
						ExpSamples: []sample{{Labels: `{}`, Value: 2}}},
				},
			},
			{
				Name:  "two clusters' apiservers at one address stay apart",
				Inter: "1m",
				Input: []series{
					{`watchprobe_watch_stalled{cluster="x",job="wp",instance="a",probe="p",path="apiserver",apiserver="172.18.0.2:6443"}`, `1x10`},
					{`watchprobe_watch_stalled{cluster="y",job="wp",instance="a",probe="p",path="apiserver",apiserver="172.18.0.2:6443"}`, `0x10`},
				},
				Exprs: []exprTest{
					{Expr: panel("Stalled apiservers", 0), EvalTime: "10m",
						ExpSamples: []sample{
							{Labels: `{cluster="x",apiserver="172.18.0.2:6443"}`, Value: 1},
							{Labels: `{cluster="y",apiserver="172.18.0.2:6443"}`, Value: 0},
						}},
				},
			},
			{
				Name:  "what pages, and who reports: a cluster whose exporter stopped, alerts in their paging form, replicas on one node",
				Inter: "1m",
				Input: []series{
					// Cluster x: two replicas on node n1 report two probes'
					// results; one on n2 is up but reports none (as
					// WatchprobeVantagePointsMissing counts, no vantage
					// point), and a target of another job; y's exporter
					// stopped at 10m.
					{`up` + target("x", "a", "p1", "n1"), `1x40`},
					{`up` + target("x", "b", "p2", "n1"), `1x40`},
					{`up` + target("x", "c", "p3", "n2"), `1x40`},
					{`up{cluster="x",job="other",instance="z"}`, `1x40`},
					{`up` + target("y", "a", "p1", "n1"), `1x10`},
					{strings.Replace(`watchprobe_probe_success`+target("x", "a", "p1", "n1"), "}", `,probe="p"}`, 1), `1x40`},
					{strings.Replace(`watchprobe_probe_success`+target("x", "a", "p1", "n1"), "}", `,probe="q"}`, 1), `1x40`},
					{strings.Replace(`watchprobe_probe_success`+target("x", "b", "p2", "n1"), "}", `,probe="p"}`, 1), `0x40`},
					{strings.Replace(`watchprobe_probe_success`+target("y", "a", "p1", "n1"), "}", `,probe="p"}`, 1), `1x10`},
					{ofPath("watchprobe_path_up", "x", "informer", ""), `0x40`},
					{ofPath("watchprobe_path_up", "x", "watch", ""), `1x40`},
					{ofPath("watchprobe_watch_stalled", "x", "informer", ""), `0x40`},
					{ofPath("watchprobe_watch_stalled", "x", "watch", ""), `1x40`},
					// The informer path down, agreed and firing; the watch
					// path down, agreed but pending, and stalled for one
					// replica only; an agreed ticket (losses), which pages
					// nothing.
					{alert("WatchprobePathDown", "firing", "agreed", "critical", "informer"), `1x40`},
					{alert("WatchprobePathDown", "pending", "agreed", "critical", "watch"), `1x40`},
					{alert("WatchprobeWatchStalled", "firing", "one", "warning", "watch"), `1x40`},
					{alert("WatchprobeEventsLost", "firing", "agreed", "warning", "watch"), `1x40`},
				},
				Exprs: []exprTest{
					// The fleet table: x's one alert that pages, y's none;
					// x's three replicas up, y listed with 0, "no exporter".
					{Expr: panel(fleetPanel, 0), EvalTime: "30m",
						ExpSamples: []sample{{Labels: `{cluster="x"}`, Value: 1}, {Labels: `{cluster="y"}`, Value: 0}}},
					{Expr: panel(fleetPanel, 2), EvalTime: "30m",
						ExpSamples: []sample{{Labels: `{cluster="x"}`, Value: 3}, {Labels: `{cluster="y"}`, Value: 0}}},
					// The verdicts: firing where the agreed alert fires, quiet
					// where it is pending or only one replica's; beside it the
					// replicas that see the stall.
					{Expr: in("Paths down now", 0, "x"), EvalTime: "30m",
						ExpSamples: []sample{{Labels: `{path="informer"}`, Value: 1}, {Labels: `{path="watch"}`, Value: 0}}},
					// The agreed ticket is no page: not "firing".
					{Expr: `sum(` + in("Lost in range", 0, "x") + `) or vector(0)`, EvalTime: "30m",
						ExpSamples: []sample{{Labels: `{}`, Value: 0}}},
					{Expr: in("Stalled now", 0, "x"), EvalTime: "30m",
						ExpSamples: []sample{{Labels: `{path="informer"}`, Value: 0}, {Labels: `{path="watch"}`, Value: 0}}},
					{Expr: in("Stalled now", 1, "x"), EvalTime: "30m",
						ExpSamples: []sample{{Labels: `{path="informer"}`, Value: 0}, {Labels: `{path="watch"}`, Value: 1}}},
					// The vantage row: two replicas report, from one node.
					{Expr: in("Replicas reporting", 0, "x"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{cluster="x"}`, Value: 2}}},
					{Expr: in("Nodes reporting", 0, "x"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{cluster="x"}`, Value: 1}}},
					// Both clusters selected: one value each, y's 0 not
					// hidden by x's.
					{Expr: in("Replicas reporting", 0, ".*"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{cluster="x"}`, Value: 2}, {Labels: `{cluster="y"}`, Value: 0}}},
					{Expr: in("Replicas reporting by node", 0, "x"), EvalTime: "30m",
						ExpSamples: []sample{{Labels: `{cluster="x",node="n1"}`, Value: 2}}},
					{Expr: in("Replicas reporting", 0, "y"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{cluster="y"}`, Value: 0}}},
					{Expr: in("Nodes reporting", 0, "y"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{cluster="y"}`, Value: 0}}},
				},
			},
			{
				Name:  "the node agents: the worst nodes, degraded by the verdict's definition, zones' latency, agents reporting",
				Inter: "1m",
				Input: agents,
				Exprs: []exprTest{
					// Reporting: nodes, n1 once; degraded: n2 (missed) and
					// n3 (unhealthy), not n4 (its end is 25 minutes old) nor
					// n5 (unhealthy for 2 minutes of its 2).
					// Red only where the page fires at the page severity.
					{Expr: overRange(agentStat, 0, "x"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{cluster="x"}`, Value: 0}}},
					{Expr: overRange(agentStat, 1, "x"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{}`, Value: 27}}},
					{Expr: overRange(agentStat, 2, "x"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{}`, Value: 2}}},
					{Expr: overRange(agentStat, 0, "y"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{cluster="y"}`, Value: 1}}},
					{Expr: overRange(agentStat, 1, "y"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{}`, Value: 1}}},
					{Expr: overRange(agentStat, 2, "y"), EvalTime: "30m", ExpSamples: []sample{{Labels: `{}`, Value: 0}}},
					{Expr: overRange(agentStat, 1, "nosuch"), EvalTime: "30m"},
					{Expr: overRange(agentStat, 2, "nosuch"), EvalTime: "30m"},
					// By zone, every zone with agents, 0 where none is
					// degraded; n4's zone named.
					{Expr: overRange("Nodes degraded by zone", 0, "x"), EvalTime: "30m", ExpSamples: []sample{
						{Labels: `{zone="z1"}`, Value: 1}, {Labels: `{zone="z2"}`, Value: 1}, {Labels: `{zone="z3"}`, Value: 0}, {Labels: `{zone="(no zone)"}`, Value: 0}}},
					// Before n2's misses, z1 had none degraded; n4's stream
					// end at 6m is within the 10 minutes.
					{Expr: overRange("Nodes degraded by zone", 0, "x"), EvalTime: "10m", ExpSamples: []sample{
						{Labels: `{zone="z1"}`, Value: 0}, {Labels: `{zone="z2"}`, Value: 1}, {Labels: `{zone="z3"}`, Value: 0}, {Labels: `{zone="(no zone)"}`, Value: 1}}},
					// Each zone's quantiles from its nodes' native
					// histograms: z1 in n1's 4 ms bucket, z2 in n3's above
					// 2.378 s.
					{Expr: one(overRange(agentLatency, 0, "x") + ` < 0.0043`), EvalTime: "30m", ExpSamples: []sample{{Labels: `{zone="z1"}`, Value: 1}}},
					{Expr: one(overRange(agentLatency, 1, "x") + ` > 2.378`), EvalTime: "30m", ExpSamples: []sample{{Labels: `{zone="z2"}`, Value: 1}}},
					// The worst nodes: 20 rows of 27, n3 and n5 (unhealthy
					// now) and the nodes with problems in the range among
					// them.
					{Expr: `count(` + overRange(worstPanel, 0, "x") + `)`, EvalTime: "30m", ExpSamples: []sample{{Labels: `{}`, Value: 20}}},
					{Expr: one(overRange(worstPanel, 0, "x") + ` > 0`), EvalTime: "30m", ExpSamples: []sample{
						{Labels: `{node="n2",zone="z1"}`, Value: 1}, {Labels: `{node="n4",zone="(no zone)"}`, Value: 1}}},
					{Expr: one(overRange(worstPanel, 1, "x") + ` > 0`), EvalTime: "30m", ExpSamples: []sample{{Labels: `{node="n2",zone="z1"}`, Value: 1}}},
					{Expr: overRange(worstPanel, 2, "x") + ` > 0`, EvalTime: "30m"},
					{Expr: overRange(worstPanel, 3, "x") + ` > 0`, EvalTime: "30m"},
					{Expr: one(overRange(worstPanel, 4, "x") + ` > 0`), EvalTime: "30m", ExpSamples: []sample{{Labels: `{node="n4",zone="(no zone)"}`, Value: 1}}},
					{Expr: one(overRange(worstPanel, 5, "x") + ` > 2.378`), EvalTime: "30m", ExpSamples: []sample{{Labels: `{node="n3",zone="z2"}`, Value: 1}}},
					{Expr: one(overRange(worstPanel, 5, "x") + ` < 0.0043`), EvalTime: "30m", ExpSamples: []sample{{Labels: `{node="n1",zone="z1"}`, Value: 1}}},
					{Expr: overRange(worstPanel, 6, "x") + ` == 0`, EvalTime: "30m", ExpSamples: []sample{{Labels: `{node="n3",zone="z2"}`, Value: 0}, {Labels: `{node="n5",zone="z3"}`, Value: 0}}},
					// Every column lists the same 20 nodes.
					{Expr: `count(` + overRange(worstPanel, 6, "x") + ` unless on (node, zone) ` + overRange(worstPanel, 0, "x") + `) or vector(0)`, EvalTime: "30m", ExpSamples: []sample{{Labels: `{}`, Value: 0}}},
				},
			},
		},
	}
	data, err := yaml.Marshal(suite)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "panels_test.yml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(localcluster.ToolForTest(t, "promtool"), "test", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n%s", err, out, data)
	}
}

// The node agents' panels.
const (
	agentStat    = "Agents reporting, degraded"
	agentLatency = "Agent event latency by zone (p50, p90)"
	worstPanel   = "Worst nodes"
)
