package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// defaultClusterLabel is the target label that tells clusters apart where
// one Prometheus holds several; `-cluster-label` (and the chart's
// grafanaDashboard.clusterLabel) names another.
const defaultClusterLabel = "cluster"

var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).LegendFormat(legend)
}

func series(title, description, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Unit(unit).
		Datasource(datasource).Height(8).Span(12).Min(0)
	for _, q := range queries {
		p.WithTarget(q)
	}
	return p
}

// latency is a latency panel with the SLO's latency objective as a red line.
func (g gen) latency(title, description string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return series(title, description+" Red line: the SLO's latency objective ("+num(g.p.objective)+" s).", "s", queries...).
		Thresholds(thresholds("green", step{g.p.objective, "red"})).
		ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeLine))
}

// perMinute is the unit of every rate on the dashboard: marker events and
// checks come a few a minute, which per second would read as fractions.
// Each rate query multiplies its per-second rate by 60.
const perMinute = "opm"

// num is v as the JSON encoder writes it, for queries and descriptions.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// step is a threshold: from at on, color.
type step struct {
	at    float64
	color string
}

// steps colours values below the first step base, then each step's.
func steps(base string, s ...step) dashboard.ThresholdsConfig {
	out := []dashboard.Threshold{{Color: base}}
	for _, st := range s {
		out = append(out, dashboard.Threshold{Value: cog.ToPtr(st.at), Color: st.color})
	}
	return dashboard.ThresholdsConfig{Mode: dashboard.ThresholdsModeAbsolute, Steps: out}
}

// thresholds is steps for a panel's defaults.
func thresholds(base string, s ...step) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps(base, s...).Steps)
}

// single is a stat panel: every stat says with its colour whether its value
// is healthy, so each takes its thresholds.
func single(title, description, unit string, th *dashboard.ThresholdsConfigBuilder, q *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Unit(unit).
		Datasource(datasource).Height(4).Span(6).WithTarget(q).
		GraphMode(common.BigValueGraphModeArea).Thresholds(th).ColorMode(common.BigValueColorModeBackground)
}

// cell is a table column's override: its unit, and its cells' background
// coloured by thresholds of its own (a count is not judged as a burn rate).
func cell(unit string, th dashboard.ThresholdsConfig, extra ...dashboard.DynamicConfigValue) []dashboard.DynamicConfigValue {
	return append([]dashboard.DynamicConfigValue{
		{Id: "unit", Value: unit},
		{Id: "thresholds", Value: th},
		{Id: "color", Value: map[string]any{"mode": "thresholds"}},
		{Id: "custom.cellOptions", Value: common.TableCellOptions{TableColoredBackgroundCellOptions: &common.TableColoredBackgroundCellOptions{
			Type: common.TableCellDisplayModeColorBackground, Mode: cog.ToPtr(common.TableCellBackgroundDisplayModeBasic)}}},
	}, extra...)
}

// Colours of the verdicts: red is what pages, and nothing else is red; a
// problem one replica sees, which does not page, is yellow.
const (
	paging  = "red"
	replica = "yellow"
)

// firingMappings name an alert's state in the verdicts and the fleet
// table: 0 quiet, 1 firing.
func firingMappings() []dashboard.ValueMapping {
	return []dashboard.ValueMapping{
		{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: map[string]dashboard.ValueMappingResult{
			"0": {Text: cog.ToPtr("quiet"), Color: cog.ToPtr("green")}}}},
		{RangeMap: &dashboard.RangeMap{Type: dashboard.MappingTypeRangeToText, Options: dashboard.DashboardRangeMapOptions{
			From: cog.ToPtr(1.0), Result: dashboard.ValueMappingResult{Text: cog.ToPtr("firing"), Color: cog.ToPtr(paging)}}}},
	}
}

// verdict is a stat of what pages beside what the worst replica sees: its
// query "paging" is 1 while (or when, over the range) the alert fires in
// the form that pages (firing), red; its query "replica" is the worst
// replica's value, in unit, coloured by th, which is never red: one
// replica's view pages nothing.
func verdict(title, description string, pagingQuery, replicaQuery *prometheus.DataqueryBuilder, unit string, th dashboard.ThresholdsConfig) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Unit("short").
		Datasource(datasource).Height(4).Span(5).
		WithTarget(pagingQuery.RefId("paging")).WithTarget(replicaQuery.RefId("replica")).
		GraphMode(common.BigValueGraphModeNone).ColorMode(common.BigValueColorModeBackground).
		Thresholds(thresholds("green", step{1, paging})).
		OverrideByQuery("paging", []dashboard.DynamicConfigValue{{Id: "mappings", Value: firingMappings()}}).
		OverrideByQuery("replica", []dashboard.DynamicConfigValue{{Id: "unit", Value: unit}, {Id: "thresholds", Value: th}})
}

// runbook links a panel to the runbook of the alert that fires on what it
// shows.
func (g gen) runbook(alert string) []cog.Builder[dashboard.DashboardLink] {
	return []cog.Builder[dashboard.DashboardLink]{dashboard.NewDashboardLinkBuilder("Runbook: " + alert).
		Type(dashboard.DashboardLinkTypeLink).Icon("doc").TargetBlank(true).
		Url(g.runbooks + "#" + strings.ToLower(alert))}
}

// gen builds the dashboard's queries for one set of params.
type gen struct {
	p       params
	cluster string
	// runbooks is docs/alerts.md at the release's tag, where every alert
	// has its section.
	runbooks string
	// sel is what every query selects on; selPath adds the path. The
	// cluster variable matches everything (".*", which also matches series
	// without the label) unless the operator's Prometheus adds the label
	// and one value is chosen.
	sel, selPath string
	// selAgreed and selAgreedPath select the series that carry no vantage
	// point (the SLO's recorded series, the alerts in their paging form),
	// which no Replica choice selects or hides.
	selAgreed, selAgreedPath string
	// selUp selects the exporter's up series.
	selUp string
}

func newGen(p params) gen {
	cl := p.clusterLabel
	sel := cl + `=~"$cluster", job=~"$job", pod=~"$pod", probe=~"$probe"`
	agreed := cl + `=~"$cluster", job=~"$job", probe=~"$probe"`
	return gen{p: p, cluster: cl, runbooks: p.runbooks, sel: sel, selPath: sel + `, path=~"$path"`,
		selAgreed: agreed, selAgreedPath: agreed + `, path=~"$path"`,
		selUp: cl + `=~"$cluster", job="` + p.scrapeJob + `", job=~"$job"`}
}

// firing is, per group of by, 1 while alert fires (inRange: fired at any
// time in the range) in the form that pages: the agreed one
// (vantage_points="agreed", seen from enough nodes) or the only one (no
// vantage_points label: one vantage point is enough), never one replica's
// (vantage_points="one", a warning), and only at the page severity: an
// agreed ticket pages nothing and is never red. sel selects the alerts; the groups of
// base, a series of the same selection, read 0 while it is quiet, so that
// a quiet cluster shows "quiet" rather than no data.
func (g gen) firing(alert, by, sel string, inRange bool, base string) string {
	a := `ALERTS{alertname="` + alert + `", alertstate="firing", vantage_points!="one", severity="` + g.p.pageSeverity + `", ` + sel + `}`
	if inRange {
		a = `max_over_time(` + a + `[$__range])`
	}
	return fmt.Sprintf(`max by (%s) (%s) or 0 * group by (%s) (%s)`, by, a, by, base)
}

// quantile is a latency quantile at the rate interval.
func (g gen) quantile(q string, metric string, by string, selector string) string {
	return g.quantileOf(q, "rate", "$__rate_interval", metric, by, selector)
}

// quantileOf is the highest, over the selected targets, of each target's
// quantile of fn (rate or increase) over window, by the labels in by. Each
// target's comes from its classic buckets where Prometheus has them, else
// from its native histogram: the only form with
// --no-metrics.classic-histograms, and the form a Prometheus that ingests
// native histograms keeps by default. `or` takes one form per label set, so
// the forms are chosen per target (cluster, job, instance): chosen per
// group, a target with native histograms only would vanish behind any
// classic one in its group, as in a fleet half through a migration. The
// two forms cannot be summed into one quantile, so the panel shows the
// slowest target's, which is the quantile itself when one target is
// selected. Where Prometheus keeps both forms
// (always_scrape_classic_histograms), nothing counts twice.
func (g gen) quantileOf(q, fn, window, metric, by, selector string) string {
	labels := []string{g.cluster, "job", "instance"}
	for _, l := range strings.Split(by, ",") {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) {
			labels = append(labels, l)
		}
	}
	perTarget := strings.Join(labels, ", ")
	outer := "max"
	if by != "" {
		outer = "max by (" + by + ")"
	}
	return fmt.Sprintf(`%s (histogram_quantile(%s, sum by (%s, le) (%s(%s_bucket{%s}[%s]))) or histogram_quantile(%s, sum by (%s) (%s(%s{%s}[%s]))))`,
		outer, q, perTarget, fn, metric, selector, window, q, perTarget, fn, metric, selector, window)
}

func variable(name, label, expr string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).Label(label).
		Query(dashboard.StringOrMap{String: cog.ToPtr(expr)}).
		Datasource(datasource).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}}).
		Sort(dashboard.VariableSortAlphabeticalAsc)
}

// build returns the dashboard as the JSON Grafana imports, for p.
func build(p params) ([]byte, error) {
	g := newGen(p)
	sel, selPath, quantile, quantileOf := g.sel, g.selPath, g.quantile, g.quantileOf
	runbooks := p.runbooks
	cl := p.clusterLabel
	//lint:ignore SA1019 the classic dashboard JSON is what Grafana 10 and 11 import and the chart's sidecar loads; v2 needs Grafana 12's v2 API.
	d := dashboard.NewDashboardBuilder("watchprobe: List-Watch health").
		Uid("watchprobe").
		Description("End-to-end health of Kubernetes List-Watch, measured by watchprobe with marker objects.").
		Tags([]string{"watchprobe", "kubernetes"}).
		Refresh("30s").Time("now-3h", "now").Timezone("browser").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")).
		Link(dashboard.NewDashboardLinkBuilder("Alerts and runbooks").Type(dashboard.DashboardLinkTypeLink).Icon("doc").TargetBlank(true).Url(runbooks)).
		// One cluster at a time, the first by default: lines of several
		// clusters under one max or avg would not say whose they are. The
		// fleet row's worst-clusters table looks across all of them.
		WithVariable(dashboard.NewQueryVariableBuilder("cluster").Label("Cluster").
			Query(dashboard.StringOrMap{String: cog.ToPtr(`label_values(watchprobe_probe_success, ` + cl + `)`)}).
			Datasource(datasource).Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc)).
		WithVariable(variable("job", "Job", `label_values(watchprobe_probe_success{`+cl+`=~"$cluster"}, job)`)).
		// A replica is its pod, the label the chart's ServiceMonitor sets.
		WithVariable(variable("pod", "Replica", `label_values(watchprobe_probe_success{`+cl+`=~"$cluster", job=~"$job"}, pod)`)).
		WithVariable(variable("probe", "Probe", `label_values(watchprobe_probe_success{`+cl+`=~"$cluster", job=~"$job", pod=~"$pod"}, probe)`)).
		WithVariable(variable("path", "Path", `label_values(watchprobe_events_observed_total{`+cl+`=~"$cluster", job=~"$job", pod=~"$pod", probe=~"$probe"}, path)`)).
		WithVariable(variable("apiserver", "Apiserver", `label_values(watchprobe_events_observed_total{`+cl+`=~"$cluster", job=~"$job", pod=~"$pod", probe=~"$probe", path="apiserver"}, apiserver)`))

	// Which cluster? On a central Prometheus fed by many clusters (each
	// one's agent remote-writing with its cluster as an external label),
	// the first row lists every cluster, whatever the Cluster variable:
	// the alerts firing in their paging form first, then by the highest
	// burn over the fast page window of any of its probes and paths, beside
	// its exporter's replicas up (a cluster whose exporter reported within
	// the last day and reports no more reads "no exporter"), its silent
	// losses and its stalled and down paths. Each column has thresholds of
	// its own (a count is not judged as a burn rate), and only what pages
	// is red. Each query is one aggregation by the cluster label alone,
	// one row per cluster, every cluster: a top-k on one column alone would
	// merge the rest in unranked. Watch-cache freshness has a row of its
	// own.
	burnCol := "burn rate " + p.fast.long
	everUp := `group by (` + cl + `) (max_over_time(up{job="` + p.scrapeJob + `", job=~"$job"}[1d]))`
	d.WithRow(dashboard.NewRowBuilder("Fleet: which cluster?")).
		WithPanel(table.NewPanelBuilder().Title("Worst clusters").
			Description("All clusters, whatever the Cluster variable: the watchprobe alerts paging now (severity "+p.pageSeverity+"; tickets and one replica's forms, which page nothing, left out; red from 1), "+
				"the highest error budget burn rate over "+p.fast.long+" of any of their probes and paths (1: the budget lasts exactly the SLO period; orange from "+num(p.fast.rate)+", where the fast page fires once the short window agrees), "+
				"the exporter's replicas up (\"no exporter\": it reported in the last day and reports no more; yellow: fewer than the "+num(p.replicas)+" the chart runs), "+
				"the marker events the worst replica lost silently over the range, and the replicas' stalled and down paths now. Choose a cluster in the Cluster variable to see why.").
			Datasource(datasource).Height(6).Span(24).
			// The columns in the queries' order (merge keeps it). One
			// aggregation by the cluster label at the top, as every fleet
			// query: a cluster without a firing alert reads 0.
			WithTarget(query(`max by (`+cl+`) (count by (`+cl+`) (ALERTS{alertname=~"Watchprobe.*", alertstate="firing", vantage_points!="one", severity="`+g.p.pageSeverity+`"}) or 0 * `+everUp+`)`, "").Instant().Format(prometheus.PromQueryFormatTable).RefId("alerts")).
			WithTarget(query(`max by (`+cl+`) (probe_path:watchprobe_sli_error_ratio:rate`+p.fast.long+`{job=~"$job"} / (1 - `+num(p.target)+`))`, "").Instant().Format(prometheus.PromQueryFormatTable).RefId("burn")).
			WithTarget(query(`max by (`+cl+`) (count by (`+cl+`) (up{job="`+p.scrapeJob+`", job=~"$job"} == 1) or 0 * `+everUp+`)`, "").Instant().Format(prometheus.PromQueryFormatTable).RefId("up")).
			WithTarget(query(`max by (`+cl+`) (sum by (`+cl+`, job, instance, pod) (increase(watchprobe_events_lost_total{job=~"$job", reason="silent"}[$__range])))`, "").Instant().Format(prometheus.PromQueryFormatTable).RefId("lost")).
			WithTarget(query(`sum by (`+cl+`) (watchprobe_watch_stalled{job=~"$job"})`, "").Instant().Format(prometheus.PromQueryFormatTable).RefId("stalled")).
			WithTarget(query(`sum by (`+cl+`) (1 - watchprobe_path_up{job=~"$job"})`, "").Instant().Format(prometheus.PromQueryFormatTable).RefId("down")).
			WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
			WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
				"excludeByName": map[string]any{"Time": true},
				"renameByName": map[string]any{"Value #alerts": "alerts firing", "Value #burn": burnCol, "Value #up": "replicas up",
					"Value #lost": "lost in range", "Value #stalled": "stalled", "Value #down": "paths down"},
			}}).
			SortBy([]cog.Builder[common.TableSortByFieldState]{
				common.NewTableSortByFieldStateBuilder().DisplayName("alerts firing").Desc(true),
				common.NewTableSortByFieldStateBuilder().DisplayName(burnCol).Desc(true),
			}).
			OverrideByName("alerts firing", cell("short", steps("green", step{1, paging}))).
			OverrideByName(burnCol, cell("short", steps("green", step{1, "yellow"}, step{p.fast.rate, "orange"}), dashboard.DynamicConfigValue{Id: "decimals", Value: 1})).
			OverrideByName("replicas up", cell("short", steps(paging, step{1, replica}, step{p.replicas, "green"}),
				dashboard.DynamicConfigValue{Id: "mappings", Value: []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText,
					Options: map[string]dashboard.ValueMappingResult{"0": {Text: cog.ToPtr("no exporter"), Color: cog.ToPtr(paging)}}}}}})).
			OverrideByName("lost in range", cell("short", steps("green", step{1, replica}), dashboard.DynamicConfigValue{Id: "decimals", Value: 0})).
			OverrideByName("stalled", cell("short", steps("green", step{1, replica}))).
			OverrideByName("paths down", cell("short", steps("green", step{1, replica}))).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn")))

	// Is List-Watch healthy, and where not: one verdict per path of the
	// selected cluster, each linked to its alert's runbook. Red is what
	// pages: the alert in its agreed form; beside it the worst replica's
	// own value, yellow where one replica sees a problem, which pages
	// nothing.
	const pagingDescription = ` "firing" (red): the alert fires in the form that pages, seen from at least the required number of nodes; "quiet": it does not.`
	selAlert, selAlertPath := g.selAgreed, g.selAgreedPath
	d.WithRow(dashboard.NewRowBuilder("Verdicts")).
		WithPanel(verdict("Probe success", "Whether WatchprobeProbeFailing fired over the range, per probe,"+pagingDescription+" Beside it the worst replica's fraction of the range in which its latest marker cycle was written and observed on every path within the deadline (watchprobe_probe_success): yellow below 99%. A probe whose writes or paths are refused fails there too and pages nothing: the Writes and Watch health rows say why.",
			query(g.firing("WatchprobeProbeFailing", "probe", selAlert, true, `watchprobe_probe_success{`+selAlert+`}`), "alert {{probe}}"),
			query(`min by (probe) (avg_over_time(watchprobe_probe_success{`+sel+`}[$__range]))`, "worst replica {{probe}}"),
			"percentunit", steps(replica, step{0.99, "green"})).
			Span(4).Links(g.runbook("WatchprobeProbeFailing"))).
		WithPanel(verdict("Error budget left (30 d)", "Whether WatchprobeEventLatencyBudgetBurn fires now, per path,"+pagingDescription+" Beside it the share of the 30-day error budget (1 - target "+num(p.target)+") left, per path, the worst probe's (probe_path:watchprobe_sli_error_budget_remaining:30d, the cluster's, with no vantage point): 1 untouched, at or below 0 spent (orange); yellow below half. Whatever the dashboard's range.",
			query(g.firing("WatchprobeEventLatencyBudgetBurn", "path", selAlertPath, false, `probe_path:watchprobe_sli_error_budget_remaining:30d{`+selAlertPath+`}`), "alert {{path}}"),
			query(`min by (path) (probe_path:watchprobe_sli_error_budget_remaining:30d{`+selAlertPath+`})`, "left {{path}}"),
			"percentunit", steps("orange", step{0, replica}, step{0.5, "green"})).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn"))).
		WithPanel(verdict("Lost in range", "Whether WatchprobeEventsLost fired over the range, per path,"+pagingDescription+" Beside it the marker events the worst replica lost silently (never delivered on a path that stayed live and did not relist) over the range: yellow from 1.",
			query(g.firing("WatchprobeEventsLost", "path", selAlertPath, true, `watchprobe_events_lost_total{`+selAlertPath+`}`), "alert {{path}}"),
			query(`max by (path) (sum by (`+cl+`, job, instance, pod, path) (increase(watchprobe_events_lost_total{`+selPath+`, reason="silent"}[$__range])))`, "worst replica {{path}}"),
			"short", steps("green", step{1, replica})).
			Links(g.runbook("WatchprobeEventsLost"))).
		WithPanel(verdict("Stalled now", "Whether WatchprobeWatchStalled fires now, per path,"+pagingDescription+" Beside it the replicas whose watch on the path is open and silent while writes succeed (watchprobe_watch_stalled): one alone is that replica's network path, and yellow.",
			query(g.firing("WatchprobeWatchStalled", "path", selAlertPath, false, `watchprobe_watch_stalled{`+selAlertPath+`}`), "alert {{path}}"),
			query(`sum by (path) (watchprobe_watch_stalled{`+selPath+`})`, "replicas {{path}}"),
			"short", steps("green", step{1, replica})).
			Links(g.runbook("WatchprobeWatchStalled"))).
		WithPanel(verdict("Paths down now", "Whether WatchprobePathDown fires now, per path,"+pagingDescription+" Beside it the replicas whose path has no stream open and caught up (1 - watchprobe_path_up): moments are reconnects, and yellow.",
			query(g.firing("WatchprobePathDown", "path", selAlertPath, false, `watchprobe_path_up{`+selAlertPath+`}`), "alert {{path}}"),
			query(`sum by (path) (1 - watchprobe_path_up{`+selPath+`})`, "replicas {{path}}"),
			"short", steps("green", step{1, replica})).
			Links(g.runbook("WatchprobePathDown")))

	// The objective, the target and the burn rates are the rules' (the
	// chart's prometheusRule values, which the chart writes into its copy
	// of the dashboard): the panels read what the rules record.
	burnOver := func(w burnWindow) string {
		return `max by (path) (probe_path:watchprobe_sli_error_ratio:rate` + w.long + `{` + g.selAgreedPath + `}) / (1 - ` + num(p.target) + `)`
	}
	d.WithRow(dashboard.NewRowBuilder("SLO (objective and target from the rules)")).
		WithPanel(series("Good minutes", "Fraction of minutes in which each path met the SLO on that minute's marker events: at least "+num(p.target)+" of them arrived within "+num(p.objective)+" s (missed events and failed writes count as late), the worst probe's.", "percentunit",
			query(`min by (path) (avg_over_time(probe_path:watchprobe_sli_good_minute:1m{`+g.selAgreedPath+`}[$__range]))`, "{{path}}")).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn"))).
		WithPanel(series("Error budget burn rate", "How fast each path spends its error budget (1 - target "+num(p.target)+") over the burn-rate alerts' first two long windows, the worst probe's: 1 spends it exactly over the SLO period. The dashed lines are their burn rates: "+num(p.fast.rate)+" over "+p.fast.long+" (red) and "+num(p.slow.rate)+" over "+p.slow.long+" (orange); each alert fires once its short window agrees.", "short",
			query(burnOver(p.fast), p.fast.long+" {{path}}"),
			query(burnOver(p.slow), p.slow.long+" {{path}}")).
			Thresholds(thresholds("green", step{p.slow.rate, "orange"}, step{p.fast.rate, "red"})).
			ThresholdsStyle(common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleModeDashed)).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn"))).
		// No hard minimum: an overspent budget goes below 0.
		WithPanel(timeseries.NewPanelBuilder().Title("Error budget left (30 d)").
			Description("Share of each path's 30-day error budget left, the worst probe's (probe_path:watchprobe_sli_error_budget_remaining:30d): 1 untouched, 0 spent, below 0 overspent.").
			Unit("percentunit").Datasource(datasource).Height(8).Span(24).AxisSoftMin(0).AxisSoftMax(1).
			WithTarget(query(`min by (path) (probe_path:watchprobe_sli_error_budget_remaining:30d{`+g.selAgreedPath+`})`, "{{path}}")).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn")))

	// How many replicas report, from which nodes, per cluster: an alert
	// pages only when enough distinct nodes agree, so fewer replicas or
	// nodes than the chart runs and requires is a cluster whose problems
	// cannot page. Counted as WatchprobeVantagePointsMissing counts them:
	// replicas with a watchprobe_probe_success series (a replica scraped
	// but running no probe reports nothing), one value per cluster, so
	// that one cluster at 0 is not hidden by another's sum. A cluster
	// whose exporter was up in the last day and reports no more reads 0.
	reporting := `group without (probe) (watchprobe_probe_success{` + g.selUp + `})`
	none := ` or 0 * group by (` + cl + `) (max_over_time(up{` + g.selUp + `}[1d]))`
	d.WithRow(dashboard.NewRowBuilder("Vantage points")).
		WithPanel(single("Replicas reporting", "In each cluster: the exporter's replicas that report probe results now (watchprobe_probe_success of job "+p.scrapeJob+", as WatchprobeVantagePointsMissing counts them): red at none, when nothing reports; yellow below the "+num(p.replicas)+" the chart runs.", "short",
			thresholds(paging, step{1, replica}, step{p.replicas, "green"}),
			query(`count by (`+cl+`) (`+reporting+`)`+none, "{{"+cl+"}}")).
			Span(4).Height(6).Links(g.runbook("WatchprobeVantagePointsMissing"))).
		WithPanel(single("Nodes reporting", "In each cluster: the distinct nodes (the node target label) of the replicas that report probe results now: an alert pages only when "+num(p.nodes)+" of them agree, so fewer is yellow (WatchprobeVantagePointsMissing), none red.", "short",
			thresholds(paging, step{1, replica}, step{p.nodes, "green"}),
			query(`count by (`+cl+`) (count by (`+cl+`, node) (`+reporting+`) unless on (node) vector(1))`+none, "{{"+cl+"}}")).
			Span(4).Height(6).Links(g.runbook("WatchprobeVantagePointsMissing"))).
		WithPanel(series("Replicas reporting by node", "The exporter's replicas that report probe results on each node (watchprobe_probe_success of job "+p.scrapeJob+", by its node target label), per cluster: two lines at 1 are two vantage points; one line at 2 is two replicas that see through the same node.", "short",
			query(`count by (`+cl+`, node) (`+reporting+`)`, "{{"+cl+"}} {{node}}")).
			Span(16).Height(6))

	d.WithRow(g.agentRow())

	d.WithRow(dashboard.NewRowBuilder("Overview")).
		WithPanel(single("p99 event latency", "99th percentile, over the dashboard's range, of the time from a marker write being sent to its event arriving, across paths and event types; with several exporters selected, the slowest one's. Yellow from half the SLO's objective, red from the objective ("+num(p.objective)+" s).", "s",
			thresholds("green", step{p.objective / 2, "yellow"}, step{p.objective, "red"}),
			query(quantileOf("0.99", "increase", "$__range", "watchprobe_event_latency_seconds", "", selPath), "p99")).
			Span(8).Links(g.runbook("WatchprobeEventLatencyBudgetBurn"))).
		WithPanel(single("Anomalies in range", "Events missed (not delivered by the deadline: late or lost), duplicated or out of order, over the dashboard's range. Replays after a relist are expected and not counted.", "short",
			thresholds("green", step{1, "yellow"}),
			query(`sum(increase(watchprobe_events_missed_total{`+selPath+`}[$__range])) + sum(increase(watchprobe_events_duplicate_total{`+selPath+`}[$__range])) + sum(increase(watchprobe_events_out_of_order_total{`+selPath+`}[$__range]))`, "anomalies")).
			Span(8).Links(g.runbook("WatchprobeEventsDuplicatedOrReordered"))).
		WithPanel(single("Watch restarts in range", "Watch streams that ended for any reason but their requested timeout, over the dashboard's range.", "short",
			thresholds("green", step{1, "yellow"}),
			query(`sum(increase(watchprobe_watch_restarts_total{`+selPath+`, reason!~"timeout|client"}[$__range]))`, "restarts")).
			Span(8).Links(g.runbook("WatchprobeWatchStalled")))

	d.WithRow(dashboard.NewRowBuilder("Event latency")).
		WithPanel(g.latency("Latency by path (p50, p90, p99)", "From just before the marker write was sent to the event's arrival on each path; with several exporters selected, the slowest one's. Exemplars link to the marker's trace.",
			query(quantile("0.5", "watchprobe_event_latency_seconds", "path", selPath), "p50 {{path}}").Exemplar(true),
			query(quantile("0.9", "watchprobe_event_latency_seconds", "path", selPath), "p90 {{path}}").Exemplar(true),
			query(quantile("0.99", "watchprobe_event_latency_seconds", "path", selPath), "p99 {{path}}").Exemplar(true)).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn"))).
		WithPanel(g.latency("p99 latency by path and event", "99th percentile latency for each path and event type (added, modified, deleted); with several exporters selected, the slowest one's.",
			query(quantile("0.99", "watchprobe_event_latency_seconds", "path, event", selPath), "{{path}} {{event}}").Exemplar(true)).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn"))).
		WithPanel(heatmap.NewPanelBuilder().Title("Latency distribution").
			Description("Arrivals per minute in each latency bucket over time, all paths and event types: the classic buckets, or the native ones where Prometheus has no classic bucket of the selection. Where some selected exporters have classic buckets and others native ones only, this shows the classic ones: select a cluster or replica.").
			Datasource(datasource).Height(8).Span(24).Calculate(false).
			YAxis(heatmap.NewYAxisConfigBuilder().Unit("s")).
			CellValues(heatmap.NewCellValuesBuilder().Unit(perMinute)).
			WithTarget(query(`60 * (sum by (le) (rate(watchprobe_event_latency_seconds_bucket{`+selPath+`}[$__rate_interval])) or on () sum(rate(watchprobe_event_latency_seconds{`+selPath+`}[$__rate_interval])))`, "{{le}}").
				Format(prometheus.PromQueryFormatHeatmap).Exemplar(true)))

	// The latency split by where it is spent, from probes with the etcd path.
	// Each share is a median of one exporter's (cluster, job, instance) and
	// probe's events, so the client's share can subtract one from another on
	// matching series. Not filtered by $path: each share is defined by fixed
	// paths, and choosing one would empty the others. Repeated per probe:
	// the stack of one probe is a split of its latency, two stacked on each
	// other are not.
	// Collapsed: empty unless a probe lists the etcd path.
	by := cl + ", job, instance, probe"
	d.WithRow(dashboard.NewRowBuilder("Latency by component (etcd path)").Collapsed(true).
		WithPanel(series("Where the time goes: etcd / apiserver / client",
			"Medians, for probes whose paths list etcd (empty otherwise), stacked in the order an event travels. "+
				"etcd: p50 latency on the etcd path, from the write being sent until etcd's own watch delivers it: send to commit, that is the write's way through the apiserver (authentication, admission webhooks, its load) into etcd, and etcd's watch. "+
				"apiserver: p50 of watchprobe_apiserver_lag_seconds on the watch path, each event's arrival on the bare watch minus its arrival from etcd (watch cache and fan-out). "+
				"client: p50 informer latency minus p50 watch latency (client-go's decoding and informer). "+
				"Medians do not add exactly, so the top approximates the informer's p50, and the client share can dip below zero when the two paths are within noise. "+
				"Read from the classic buckets (1, 2.5, 3.5, 5, 7.5, 10, 15, 20 ms, ...) where Prometheus has them: a share smaller than its bucket is coarse, and on a fast cluster the client's often reads 0; the native buckets, where Prometheus has only those, are about 9% wide. "+
				"With several instances or clusters selected, their stacks pile on each other: select one.", "s",
			query(quantile("0.5", "watchprobe_event_latency_seconds", by, sel+`, path="etcd"`), "etcd {{probe}} {{pod}}"),
			query(quantile("0.5", "watchprobe_apiserver_lag_seconds", by, sel+`, path="watch"`), "apiserver {{probe}} {{pod}}"),
			query(quantile("0.5", "watchprobe_event_latency_seconds", by, sel+`, path="informer"`)+" - "+
				quantile("0.5", "watchprobe_event_latency_seconds", by, sel+`, path="watch"`), "client {{probe}} {{pod}}")).
			Span(24).Repeat("probe").RepeatDirection(dashboard.PanelRepeatDirectionH).MaxPerRow(2).
			Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)))

	d.WithRow(dashboard.NewRowBuilder("Watch health")).
		WithPanel(series("Paths down", "Paths with no watch stream open and caught up (watchprobe_path_up 0): reconnecting, relisting, or their list and watch requests failing. Moments are normal; minutes are WatchprobePathDown.", "short",
			query(`sum by (path) (1 - watchprobe_path_up{`+selPath+`})`, "{{path}}")).
			Links(g.runbook("WatchprobePathDown"))).
		WithPanel(series("Failed list and watch requests by code", "List and watch requests of the paths that failed before a stream existed, per minute, by HTTP status (0: no response; 403: the exporter's RBAC; 429: throttled).", perMinute,
			query(`60 * sum by (path, request, code) (rate(watchprobe_requests_failed_total{`+selPath+`}[$__rate_interval]))`, "{{path}} {{request}} {{code}}")).
			Links(g.runbook("WatchprobeRequestsFailing"))).
		WithPanel(series("Paths refused", "Replicas whose path's list or watch the apiserver refuses (watchprobe_path_refused), by reason: forbidden (403, 401) or not_found (404). The exporter's own permissions, not the cluster: the path measures nothing, its writes are unmeasurable there, and it is no path down.", "short",
			query(`sum by (path, reason) (watchprobe_path_refused{`+selPath+`})`, "{{path}} {{reason}}")).
			Links(g.runbook("WatchprobePathRefused"))).
		WithPanel(series("Watch restarts by reason", "Watch streams that ended, per minute, by why: timeout (normal), expired (410 Gone), too_many_requests, error, eof (cut early), client.", perMinute,
			query(`60 * sum by (path, reason) (rate(watchprobe_watch_restarts_total{`+selPath+`}[$__rate_interval]))`, "{{path}} {{reason}}"))).
		WithPanel(series("Watch lifetime (p50)", "Median lifetime of the watch streams that ended. Client-go asks for 5 to 10 minutes; much shorter means streams are cut.", "s",
			query(quantile("0.5", "watchprobe_watch_duration_seconds", "path", selPath), "{{path}}"))).
		WithPanel(series("Relists by reason", "Full state fetches per minute, by reason (initial, expired, error) and mode (list, watchlist).", perMinute,
			query(`60 * sum by (path, reason, mode) (rate(watchprobe_relists_total{`+selPath+`}[$__rate_interval]))`, "{{path}} {{reason}} {{mode}}")).
			Links(g.runbook("WatchprobeRelistStorm"))).
		WithPanel(series("Relist duration (p99)", "How long relists take: the LIST call, or a WatchList stream up to its initial-events-end bookmark.", "s",
			query(quantile("0.99", "watchprobe_relist_duration_seconds", "path, mode", selPath), "{{path}} {{mode}}"))).
		WithPanel(series("Bookmarks", "BOOKMARK events received per minute: the apiserver's proof that a quiet stream is alive.", perMinute,
			query(`60 * sum by (path) (rate(watchprobe_bookmarks_total{`+selPath+`}[$__rate_interval]))`, "{{path}}"))).
		WithPanel(series("Seconds since last event or bookmark", "Age of the latest event or bookmark on each path, at scrape time.", "s",
			query(`max by (path) (watchprobe_watch_idle_seconds{`+selPath+`})`, "{{path}}"))).
		WithPanel(series("Stalled paths", "Paths with a watch stream open on which writes succeed but nothing has arrived for longer than the probe's stall bound.", "short",
			query(`sum by (path) (watchprobe_watch_stalled{`+selPath+`})`, "{{path}}")).
			Links(g.runbook("WatchprobeWatchStalled"))).
		WithPanel(series("Throttled requests", "Requests the apiserver answered with 429 Too Many Requests (API Priority and Fairness), per minute, by path (write: the marker writes) and request.", perMinute,
			query(`60 * sum by (path, request) (rate(watchprobe_requests_throttled_total{`+sel+`}[$__rate_interval]))`, "{{path}} {{request}}")).
			Links(g.runbook("WatchprobeRequestsThrottled")))

	// One watch per apiserver, pinned to it (probes with `apiservers` set):
	// the row that names the apiserver whose watch cache lags or stopped.
	// By cluster too: clusters reuse apiserver addresses (kubeadm's and
	// kind's defaults), and one line for two clusters' apiservers would
	// hide the sick one.
	// Empty for probes without it.
	// Collapsed: empty unless a probe sets apiservers.
	selAPI := sel + `, path="apiserver", apiserver=~"$apiserver"`
	d.WithRow(dashboard.NewRowBuilder("Per apiserver").Collapsed(true).
		WithPanel(single("p99 by apiserver over the range", "99th percentile event latency of each apiserver's own watch over the dashboard's range, slowest first: one apiserver far above the others is the one to look at. Yellow from half the SLO's objective, red from the objective ("+num(p.objective)+" s).", "s",
			thresholds("green", step{p.objective / 2, "yellow"}, step{p.objective, "red"}),
			query(`sort_desc(`+quantileOf("0.99", "increase", "$__range", "watchprobe_event_latency_seconds", cl+", apiserver", selAPI)+`)`, "{{"+cl+"}} {{apiserver}}")).
			Span(24).Links(g.runbook("WatchprobeAPIServerWatchDegraded"))).
		WithPanel(g.latency("Latency by apiserver (p99)", "99th percentile latency of each apiserver's watch, for writes made through the load balancer: how fast each watch cache delivers writes made anywhere.",
			query(quantile("0.99", "watchprobe_event_latency_seconds", cl+", apiserver", selAPI), "{{"+cl+"}} {{apiserver}}").Exemplar(true)).
			Links(g.runbook("WatchprobeAPIServerWatchDegraded"))).
		WithPanel(series("Missed events by apiserver", "Acknowledged writes that an apiserver's watch did not deliver by the deadline, per minute, by reason.", perMinute,
			query(`60 * sum by (`+cl+`, apiserver, reason) (rate(watchprobe_events_missed_total{`+selAPI+`}[$__rate_interval]))`, "{{"+cl+"}} {{apiserver}} {{reason}}")).
			Links(g.runbook("WatchprobeAPIServerWatchDegraded"))).
		WithPanel(series("Stalled apiservers", "1 while writes succeed but nothing arrives on an apiserver's watch for longer than the stall bound: its watch cache has stopped (etcd watch broken, process wedged).", "short",
			query(`sum by (`+cl+`, apiserver) (watchprobe_watch_stalled{`+selAPI+`})`, "{{"+cl+"}} {{apiserver}}")).
			Links(g.runbook("WatchprobeAPIServerWatchDegraded"))).
		WithPanel(series("Watch restarts by apiserver", "Watch streams through each apiserver that ended for any reason but their requested timeout, per minute.", perMinute,
			query(`60 * sum by (`+cl+`, apiserver, reason) (rate(watchprobe_watch_restarts_total{`+selAPI+`, reason!~"timeout|client"}[$__rate_interval]))`, "{{"+cl+"}} {{apiserver}} {{reason}}"))))

	// How far back a watch resumes (probes with `resume` set): the window
	// per path and apiserver, against the configured ages as dashed
	// reference lines, so that a window at an age's line is that age
	// replaying and the next one not. By cluster too, as the apiserver
	// row. Collapsed: empty unless a probe sets resume.
	selResume := sel + `, path=~"$path", apiserver=~"$apiserver|"`
	d.WithRow(dashboard.NewRowBuilder("Resume window").Collapsed(true).
		WithPanel(series("Resume window", "The largest configured age from which a fresh watch replayed every marker event written since, in order and once each (watchprobe_resume_window_seconds), per path and apiserver, from each path's latest round that judged every age; dashed: the configured ages. A client whose watch broke for longer than the window gets 410 Gone on reconnecting, and relists. Below 60 s is WatchprobeResumeWindowShort.", "s",
			query(`min by (`+cl+`, probe, path, apiserver) (watchprobe_resume_window_seconds{`+selResume+`})`, "{{"+cl+"}} {{probe}} {{path}} {{apiserver}}").RefId("A"),
			query(`max by (age) (watchprobe_resume_age_seconds{`+sel+`})`, "age {{age}}").RefId("B")).
			Span(24).
			OverrideByQuery("B", []dashboard.DynamicConfigValue{
				{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}},
				{Id: "custom.lineWidth", Value: 1},
				{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": "text"}},
			})).
		WithPanel(series("Resume checks not replayed", "Resume checks per minute that did not replay exactly, by path, age and outcome: expired (410 Gone: that history is gone), incomplete (an event missing, twice or out of order, or a 410 part way: WatchprobeResumeReplayInexact), error (the check could not be made).", perMinute,
			query(`60 * sum by (path, apiserver, age, outcome) (rate(watchprobe_resume_checks_total{`+selResume+`, outcome!="replayed"}[$__rate_interval]))`, "{{path}} {{apiserver}} {{age}} {{outcome}}")).
			Links(g.runbook("WatchprobeResumeReplayInexact"))).
		WithPanel(series("Replay time (p99)", "From a resume check's watch request to the arrival of the last event it had to replay, for exact replays: what the apiserver (or etcd) takes to serve a client's history.", "s",
			query(quantile("0.99", "watchprobe_resume_replay_seconds", "path, apiserver", selResume), "{{path}} {{apiserver}}"))))

	// How long kube-controller-manager takes to act on a change (probes
	// with `controllers` set), split into the change's delivery, which any
	// watcher of the object waited for, and the controller's own share: a
	// slow watch and a slow or stuck controller look apart. Per exporter,
	// probe and controller, as the etcd row. Collapsed: empty unless a
	// probe lists controllers.
	byCtl := cl + ", job, instance, probe, controller"
	d.WithRow(dashboard.NewRowBuilder("Controllers").Collapsed(true).
		WithPanel(series("Controller reaction: delivery / controller",
			"Medians, for probes whose controllers setting lists kube-controller-manager's controllers (empty otherwise), stacked in the order a change travels. "+
				"delivery: p50 of watchprobe_controller_change_delivery_seconds, from the probe's change to its marker object until the exporter's own watch of the object delivers it: what the controller's informer could have seen by then. "+
				"controller: p50 of watchprobe_controller_share_seconds, from that delivery until the status whose observedGeneration reaches the change arrives (the controller's informer, work queue, reconcile and status write, and the status's delivery). "+
				"A tall delivery is a slow watch (compare the event latency panels); a tall controller share with a short delivery is the controller-manager. Medians do not add exactly: the top approximates the reaction's p50. "+
				"With several instances or clusters selected, their stacks pile on each other: select one.", "s",
			query(quantile("0.5", "watchprobe_controller_change_delivery_seconds", byCtl, sel), "delivery {{controller}} {{probe}} {{pod}}"),
			query(quantile("0.5", "watchprobe_controller_share_seconds", byCtl, sel), "controller {{controller}} {{probe}} {{pod}}")).
			Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)).
		WithPanel(series("Controller reaction (p50, p99)", "From the probe's change to its marker object to the arrival of the status whose observedGeneration reaches the change, by controller; with several exporters selected, the slowest one's. A reaction that never comes is not here: see the misses.", "s",
			query(quantile("0.5", "watchprobe_controller_reaction_seconds", "controller", sel), "p50 {{controller}}"),
			query(quantile("0.99", "watchprobe_controller_reaction_seconds", "controller", sel), "p99 {{controller}}"))).
		WithPanel(series("Controller reactions missed, late, lost", "Changes per minute whose status answer did not come within the deadline (missed), came after it (late), or never came within lost_after (lost), by controller and reason (controller: the change had reached the exporter's own watch; undelivered: it had not); and the changes made and failed. Missed for the controller at half the changes or more is WatchprobeControllerNotReacting; undelivered and failed, WatchprobeControllerProbeFailing.", perMinute,
			query(`60 * sum by (controller, reason) (rate(watchprobe_controller_reactions_missed_total{`+sel+`}[$__rate_interval]))`, "missed {{controller}} ({{reason}})"),
			query(`60 * sum by (controller) (rate(watchprobe_controller_reactions_late_total{`+sel+`}[$__rate_interval]))`, "late {{controller}}"),
			query(`60 * sum by (controller, reason) (rate(watchprobe_controller_reactions_lost_total{`+sel+`}[$__rate_interval]))`, "lost {{controller}} ({{reason}})"),
			query(`60 * sum by (controller) (rate(watchprobe_controller_changes_total{`+sel+`}[$__rate_interval]))`, "changes {{controller}}"),
			query(`60 * sum by (controller) (rate(watchprobe_controller_change_errors_total{`+sel+`}[$__rate_interval]))`, "failed {{controller}}")).
			Span(24)))

	// How far each resource's watch cache is behind etcd (probes with
	// `freshness` set), per resource and apiserver ("" the load
	// balancer), what was not answered from a fresh cache, and the stale
	// reads of the markers; and how long each resource's WatchList sync
	// takes to its end bookmark, and the syncs that never got it (probes
	// with `watch_list` set). Collapsed: empty unless a probe sets either.
	d.WithRow(dashboard.NewRowBuilder("List freshness").Collapsed(true).
		WithPanel(series("Watch cache wait (p99)", "How long each resource's consistent LIST (no resourceVersion) took over a resourceVersion=0 LIST sent just before it on the same connection (watchprobe_list_freshness_seconds): kube-apiserver 1.34+ answers the first from the watch cache once that cache has caught up with etcd's current revision, the second at once, so this is the cache's wait behind etcd, without the connection and the apiserver's queue. At 3 s it waited for the apiserver's bound and came from etcd. Dashed: the consistent LIST's own round trip (watchprobe_list_freshness_round_trip_seconds), what a client sees.", "s",
			query(quantile("0.99", "watchprobe_list_freshness_seconds", "resource, apiserver", sel), "{{resource}} {{apiserver}}").RefId("A"),
			query(quantile("0.99", "watchprobe_list_freshness_round_trip_seconds", "resource, apiserver", sel), "round trip {{resource}} {{apiserver}}").RefId("B")).
			OverrideByQuery("B", []dashboard.DynamicConfigValue{
				{Id: "custom.lineStyle", Value: map[string]any{"fill": "dash", "dash": []int{10, 10}}},
				{Id: "custom.lineWidth", Value: 1},
			})).
		WithPanel(series("Caches stuck", "1 while most of a resource's freshness checks over the probe's stuck window fell back or timed out (watchprobe_list_freshness_stuck): WatchprobeWatchCacheStuck.", "short",
			query(`max by (`+cl+`, resource, apiserver) (watchprobe_list_freshness_stuck{`+sel+`})`, "{{"+cl+"}} {{resource}} {{apiserver}}")).
			Links(g.runbook("WatchprobeWatchCacheStuck"))).
		WithPanel(series("Served without a watch cache", "1 while an apiserver serves a resource without a watch cache, by reason (watchprobe_list_freshness_uncached): aggregated (an APIService sends it to another server) or no_watch_cache (kube-apiserver stores it without a cacher: --watch-cache-sizes=<resource>#0, --watch-cache=false). Such a resource's LISTs read etcd: it is not checked, and has no lag or stuck state.", "short",
			query(`max by (`+cl+`, resource, apiserver, reason) (watchprobe_list_freshness_uncached{`+sel+`})`, "{{"+cl+"}} {{resource}} {{apiserver}} {{reason}}"))).
		WithPanel(series("Fallbacks and errors", "Freshness checks per minute not answered from a fresh cache, by resource, apiserver and reason: bound (waited 3 s, answered by etcd), too_many_requests (429), timeout; and those that failed otherwise (forbidden, not_found, cache_not_ready, conversion_failed, unavailable, other).", perMinute,
			query(`60 * sum by (resource, apiserver, reason) (rate(watchprobe_list_freshness_fallbacks_total{`+sel+`}[$__rate_interval]))`, "fell back {{resource}} {{apiserver}} {{reason}}"),
			query(`60 * sum by (resource, apiserver, reason) (rate(watchprobe_list_freshness_errors_total{`+sel+`}[$__rate_interval]))`, "failed {{resource}} {{apiserver}} {{reason}}"))).
		WithPanel(series("Checks queued", "Freshness checks per minute that the apiserver's priority and fairness held too long to judge, by resource, apiserver and reason: waited (the resourceVersion=0 LIST before the consistent one took queued_after, 300 ms by default, or longer), rejected (429). The exporter's own queueing, not the cache's: these checks are neither fresh nor fallen back, and never make a cache stuck. Steady: the exporter's priority level is saturated, its watches and writes wait too; give it a level of its own (the chart's flowControl).", perMinute,
			query(`60 * sum by (resource, apiserver, reason) (rate(watchprobe_list_freshness_queued_total{`+sel+`}[$__rate_interval]))`, "{{resource}} {{apiserver}} {{reason}}"))).
		WithPanel(series("Stale reads", "resourceVersion=0 LISTs of the markers per minute, per apiserver (empty: through the load balancer), that contradicted what the probe had acknowledged, by kind: ghost (listed long after its delete), missing, stale (behind a write older than lost_after), back_in_time: WatchprobeStaleReads.", perMinute,
			query(`60 * sum by (apiserver, kind) (rate(watchprobe_list_stale_reads_total{`+sel+`}[$__rate_interval]))`, "{{apiserver}} {{kind}}")).
			Links(g.runbook("WatchprobeStaleReads"))).
		WithPanel(series("WatchList sync (p99)", "How long the WatchList a client-go informer syncs with (a watch with sendInitialEvents=true) took to its end bookmark (k8s.io/initial-events-end), per resource and apiserver (empty: the load balancer), for probes with watch_list set (watchprobe_watchlist_sync_seconds). Syncs that never got it are in the next panels, not here.", "s",
			query(quantile("0.99", "watchprobe_watchlist_sync_seconds", "resource, apiserver", sel), "{{resource}} {{apiserver}}"))).
		WithPanel(series("WatchList syncs stuck", "1 while most of a resource's WatchList syncs over the probe's stuck window got no end bookmark within the bound (watchprobe_watchlist_stuck): informers of it that start or relist there never sync. WatchprobeWatchListSyncStuck.", "short",
			query(`max by (`+cl+`, resource, apiserver) (watchprobe_watchlist_stuck{`+sel+`})`, "{{"+cl+"}} {{resource}} {{apiserver}}")).
			Links(g.runbook("WatchprobeWatchListSyncStuck"))).
		WithPanel(series("Missing end bookmarks, refusals and errors", "WatchList syncs per minute that got no end bookmark within the bound, by resource, apiserver and reason (no_response, no_bookmark, ended, cache_behind: an informer waits); that the server refused as a form (rejected, storage, closed: an informer lists instead); that failed otherwise (forbidden, not_found, cache_not_ready, conversion_failed, unavailable, other); and that the apiserver's priority and fairness held (queued: waited, rejected), the exporter's own queueing, never judged nor stuck.", perMinute,
			query(`60 * sum by (resource, apiserver, reason) (rate(watchprobe_watchlist_end_bookmarks_missed_total{`+sel+`}[$__rate_interval]))`, "no end bookmark {{resource}} {{apiserver}} {{reason}}"),
			query(`60 * sum by (resource, apiserver, reason) (rate(watchprobe_watchlist_refused_total{`+sel+`}[$__rate_interval]))`, "refused {{resource}} {{apiserver}} {{reason}}"),
			query(`60 * sum by (resource, apiserver, reason) (rate(watchprobe_watchlist_errors_total{`+sel+`}[$__rate_interval]))`, "failed {{resource}} {{apiserver}} {{reason}}"),
			query(`60 * sum by (resource, apiserver, reason) (rate(watchprobe_watchlist_queued_total{`+sel+`}[$__rate_interval]))`, "queued {{resource}} {{apiserver}} {{reason}}"))))

	d.WithRow(dashboard.NewRowBuilder("Delivery anomalies")).
		WithPanel(series("Missed events by reason", "Acknowledged writes not seen by the deadline, per minute, by what the path went through: relist, unavailable (no stream), or silent (nothing on the path explains it). Each is later late (it came) or lost (it never did).", perMinute,
			query(`60 * sum by (path, reason) (rate(watchprobe_events_missed_total{`+selPath+`}[$__rate_interval]))`, "{{path}} {{reason}}")).
			Links(g.runbook("WatchprobeEventLatencyBudgetBurn"))).
		WithPanel(series("Lost events by reason", "Acknowledged writes still not delivered lost_after after their answer, per minute. silent: the path was live and did not relist, a delivery bug (WatchprobeEventsLost); relist: only final state came after a relist; unavailable: the path had not started, or was not live again in time.", perMinute,
			query(`60 * sum by (path, reason) (rate(watchprobe_events_lost_total{`+selPath+`}[$__rate_interval]))`, "{{path}} {{reason}}")).
			Links(g.runbook("WatchprobeEventsLost"))).
		WithPanel(series("Duplicates, replays, out of order, late", "Writes delivered twice without a relist (duplicate), again after a relist (replayed, expected), after a later write (out of order), or after being counted missed (late), per minute.", perMinute,
			query(`60 * sum by (path) (rate(watchprobe_events_duplicate_total{`+selPath+`}[$__rate_interval]))`, "duplicate {{path}}"),
			query(`60 * sum by (path) (rate(watchprobe_events_replayed_total{`+selPath+`}[$__rate_interval]))`, "replayed {{path}}"),
			query(`60 * sum by (path) (rate(watchprobe_events_out_of_order_total{`+selPath+`}[$__rate_interval]))`, "out of order {{path}}"),
			query(`60 * sum by (path) (rate(watchprobe_events_late_total{`+selPath+`}[$__rate_interval]))`, "late {{path}}")).
			Links(g.runbook("WatchprobeEventsDuplicatedOrReordered")))

	d.WithRow(dashboard.NewRowBuilder("Writes")).
		WithPanel(series("Write round trip (p50, p99)", "Marker write round trip, from just before the request is sent to the apiserver's response, by verb.", "s",
			query(quantile("0.5", "watchprobe_write_duration_seconds", "verb", sel), "p50 {{verb}}").Exemplar(true),
			query(quantile("0.99", "watchprobe_write_duration_seconds", "verb", sel), "p99 {{verb}}").Exemplar(true))).
		WithPanel(series("Write errors by code", "Marker writes the control plane failed, per minute, by verb and HTTP status (0: no response); each is a bad event of the SLI.", perMinute,
			query(`60 * sum by (verb, code) (rate(watchprobe_write_errors_total{`+sel+`}[$__rate_interval]))`, "{{verb}} {{code}}"),
			query(`60 * sum(rate(watchprobe_writes_total{`+sel+`}[$__rate_interval]))`, "all writes")).
			Links(g.runbook("WatchprobeWriteErrors"))).
		WithPanel(series("Writes refused by cause", "Marker writes the probe's own namespace, permissions or policies refused, per minute, by verb and cause (admission_denied, quota_exceeded, forbidden, namespace_missing, not_found, invalid): no measurement, and no bad event of the SLI.", perMinute,
			query(`60 * sum by (verb, cause) (rate(watchprobe_writes_refused_total{`+sel+`}[$__rate_interval]))`, "{{verb}} {{cause}}"),
			query(`60 * sum(rate(watchprobe_writes_total{`+sel+`}[$__rate_interval]))`, "all writes")).
			Links(g.runbook("WatchprobeMarkersRefused"))).
		WithPanel(series("Markers pending deletion", "Marker objects whose delete has not succeeded yet, by probe: 0 when healthy; rising means they pile up in the marker namespace.", "short",
			query(`sum by (probe) (watchprobe_markers_pending_deletion{`+sel+`})`, "{{probe}}")).
			Links(g.runbook("WatchprobeMarkersPiling"))).
		WithPanel(series("Configuration reloads", "1 while the latest reload of the configuration file succeeded, 0 after a failed one (the previous probes run).", "short",
			query(`min by (pod) (watchprobe_config_last_reload_successful{`+cl+`=~"$cluster", job=~"$job", pod=~"$pod"})`, "{{pod}}")).
			Links(g.runbook("WatchprobeConfigReloadFailed")))

	built, err := d.Build()
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
