package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// serveAgents serves on loopback the series of two node agents as an
// agent registers them (metrics.RegisterAgent), for the monitoring tests'
// Prometheus to scrape: node-a in zone-1, healthy and fast; node-b, whose
// agent found no zone, unhealthy, with a miss, a loss, a stall and a
// broken stream end counted. The values are the test's, not an agent's
// verdicts: what the agent's row is proven against here is its queries'
// names, labels and selections over the series as Prometheus stores them
// (the latency histogram native only). It returns the address.
func serveAgents(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	a := metrics.RegisterAgent(reg, "node-a", "zone-1")
	b := metrics.RegisterAgent(reg, "node-b", "")
	a.Healthy.Set(1)
	for range 20 {
		a.Writes.Inc()
		a.Latency.Observe(0.004)
		b.Writes.Inc()
		b.Latency.Observe(0.5)
	}
	b.Missed.Inc()
	b.Lost.Inc()
	b.Stalls.Inc()
	b.StreamEnds.Inc()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// agentScrape is the scrape config of the agents at addr: no target
// labels, as the chart's PodMonitor adds no node label (the agent's own
// node and zone labels are its series').
func agentScrape(addr, extra string) string {
	return "  - job_name: watchprobe-agent\n" + extra + "    static_configs:\n      - targets: [\"" + addr + "\"]\n"
}

// readsAgentLatency: the query reads the agents' latency histogram, which
// is native only, so that it has data only where Prometheus ingests
// native histograms.
func readsAgentLatency(expr string) bool {
	return strings.Contains(expr, metrics.AgentEventLatency.FullName())
}

// The node agents' row is collapsed (it has data only where agents run)
// and holds every panel that reads the agents' series; no other panel
// reads them.
func TestAgentRowHoldsTheAgentPanels(t *testing.T) {
	var row panelJSON
	for _, p := range decode(t, buildDefaultParams(t)) {
		if p["type"] == "row" && p["title"] == agentRowTitle {
			row = p
		}
	}
	if row == nil {
		t.Fatalf("no row %q", agentRowTitle)
	}
	if row["collapsed"] != true {
		t.Errorf("row %q is not collapsed", agentRowTitle)
	}
	inRow := map[string]bool{}
	for _, n := range row["panels"].([]any) {
		p := n.(panelJSON)
		inRow[p["title"].(string)] = true
		if p["type"] == "text" {
			continue
		}
		for _, e := range exprs(p) {
			if !strings.Contains(e, "watchprobe_agent_") {
				t.Errorf("%s: %s reads no agent series", p["title"], e)
			}
		}
	}
	for _, title := range []string{agentStat, agentLatency, worstPanel, "Nodes degraded by zone"} {
		if !inRow[title] {
			t.Errorf("no panel %q in row %q", title, agentRowTitle)
		}
	}
	for title, es := range panelQueries(t) {
		for _, e := range es {
			if strings.Contains(e, "watchprobe_agent_") && !inRow[title] {
				t.Errorf("%s, outside row %q, reads the agents' series: %s", title, agentRowTitle, e)
			}
		}
	}
}
