// Command dashboards writes the watchprobe Grafana dashboard, generated with
// the Grafana Foundation SDK. `make dashboards` runs it; the JSON is
// committed, and a test fails when it is stale.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	runbooks, err := defaultRunbooks()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
	def := defaultParams(runbooks)
	p := def
	out := flag.String("o", "dashboards/watchprobe.json", "file to write")
	chart := flag.String("chart-template", "", "also write the chart's copy of the dashboard, with placeholders for the values, to this file")
	flag.StringVar(&p.clusterLabel, "cluster-label", def.clusterLabel, "target label that tells clusters apart")
	flag.StringVar(&p.scrapeJob, "scrape-job", def.scrapeJob, "job label of the exporter's targets (the chart's scrapeJob)")
	flag.Float64Var(&p.objective, "objective", def.objective, "SLO latency objective in seconds (prometheusRule.slo.objectiveSeconds)")
	flag.Float64Var(&p.target, "target", def.target, "SLO target (prometheusRule.slo.target)")
	windows := flag.String("burn-windows", def.fast.long+":"+num(def.fast.rate)+","+def.slow.long+":"+num(def.slow.rate),
		"the burn-rate alerts' first two windows, as long:burnRate,long:burnRate (prometheusRule.alerts.eventLatencyBudgetBurn.windows)")
	flag.Float64Var(&p.replicas, "replicas", def.replicas, "replicas the chart runs (replicaCount)")
	flag.Float64Var(&p.nodes, "vantage-points", def.nodes, "distinct nodes an agreed alert needs (prometheusRule.vantagePoints.required)")
	flag.StringVar(&p.pageSeverity, "page-severity", def.pageSeverity, "severity label of the alerts that page (prometheusRule.severities.page)")
	flag.Parse()
	if err = p.validate(); err == nil {
		p, err = p.withWindowsFlag(*windows)
	}
	var data []byte
	if err == nil {
		data, err = build(p)
	}
	if err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err == nil && *chart != "" {
		if data, err = chartTemplate(runbooks); err == nil {
			err = os.WriteFile(*chart, data, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
}

// defaultRunbooks is docs/alerts.md at this release's tag, as the rules'
// runbook_url (the chart's prometheusRule.runbookUrlBase replaces both):
// a branch would move on from what the release's alerts are. The version
// is the repository's VERSION, found from the working directory up.
func defaultRunbooks() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if v, err := os.ReadFile(filepath.Join(dir, "VERSION")); err == nil {
			return "https://github.com/watchprobe/watchprobe/blob/v" + strings.TrimSpace(string(v)) + "/docs/alerts.md", nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no VERSION file in the working directory or above it")
		}
		dir = parent
	}
}
