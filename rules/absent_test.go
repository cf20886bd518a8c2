package rules

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// A central store of two clusters, as a fleet runs one: a Prometheus agent
// per cluster scrapes that cluster's watchprobe target and remote-writes
// with its cluster as an external label, and one central Prometheus
// evaluates the chart's default rules. Cluster b's exporter stops: the
// central store pages WatchprobeAbsent naming cluster b (it reported, and
// no target of it is up), and nothing for cluster a.
//
// The targets serve watchprobe_probe_success only: the absent rules read
// up and that series, and what the exporter measures plays no part here
// (TestVantagePointsOnTheControlPlane runs the real exporter).
func TestAbsentClusterInTheCentralStore(t *testing.T) {
	dir := t.TempDir()
	rulesPath := localcluster.WriteFileForTest(t, dir, "watchprobe.rules.yml",
		string(renderRules(t, "--set", "prometheusRule.alerts.absent.for=5s")))
	central := localcluster.CentralPrometheusForTest(t, dir, "central", []string{rulesPath}, 2*time.Second, "127.0.0.1:9")
	exporters := map[string]*httptest.Server{}
	for _, cluster := range []string{"a", "b"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, `watchprobe_probe_success{probe="default"} 1`)
		}))
		t.Cleanup(srv.Close)
		exporters[cluster] = srv
		// The labels the chart's ServiceMonitor gives the target; the same
		// in both clusters, as two clusters' pods can have.
		localcluster.PrometheusAgentForTest(t, dir, "agent-"+cluster, map[string]string{"cluster": cluster}, central+"/api/v1/write", fmt.Sprintf(`
  - job_name: watchprobe
    static_configs:
      - targets: [%q]
        labels: {pod: watchprobe-0, node: node-1}
`, strings.TrimPrefix(srv.URL, "http://")))
	}
	waitQuery(t, central, `group by (cluster) (up{job="watchprobe"} == 1)`, 2*time.Minute, func(s []promSample) bool {
		return len(s) == 2
	})
	// Before the agents' first samples arrived, no target of the job was
	// there at all (absent(up)): that alert resolves once both report.
	waitQuery(t, central, `ALERTS{alertname="WatchprobeAbsent"}`, time.Minute, func(s []promSample) bool {
		return len(s) == 0
	})

	// Cluster b's exporter stops: its agent scrapes up 0.
	exporters["b"].Close()
	page := waitQuery(t, central, `ALERTS{alertname="WatchprobeAbsent", alertstate="firing", severity="critical"}`, 2*time.Minute, func(s []promSample) bool {
		return len(s) > 0
	})
	if len(page) != 1 || page[0].labels["cluster"] != "b" || page[0].labels["instance"] != "" {
		t.Errorf("the absent cluster's page has labels %v, want one page for cluster b, without a target's labels", page)
	}
	if d := alertDescription(t, central, "WatchprobeAbsent", "critical"); !strings.Contains(d, "in cluster b within the last 1d") {
		t.Errorf("the absent cluster's page says %q, without naming cluster b", d)
	}
	if s := query(t, central, `ALERTS{alertname="WatchprobeAbsent", cluster="a"}`); len(s) > 0 {
		t.Errorf("WatchprobeAbsent for cluster a, which still reports: %v", s)
	}
}
