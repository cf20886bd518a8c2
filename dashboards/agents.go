package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/text"
)

// agentRowTitle is the row of the node agents (watchprobe-agent), whose
// series exist only where the chart runs them.
const agentRowTitle = "Node agents"

// worstNodes is how many nodes the worst nodes table lists: on thousands
// of nodes, the ones to look at, not a page of healthy ones.
const worstNodes = 20

// noZone names the zone of the nodes whose agent found none, which
// Prometheus keeps as no zone label at all: a line or a row of its own,
// named, rather than one without a name.
const noZone = "(no zone)"

// Windows of a node's degraded verdict, the node agent's definition: a
// node is degraded when its agent counted a miss, a stall or a broken
// stream end over degradedWindow, or was unhealthy throughout
// unhealthyWindow. Computed here from the agents' counters.
const (
	degradedWindow  = "10m"
	unhealthyWindow = "5m"
)

// agentSel selects the agents' series of the selected cluster. Only the
// cluster: the agents are a DaemonSet of their own, whose job, pod and
// instance are not the exporter's that the other variables choose, and
// their series carry no probe or path.
func (g gen) agentSel() string { return g.cluster + `=~"$cluster"` }

// zoned is e with an empty zone named noZone.
func zoned(e string) string {
	return `label_replace(` + e + `, "zone", "` + noZone + `", "zone", "")`
}

// perNode is fn (increase, rate, max_over_time...) of an agent metric
// over window, summed per node: a node's agent restarted is one node.
func (g gen) perNode(agg, fn, metric, window string) string {
	return agg + ` by (node, zone) (` + zoned(fn+`(`+metric+`{`+g.agentSel()+`}[`+window+`])`) + `)`
}

// degradedNodes is 1 per node its agent found degraded: a miss, a stall
// or a broken stream end counted over the last degradedWindow, or healthy
// 0 throughout the last unhealthyWindow, which an agent that started within
// it has not been (its watch is not live in its first moments): else every
// node of a DaemonSet's rollout would read degraded.
func (g gen) degradedNodes() string {
	w := degradedWindow
	return `(` + g.perNode("sum", "increase", "watchprobe_agent_events_missed_total", w) + ` > 0` +
		` or ` + g.perNode("sum", "increase", "watchprobe_agent_stalls_total", w) + ` > 0` +
		` or ` + g.perNode("sum", "increase", "watchprobe_agent_stream_ends_total", w) + ` > 0` +
		` or ` + g.perNode("max", "max_over_time", "watchprobe_agent_healthy", unhealthyWindow) + ` == 0` +
		` and ` + `max by (node, zone) (` + zoned(`watchprobe_agent_healthy{`+g.agentSel()+`} offset `+unhealthyWindow) + `)) * 0 + 1`
}

// healthyNow is each node's agent's healthy gauge now (the lowest, while a
// node's agent is replaced and two report).
func (g gen) healthyNow() string {
	return `min by (node, zone) (` + zoned(`watchprobe_agent_healthy{`+g.agentSel()+`}`) + `)`
}

// agentRow is the node agents' row: collapsed, as it has data only where
// the chart runs the agents (agent.enabled), and its table reads every
// node's series.
func (g gen) agentRow() *dashboard.RowBuilder {
	sel := g.agentSel()
	inRange := func(metric string) string { return g.perNode("sum", "increase", metric, "$__range") }
	// A node's problems over the range: what the degraded verdict counts.
	// Lost events are missed ones first, and not counted twice.
	problems := inRange("watchprobe_agent_events_missed_total") + " + " + inRange("watchprobe_agent_stalls_total") + " + " + inRange("watchprobe_agent_stream_ends_total")
	// The worst nodes: unhealthy now first, then the most problems; a node
	// whose agent no longer reports ranks by its problems.
	rank := `(` + problems + ` + 1e9 * (1 - ` + g.healthyNow() + `) or ` + problems + `)`
	worst := func(e string) string {
		return e + ` and on (node, zone) topk(` + num(worstNodes) + `, ` + rank + `)`
	}
	col := func(e, ref string) *prometheus.DataqueryBuilder {
		return query(worst(e), "").Instant().Format(prometheus.PromQueryFormatTable).RefId(ref)
	}
	counts := func() []dashboard.DynamicConfigValue {
		return cell("short", steps("green", step{1, replica}), dashboard.DynamicConfigValue{Id: "decimals", Value: 0})
	}
	healthyMappings := []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: map[string]dashboard.ValueMappingResult{
		"0": {Text: cog.ToPtr("no"), Color: cog.ToPtr(replica)},
		"1": {Text: cog.ToPtr("yes"), Color: cog.ToPtr("green")}}}}}
	const unhealthyRule = "its agent counted a missed event, a stall or a broken stream end over the last " + degradedWindow + ", or was unhealthy throughout the last " + unhealthyWindow + " (an agent started within them is not yet)"
	zoneNote := " A node whose agent found no zone (no --zone, no topology.kubernetes.io/zone label) is in zone " + noZone + "."

	reporting := `count(group by (node) (watchprobe_agent_healthy{` + sel + `}))`
	// 0 rather than no data while agents report and none is degraded.
	degraded := `count(` + g.degradedNodes() + `) or 0 * ` + reporting
	degradedByZone := `count by (zone) (` + g.degradedNodes() + `) or 0 * count by (zone) (` + zoned(`watchprobe_agent_healthy{`+sel+`}`) + `)`
	zoneQuantile := func(q string) string {
		return `histogram_quantile(` + q + `, sum by (zone) (` + zoned(`rate(watchprobe_agent_event_latency_seconds{`+sel+`}[$__rate_interval])`) + `))`
	}

	return dashboard.NewRowBuilder(agentRowTitle).Collapsed(true).
		WithPanel(text.NewPanelBuilder().Title("About this row").Height(3).Span(24).Mode(text.TextModeMarkdown).
			Content("Each node's own watch, measured by its **watchprobe-agent**, the DaemonSet the chart runs with its `agent` values: " +
				"every panel here reads `watchprobe_agent_*` of the selected cluster and shows **no data** where no agents run. " +
				"The latency panels need Prometheus to ingest native histograms (`scrape_native_histograms`); the agents have no classic buckets.")).
		WithPanel(stat.NewPanelBuilder().Title("Agents reporting, degraded").
			Description("Whether WatchprobeNodesWatchDegraded fires now (\"firing\", red: it pages, enough of the cluster's nodes are degraded that the control plane is the problem; \"quiet\": it does not). "+
				"Beside it the nodes whose agent reports now (its watchprobe_agent_healthy series is scraped), and of them the nodes degraded: "+unhealthyRule+" (yellow from 1: WatchprobeNodeWatchDegraded, a ticket per node). "+
				"No data without agents; agents expected but not reporting are WatchprobeAgentsMissing.").
			Datasource(datasource).Height(8).Span(6).NoValue("no agents").
			WithTarget(query(g.firing("WatchprobeNodesWatchDegraded", g.cluster, sel, false, `watchprobe_agent_healthy{`+sel+`}`), "alert").RefId("paging")).
			WithTarget(query(reporting, "reporting").RefId("reporting")).
			WithTarget(query(degraded, "degraded").RefId("degraded")).
			GraphMode(common.BigValueGraphModeNone).ColorMode(common.BigValueColorModeBackground).Unit("short").
			Thresholds(thresholds("green", step{1, paging})).
			OverrideByQuery("paging", []dashboard.DynamicConfigValue{{Id: "mappings", Value: firingMappings()}}).
			OverrideByQuery("reporting", []dashboard.DynamicConfigValue{{Id: "thresholds", Value: steps(replica, step{1, "green"})}}).
			OverrideByQuery("degraded", []dashboard.DynamicConfigValue{{Id: "thresholds", Value: steps("green", step{1, replica})}})).
		WithPanel(series("Nodes degraded by zone", "Nodes whose agent found them degraded, per zone: "+unhealthyRule+". "+
			"Many in one zone: that zone's network path to the control plane; many in every zone: the control plane (WatchprobeNodesWatchDegraded)."+zoneNote, "short",
			query(degradedByZone, "{{zone}}")).Span(9)).
		WithPanel(g.latency("Agent event latency by zone (p50, p90)", "From just before an agent's marker write was sent to the event's arrival on that node's own watch, the quantiles of every node of the zone together (their native histograms summed: no data where Prometheus ingests no native histograms)."+zoneNote,
			query(zoneQuantile("0.5"), "p50 {{zone}}"),
			query(zoneQuantile("0.9"), "p90 {{zone}}")).Span(9)).
		WithPanel(table.NewPanelBuilder().Title("Worst nodes").
			Description("The "+num(worstNodes)+" worst nodes of the selected cluster by their agents: those unhealthy now first, then by their problems over the dashboard's range (missed events + stalls + broken stream ends, what the degraded verdict counts). "+
				"Per node: its zone, its problems, the events its agent missed (not arrived by the deadline: late or lost) and lost (not arrived by lost_after; each lost one was missed first), its watch's stalls and broken stream ends (ended other than at their requested timeout), "+
				"the p90 latency of its events over the range (from its native histogram; yellow from the SLO's objective, "+num(g.p.objective)+" s) and whether its agent is healthy now (watch up, not stalled, its latest write on time). "+
				"Counts are yellow from 1: one node pages nothing. A node whose agent stopped reporting has no healthy value (WatchprobeAgentsMissing).").
			Datasource(datasource).Height(10).Span(24).
			WithTarget(col(problems, "problems")).
			WithTarget(col(inRange("watchprobe_agent_events_missed_total"), "missed")).
			WithTarget(col(inRange("watchprobe_agent_events_lost_total"), "lost")).
			WithTarget(col(inRange("watchprobe_agent_stalls_total"), "stalls")).
			WithTarget(col(inRange("watchprobe_agent_stream_ends_total"), "ends")).
			WithTarget(col(`histogram_quantile(0.9, `+inRange("watchprobe_agent_event_latency_seconds")+`)`, "p90")).
			WithTarget(col(g.healthyNow(), "healthy")).
			WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
			WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
				"excludeByName": map[string]any{"Time": true},
				"renameByName": map[string]any{"Value #problems": "problems", "Value #missed": "missed", "Value #lost": "lost",
					"Value #stalls": "stalls", "Value #ends": "broken stream ends", "Value #p90": "p90 latency", "Value #healthy": "healthy now"},
			}}).
			SortBy([]cog.Builder[common.TableSortByFieldState]{
				common.NewTableSortByFieldStateBuilder().DisplayName("healthy now").Desc(false),
				common.NewTableSortByFieldStateBuilder().DisplayName("problems").Desc(true),
			}).
			OverrideByName("problems", counts()).
			OverrideByName("missed", counts()).
			OverrideByName("lost", counts()).
			OverrideByName("stalls", counts()).
			OverrideByName("broken stream ends", counts()).
			OverrideByName("p90 latency", cell("s", steps("green", step{g.p.objective, replica}))).
			OverrideByName("healthy now", cell("short", steps(replica, step{1, "green"}), dashboard.DynamicConfigValue{Id: "mappings", Value: healthyMappings})))
}
