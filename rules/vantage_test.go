package rules

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// Two exporter replicas on the real control plane, each replica's
// apiserver connection through a fault proxy of its own, scraped by two
// real Prometheus servers that evaluate the chart's rules: one sees the
// replicas on two nodes (two vantage points), the other on one node (one
// vantage point, as after a drain). A stall of one replica's watch streams
// warns and names that replica, and pages nothing; the same stall on both
// pages, once per path, without replica labels, where they run on two
// nodes, and where they share a node is a warning for each replica, never
// a page, and WatchprobeVantagePointsMissing names the node.
func TestVantagePointsOnTheControlPlane(t *testing.T) {
	cluster := localcluster.StartForTest(t, localcluster.Options{})
	localcluster.CreateNamespacesForTest(t, kubernetes.NewForConfigOrDie(cluster.AdminConfig()), "watchprobe")
	cert, key, err := cluster.IssueServing()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := exportertest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A short stall bound, so that a stall shows within seconds.
	config := localcluster.WriteFileForTest(t, dir, "watchprobe.yml", `
probes:
  - name: default
    interval: 500ms
    deadline: 1s
    stall_after: 3s
    paths: [informer, watch]
`)
	type replica struct {
		pod, node, addr string
		proxy           *faultproxy.Proxy
	}
	replicas := []*replica{{pod: "watchprobe-a", node: "node-1"}, {pod: "watchprobe-b", node: "node-2"}}
	var targets, sameNode strings.Builder
	for _, r := range replicas {
		r.proxy, err = faultproxy.New(cluster.APIServerURL, cluster.CAPEM(), cert, key)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.proxy.Close() })
		kubeconfig := filepath.Join(dir, r.pod+".kubeconfig")
		if err := localcluster.WriteKubeconfig(r.proxy.Config(cluster.AdminConfig()), kubeconfig); err != nil {
			t.Fatal(err)
		}
		r.addr = localcluster.RunForTest(t, dir, r.pod, bin, "--kubeconfig", kubeconfig, "--probe.replica", r.pod,
			"--config.file", config, "--web.listen-address", "{addr}")
		// The labels the chart's ServiceMonitor gives each replica's target.
		fmt.Fprintf(&targets, "      - targets: [%q]\n        labels: {cluster: local, pod: %s, node: %s}\n", r.addr, r.pod, r.node)
		fmt.Fprintf(&sameNode, "      - targets: [%q]\n        labels: {cluster: local, pod: %s, node: node-1}\n", r.addr, r.pod)
	}
	for _, r := range replicas {
		localcluster.WaitHTTP(t, "http://"+r.addr+"/-/ready")
	}

	// The chart's default rules, two nodes required, but for the stall's
	// minute and WatchprobeVantagePointsMissing's quarter of an hour.
	rulesPath := localcluster.WriteFileForTest(t, dir, "watchprobe.rules.yml",
		string(renderRules(t, "--set", "prometheusRule.alerts.watchStalled.for=5s", "--set", "prometheusRule.alerts.vantagePointsMissing.for=5s")))
	scrape := func(targets string) string {
		return fmt.Sprintf(`
  - job_name: watchprobe
    static_configs:
%s`, targets)
	}
	prom := localcluster.PrometheusForTest(t, dir, []string{rulesPath}, "127.0.0.1:9", scrape(targets.String()))
	oneNodeDir := filepath.Join(dir, "one-node")
	if err := os.Mkdir(oneNodeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	oneNode := localcluster.PrometheusForTest(t, oneNodeDir, []string{rulesPath}, "127.0.0.1:9", scrape(sameNode.String()))

	// Both replicas measure, every path up and not stalled.
	for _, p := range []string{prom, oneNode} {
		waitQuery(t, p, `count(watchprobe_path_up == 1 unless watchprobe_watch_stalled == 1)`, 2*time.Minute, func(s []promSample) bool {
			return len(s) == 1 && s[0].value == "4"
		})
	}
	start := time.Now()

	// Both replicas on one node: fewer nodes than required, named; on two,
	// nothing missing.
	missing := waitQuery(t, oneNode, `ALERTS{alertname="WatchprobeVantagePointsMissing", alertstate="firing"}`, 2*time.Minute, func(s []promSample) bool {
		return len(s) == 1
	})
	if missing[0].labels["cluster"] != "local" || missing[0].labels["pod"] != "" {
		t.Errorf("WatchprobeVantagePointsMissing with labels %v, want the cluster's, without a replica's", missing[0].labels)
	}
	if d := alertDescription(t, oneNode, "WatchprobeVantagePointsMissing"); !strings.Contains(d, "Replicas reporting results in cluster local (job watchprobe): 2 on node node-1.") {
		t.Errorf("WatchprobeVantagePointsMissing's description %q does not name node-1 and its two replicas", d)
	}

	// One replica's streams go silent: its paths stall. A warning per path
	// names the replica and its node; no page was ever pending.
	replicas[0].proxy.Stall()
	warnings := waitQuery(t, prom, `ALERTS{alertname="WatchprobeWatchStalled", alertstate="firing", severity="warning"}`, 2*time.Minute, func(s []promSample) bool {
		return len(s) == 2
	})
	for _, w := range warnings {
		if w.labels["pod"] != "watchprobe-a" || w.labels["node"] != "node-1" || w.labels["cluster"] != "local" {
			t.Errorf("a warning for one replica's stall with labels %v, want its pod, node and cluster", w.labels)
		}
	}
	pages := func() string {
		return fmt.Sprintf(`max_over_time(ALERTS{alertname="WatchprobeWatchStalled", severity="critical"}[%ds])`, int(time.Since(start).Seconds())+1)
	}
	if s := query(t, prom, pages()); len(s) > 0 {
		t.Errorf("one replica's stall made a page pending or firing: %v", s)
	}

	// The other replica's streams go silent too: the stall is seen from
	// both vantage points, and pages once per path, with no replica label;
	// the warnings give way to it.
	replicas[1].proxy.Stall()
	critical := waitQuery(t, prom, `ALERTS{alertname="WatchprobeWatchStalled", alertstate="firing", severity="critical"}`, 2*time.Minute, func(s []promSample) bool {
		return len(s) == 2
	})
	for _, c := range critical {
		if c.labels["pod"] != "" || c.labels["instance"] != "" || c.labels["node"] != "" || c.labels["cluster"] != "local" || c.labels["probe"] != "default" {
			t.Errorf("the page for a stall seen from both replicas has labels %v, want the cluster and probe without replica labels", c.labels)
		}
	}
	waitQuery(t, prom, `ALERTS{alertname="WatchprobeWatchStalled", severity="warning"}`, time.Minute, func(s []promSample) bool {
		return len(s) == 0
	})

	// Seen from one node, the same stall of both replicas is a warning
	// for each, on each path, that names the node both report from; no
	// page was ever pending there.
	warnings = waitQuery(t, oneNode, `ALERTS{alertname="WatchprobeWatchStalled", alertstate="firing", severity="warning"}`, 2*time.Minute, func(s []promSample) bool {
		return len(s) == 4
	})
	for _, w := range warnings {
		if w.labels["node"] != "node-1" || w.labels["pod"] == "" {
			t.Errorf("a one-node stall warning with labels %v, want its pod on node-1", w.labels)
		}
	}
	if d := alertDescription(t, oneNode, "WatchprobeWatchStalled"); !strings.Contains(d, "Replicas reporting: 2 on node node-1.") {
		t.Errorf("the one-node stall warning's description %q does not say both replicas report from node-1", d)
	}
	if s := query(t, oneNode, pages()); len(s) > 0 {
		t.Errorf("a stall of two replicas on one node made a page pending or firing: %v", s)
	}
	missingEver := fmt.Sprintf(`max_over_time(ALERTS{alertname="WatchprobeVantagePointsMissing"}[%ds])`, int(time.Since(start).Seconds())+1)
	if s := query(t, prom, missingEver); len(s) > 0 {
		t.Errorf("WatchprobeVantagePointsMissing pending or firing with replicas on two nodes: %v", s)
	}
	t.Logf("one replica's stall warned, both replicas' paged, %s after the first stall", time.Since(start).Round(time.Second))
}

// alertDescription is the description of a firing alert named name (of
// that severity, if one is given), as Prometheus's alerts API gives it
// with its templates expanded.
func alertDescription(t *testing.T, prom, name string, severity ...string) string {
	t.Helper()
	resp, err := http.Get(prom + "/api/v1/alerts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Alerts []struct {
				Labels      map[string]string
				Annotations map[string]string
				State       string
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == name && a.State == "firing" && (len(severity) == 0 || a.Labels["severity"] == severity[0]) {
			return a.Annotations["description"]
		}
	}
	t.Fatalf("no firing %s in %s/api/v1/alerts", name, prom)
	return ""
}

type promSample struct {
	labels map[string]string
	value  string
}

func query(t *testing.T, prom, q string) []promSample {
	t.Helper()
	var out []promSample
	for _, raw := range localcluster.PromQuery(t, prom, q) {
		var s struct {
			Metric map[string]string
			Value  [2]any
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, promSample{s.Metric, fmt.Sprint(s.Value[1])})
	}
	return out
}

// waitQuery polls Prometheus until the query's result satisfies ok, and
// returns it.
func waitQuery(t *testing.T, prom, q string, within time.Duration, ok func([]promSample) bool) []promSample {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := query(t, prom, q)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, %s returns %v", within, q, s)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
