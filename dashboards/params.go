package main

import (
	"fmt"
	"strconv"
	"strings"
)

// params are what a chart's values set in the dashboard, so that its
// thresholds and lines are the rules' own: defaultParams are the chart's
// defaults, which `make dashboards` writes into dashboards/watchprobe.json.
type params struct {
	// clusterLabel is the target label that tells clusters apart
	// (grafanaDashboard.clusterLabel).
	clusterLabel string
	// runbooks is docs/alerts.md at the release's tag, where every alert
	// has its section (prometheusRule.runbookUrlBase replaces it).
	runbooks string
	// scrapeJob is the job label of the exporter's targets (scrapeJob):
	// the vantage points are its up series.
	scrapeJob string
	// objective is the SLO's latency objective in seconds, target the share
	// of events that must meet it (prometheusRule.slo).
	objective, target float64
	// fast and slow are the first two burn-rate windows
	// (prometheusRule.alerts.eventLatencyBudgetBurn.windows, the pages by
	// default), fast the one with the higher burn rate.
	fast, slow burnWindow
	// replicas is how many replicas the chart runs (replicaCount), nodes
	// how many distinct nodes an agreed alert needs
	// (prometheusRule.vantagePoints.required).
	replicas, nodes float64
	// pageSeverity is the severity label of the alerts that page
	// (prometheusRule.severities.page): only those are red.
	pageSeverity string
}

// burnWindow is a burn-rate alert's long window, as the recorded error
// ratio probe_path:watchprobe_sli_error_ratio:rate<long> names it, and the
// burn rate at which it fires.
type burnWindow struct {
	long string
	rate float64
}

func defaultParams(runbooks string) params {
	return params{
		clusterLabel: defaultClusterLabel, runbooks: runbooks, scrapeJob: "watchprobe",
		objective: 1, target: 0.99,
		fast: burnWindow{"1h", 14.4}, slow: burnWindow{"6h", 6},
		replicas: 2, nodes: 2, pageSeverity: "critical",
	}
}

// withWindows sets the page windows from the first two windows of the
// values (the first alone when there is one), the higher burn rate the
// fast one.
func (p params) withWindows(w ...burnWindow) (params, error) {
	switch len(w) {
	case 0:
		return p, fmt.Errorf("no burn-rate window: give at least one, as long:burnRate")
	case 1:
		w = append(w, w[0])
	}
	p.fast, p.slow = w[0], w[1]
	if p.slow.rate > p.fast.rate {
		p.fast, p.slow = p.slow, p.fast
	}
	return p, nil
}

// chartParams stand for the values in the chart's copy of the dashboard
// (charts/watchprobe/files/watchprobe.json): the generator builds it with
// sentinels, values no release sets, and replaces each sentinel's text
// with its placeholder, which templates/grafana-dashboard.yaml replaces
// with the release's value, written as the JSON encoder writes it.
// The objective's half is a sentinel of its own: the p99 stats turn
// yellow there.
var chartParams = params{
	clusterLabel: defaultClusterLabel, scrapeJob: "watchprobe-sentinel-job",
	objective: 1001.0625, target: 0.90625,
	fast: burnWindow{"8101m", 3003.25}, slow: burnWindow{"8202m", 2002.125},
	replicas: 7001.5, nodes: 6001.5, pageSeverity: "watchprobe-sentinel-page",
}

var placeholders = []struct{ sentinel, placeholder string }{
	{"watchprobe-sentinel-job", "__WATCHPROBE_SCRAPE_JOB__"},
	{"watchprobe-sentinel-page", "__WATCHPROBE_PAGE_SEVERITY__"},
	{"500.53125", "__WATCHPROBE_OBJECTIVE_HALF__"},
	{"1001.0625", "__WATCHPROBE_OBJECTIVE__"},
	{"0.90625", "__WATCHPROBE_TARGET__"},
	{"8101m", "__WATCHPROBE_FAST_LONG__"},
	{"3003.25", "__WATCHPROBE_FAST_BURN__"},
	{"8202m", "__WATCHPROBE_SLOW_LONG__"},
	{"2002.125", "__WATCHPROBE_SLOW_BURN__"},
	{"7001.5", "__WATCHPROBE_REPLICAS__"},
	{"6001.5", "__WATCHPROBE_NODES__"},
}

// chartTemplate is the chart's copy of the dashboard, with the runbooks
// at runbooks; every placeholder stands somewhere, or a value would not
// reach the dashboard.
func chartTemplate(runbooks string) ([]byte, error) {
	p := chartParams
	p.runbooks = runbooks
	data, err := build(p)
	if err != nil {
		return nil, err
	}
	s := string(data)
	for _, ph := range placeholders {
		if !strings.Contains(s, ph.sentinel) {
			return nil, fmt.Errorf("the dashboard does not use the value %s stands for", ph.placeholder)
		}
		s = strings.ReplaceAll(s, ph.sentinel, ph.placeholder)
	}
	return []byte(s), nil
}

// validate names the flag whose value no rule could have.
func (p params) validate() error {
	switch {
	case !(p.objective > 0):
		return fmt.Errorf("-objective %v: the latency objective is a number of seconds above 0", p.objective)
	case !(p.target > 0 && p.target < 1):
		return fmt.Errorf("-target %v: the SLO target is a fraction above 0 and below 1", p.target)
	case !(p.replicas >= 1):
		return fmt.Errorf("-replicas %v: the chart runs at least 1 replica", p.replicas)
	case p.pageSeverity == "" || strings.ContainsAny(p.pageSeverity, "\"\\"):
		return fmt.Errorf("-page-severity %q: the severity label value of the alerts that page, not empty, without quotes or backslashes", p.pageSeverity)
	case !(p.nodes >= 1):
		return fmt.Errorf("-vantage-points %v: an agreed alert needs at least 1 node", p.nodes)
	}
	return nil
}

// withWindowsFlag is withWindows from -burn-windows, long:burnRate pairs
// separated by commas.
func (p params) withWindowsFlag(s string) (params, error) {
	var ws []burnWindow
	for _, f := range strings.Split(s, ",") {
		long, rate, ok := strings.Cut(strings.TrimSpace(f), ":")
		r, err := strconv.ParseFloat(rate, 64)
		if !ok || long == "" || err != nil || !(r > 0) {
			return p, fmt.Errorf("-burn-windows %q: each window is long:burnRate, e.g. 1h:14.4, with a burn rate above 0", s)
		}
		ws = append(ws, burnWindow{long, r})
	}
	return p.withWindows(ws...)
}
