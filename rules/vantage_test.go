package rules

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// Two exporter replicas, two vantage points, on the real control plane,
// scraped by a real Prometheus that evaluates the chart's rules, each
// replica's apiserver connection through a fault proxy of its own: a stall
// of one replica's watch streams warns and names that replica, and pages
// nothing; the same stall on both pages, once per path, without replica
// labels.
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
	var targets strings.Builder
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
	}
	for _, r := range replicas {
		localcluster.WaitHTTP(t, "http://"+r.addr+"/-/ready")
	}

	// The chart's default rules, two replicas required, but for the stall's
	// minute.
	rulesPath := localcluster.WriteFileForTest(t, dir, "watchprobe.rules.yml",
		string(renderRules(t, "--set", "prometheusRule.alerts.watchStalled.for=5s")))
	prom := localcluster.PrometheusForTest(t, dir, []string{rulesPath}, "127.0.0.1:9", fmt.Sprintf(`
  - job_name: watchprobe
    static_configs:
%s`, targets.String()))

	// Both replicas measure, every path up and not stalled.
	waitQuery(t, prom, `count(watchprobe_path_up == 1 unless watchprobe_watch_stalled == 1)`, 2*time.Minute, func(s []promSample) bool {
		return len(s) == 1 && s[0].value == "4"
	})
	start := time.Now()

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
	pages := fmt.Sprintf(`max_over_time(ALERTS{alertname="WatchprobeWatchStalled", severity="critical"}[%ds])`, int(time.Since(start).Seconds())+1)
	if s := query(t, prom, pages); len(s) > 0 {
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
	t.Logf("one replica's stall warned, both replicas' paged, %s after the first stall", time.Since(start).Round(time.Second))
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
