package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// The fleet table's panel: its queries look across clusters and group by
// the cluster label; every other query selects one cluster.
const fleetPanel = "Worst clusters"

// fleetClusters are the clusters of the fleet test; the fault goes into the
// last one.
var fleetClusters = []string{"a", "b"}

// remoteWriteLag bounds how long a sample takes from an agent's scrape to
// the central store: a second of batching (the agents'
// batch_send_deadline) and the send. The central rules evaluate that far
// behind, as docs/install.md tells a fleet to.
const remoteWriteLag = 2 * time.Second

// A fleet as operators run one, all real parts: two clusters (each its own
// etcd, kube-apiserver and kube-controller-manager) with an exporter each,
// a Prometheus agent per cluster that scrapes it and remote-writes with
// its cluster as an external label, and one central Prometheus that
// receives both, evaluates the chart's rules (WatchprobeAbsent's
// per-cluster form on) and alerts through Alertmanager with
// rules/watchprobe.inhibit.yml. The two exporters'
// targets carry the same instance, pod and node, as pods of two clusters
// can: only the cluster label tells them apart. Every dashboard query,
// with one cluster selected, returns that cluster's series and nothing for
// a cluster that does not exist; a fault in cluster b fires alerts
// labelled b and nothing for a; the fleet row names b as the worst; and
// b's exporter stopped pages b absent, named.
//
// Here rather than in rules/: the dashboard's queries are this package's,
// and it is the monitoring end-to-end test in a fleet's shape, on the same
// helpers; it runs beside TestMonitoringEndToEnd's modes.
func TestFleet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	exporter := buildExporter(t, dir)
	// The central Alertmanager with the shipped inhibit rules, as
	// docs/install.md tells a fleet to run it.
	inhibit, err := os.ReadFile("../rules/watchprobe.inhibit.yml")
	if err != nil {
		t.Fatal(err)
	}
	amAddr, hook := localcluster.AlertmanagerWithConfigForTest(t, dir, []string{"alertname"}, string(inhibit))
	rulesPath := localcluster.WriteFileForTest(t, dir, "watchprobe.rules.yml",
		renderRules(t, "--set", "replicaCount=1", "--set", "prometheusRule.alerts.absent.perCluster.enabled=true",
			"--set", "prometheusRule.alerts.absent.for=5s"))
	central := localcluster.CentralPrometheusForTest(t, dir, "central", []string{rulesPath}, remoteWriteLag, amAddr)

	proxies := map[string]*faultproxy.Proxy{}
	stops := map[string]func(){}
	for _, name := range fleetClusters {
		proxies[name], stops[name] = startFleetMember(ctx, t, dir, name, exporter, central+"/api/v1/write")
	}

	// The central store holds both clusters: the dashboard's Cluster
	// variable offers each.
	localcluster.EventuallyShows(t, 90*time.Second, "both clusters' probe results in the central Prometheus", func() bool {
		return slices.Equal(labelValues(t, central, `group by (cluster) (watchprobe_probe_success)`, "cluster"), fleetClusters)
	}, func() string {
		return fmt.Sprint(localcluster.PromQuery(t, central, `group by (cluster) (watchprobe_probe_success)`))
	})

	// Every query but the fleet table's selects the cluster on every
	// series it reads, so that no line mixes clusters.
	queries := panelQueries(t)
	for title, exprs := range queries {
		for _, e := range exprs {
			checkClusterSelected(t, title, e, title != fleetPanel)
		}
	}

	// Every query returns data for each cluster once a minute of samples
	// exists (the SLO panels read recording rules over a minute), and each
	// series that keeps the cluster label is of the cluster selected; but
	// the node agents' latency, whose native histograms the Prometheus
	// agents here do not ingest.
	var empty []string
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
		empty = empty[:0]
		for title, exprs := range queries {
			for _, e := range exprs {
				for _, c := range fleetClusters {
					if readsAgentLatency(e) {
						continue
					}
					if len(localcluster.PromQuery(t, central, inCluster(e, c))) == 0 {
						empty = append(empty, c+": "+title+": "+e)
					}
				}
			}
		}
		if len(empty) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(empty) > 0 {
		slices.Sort(empty)
		t.Fatalf("queries without data for a cluster after 3 minutes:\n%s", strings.Join(empty, "\n"))
	}
	for title, exprs := range queries {
		if title == fleetPanel {
			continue
		}
		for _, e := range exprs {
			for _, c := range fleetClusters {
				for _, s := range promSeries(t, central, inCluster(e, c)) {
					if got, ok := s.Metric["cluster"]; ok && got != c {
						t.Errorf("%s with cluster %s selected: a series of cluster %q: %v", title, c, got, s.Metric)
					}
				}
			}
			if got := localcluster.PromQuery(t, central, inCluster(e, "nosuch")); len(got) > 0 {
				t.Errorf("%s with a cluster that does not exist selected: %s returns %s", title, e, got)
			}
		}
	}
	if firing := localcluster.PromQuery(t, central, `ALERTS{alertstate="firing"}`); len(firing) > 0 {
		t.Fatalf("alerts firing on a healthy fleet: %s", firing)
	}

	// Cluster b silently loses every MODIFIED marker event on its way to
	// its exporter.
	faulty := fleetClusters[len(fleetClusters)-1]
	proxies[faulty].Drop(1<<30, func(ev faultproxy.Event) bool { return ev.Type == "MODIFIED" && ev.Namespace == "watchprobe" })
	lost := hook.Wait(t, 2*time.Minute, "WatchprobeEventsLost")
	if lost.Labels["cluster"] != faulty || !strings.Contains(lost.Annotations["description"], "in cluster "+faulty) {
		t.Errorf("WatchprobeEventsLost delivered with labels %v and description %q, want cluster %s", lost.Labels, lost.Annotations["description"], faulty)
	}

	// The fleet row answers which cluster: one row per cluster in each of
	// its columns, b's budget burning faster than a's and its losses
	// counted, a's none.
	value := func(expr, cluster string) float64 {
		for _, s := range promSeries(t, central, concrete(expr)) {
			if s.Metric["cluster"] == cluster {
				return s.value(t)
			}
		}
		return -1
	}
	// The table's columns in order: alerts firing, burn rate, replicas up,
	// lost in range, stalled, down.
	burn, lostIn := queries[fleetPanel][1], queries[fleetPanel][3]
	localcluster.EventuallyShows(t, time.Minute, "the fleet row ranks cluster b worst: more budget burn, losses where a has none", func() bool {
		return value(lostIn, faulty) > 0 && value(lostIn, "a") == 0 && value(burn, faulty) > value(burn, "a")
	}, func() string {
		return fmt.Sprintf("burn a %v b %v, lost a %v b %v", value(burn, "a"), value(burn, faulty), value(lostIn, "a"), value(lostIn, faulty))
	})
	for _, e := range queries[fleetPanel] {
		var got []string
		for _, s := range promSeries(t, central, concrete(e)) {
			if len(s.Metric) != 1 {
				t.Errorf("fleet query %s: series %v, want the cluster label alone", e, s.Metric)
			}
			got = append(got, s.Metric["cluster"])
		}
		if slices.Sort(got); !slices.Equal(got, fleetClusters) {
			t.Errorf("fleet query %s: clusters %v, want one row for each of %v", e, got, fleetClusters)
		}
	}

	// Cluster b's exporter stops: the central store pages that cluster
	// absent, named (it reported, and no target of it is up now).
	stops[faulty]()
	var absent localcluster.DeliveredAlert
	localcluster.EventuallyShows(t, 2*time.Minute, "Alertmanager delivering WatchprobeAbsent, critical", func() bool {
		for _, n := range hook.Notifications() {
			for _, a := range n {
				if a.Labels["alertname"] == "WatchprobeAbsent" && a.Labels["severity"] == "critical" && a.Status == "firing" {
					absent = a
					return true
				}
			}
		}
		return false
	}, func() string {
		return fmt.Sprint(localcluster.PromQuery(t, central, `ALERTS{alertname="WatchprobeAbsent"}`))
	})
	if absent.Labels["cluster"] != faulty || absent.Labels["instance"] != "" || !strings.Contains(absent.Annotations["description"], "in cluster "+faulty) {
		t.Errorf("WatchprobeAbsent paged with labels %v and description %q, want cluster %s's, named", absent.Labels, absent.Annotations["description"], faulty)
	}

	// Nothing fires for the healthy cluster, nor without a cluster: every
	// alert firing and every one Alertmanager delivered is b's. But one:
	// before the agents' first samples arrived, the central store had no
	// target of the job at all, which WatchprobeAbsent's absent(up) form
	// says (its `for` is seconds here), and which resolved before the
	// healthy fleet was checked above.
	startup := func(l map[string]string) bool {
		return l["alertname"] == "WatchprobeAbsent" && len(l) == 3 && l["job"] == "watchprobe" && l["severity"] == "warning"
	}
	for _, s := range promSeries(t, central, `ALERTS{alertstate="firing"}`) {
		if s.Metric["cluster"] != faulty {
			t.Errorf("alert firing outside cluster %s: %v", faulty, s.Metric)
		}
	}
	for _, n := range hook.Notifications() {
		for _, a := range n {
			if a.Labels["cluster"] != faulty && !startup(a.Labels) {
				t.Errorf("Alertmanager delivered an alert outside cluster %s: %v", faulty, a.Labels)
			}
		}
	}
}

// startFleetMember starts cluster name of the fleet: its control plane and
// controller-manager, its exporter (behind a fault proxy, with every path
// and row of the dashboard configured, as TestMonitoringEndToEnd's), two
// node agents' series (serveAgents) and the Prometheus agent that scrapes
// them and remote-writes to remoteWrite with cluster=name. It returns the exporter's fault proxy, and a func that
// stops the exporter.
func startFleetMember(ctx context.Context, t *testing.T, dir, name, exporter, remoteWrite string) (*faultproxy.Proxy, func()) {
	t.Helper()
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cluster, proxy, kubeconfig := monitoredCluster(ctx, t, dir)
	config := localcluster.WriteFileForTest(t, dir, "watchprobe.yml", monitoredProbes(cluster.EtcdURL, strings.TrimPrefix(cluster.APIServerURL, "https://")))
	addr, stop := localcluster.RunStoppableForTest(t, dir, "watchprobe", exporter, "--kubeconfig", kubeconfig,
		"--probe.replica", "fleet", "--config.file", config, "--web.listen-address", "{addr}", loadTolerant[0], loadTolerant[1])
	localcluster.WaitHTTP(t, "http://"+addr+"/-/ready")
	// The same instance, pod and node in every cluster, as two clusters'
	// pods can have: the external label is what keeps them apart.
	localcluster.PrometheusAgentForTest(t, dir, "agent", map[string]string{"cluster": name}, remoteWrite, fmt.Sprintf(`
  - job_name: watchprobe
    static_configs:
      - targets: [%q]
        labels: {instance: "10.0.0.7:8080", pod: watchprobe-0, node: node-1}
`, addr)+agentScrape(serveAgents(t), ""))
	return proxy, stop
}

// inCluster is expr with cluster selected and every other variable as
// concrete makes it.
func inCluster(expr, cluster string) string {
	return concrete(strings.ReplaceAll(expr, "$cluster", cluster))
}

// checkClusterSelected parses a panel's query and fails the test where a
// series selector does not select the Cluster variable's value (selected)
// or, for the fleet table (!selected), where the query does not group by
// the cluster label alone.
func checkClusterSelected(t *testing.T, title, expr string, selected bool) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(inCluster(expr, "CLUSTER"))
	if err != nil {
		t.Errorf("panel %s: %v", title, err)
		return
	}
	if !selected {
		agg, ok := e.(*parser.AggregateExpr)
		for ok && agg.Op == parser.TOPK {
			agg, ok = agg.Expr.(*parser.AggregateExpr)
		}
		if !ok || agg.Without || !slices.Equal(agg.Grouping, []string{"cluster"}) {
			t.Errorf("fleet panel %s: %s does not aggregate by the cluster label alone", title, expr)
		}
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && !slices.ContainsFunc(vs.LabelMatchers, func(m *labels.Matcher) bool {
			return m.Name == "cluster" && m.Value == "CLUSTER"
		}) {
			t.Errorf("panel %s: selector %s does not select the cluster", title, vs)
		}
		return nil
	})
}

// promSample is one series of an instant query's result.
type promSample struct {
	Metric map[string]string
	Value  [2]any
}

func (s promSample) value(t *testing.T) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// promSeries runs an instant query and decodes its vector.
func promSeries(t *testing.T, prom, query string) []promSample {
	t.Helper()
	var out []promSample
	for _, raw := range localcluster.PromQuery(t, prom, query) {
		var s promSample
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("%s: %v", query, err)
		}
		out = append(out, s)
	}
	return out
}

// labelValues is the sorted values of label over query's series.
func labelValues(t *testing.T, prom, query, label string) []string {
	t.Helper()
	var out []string
	for _, s := range promSeries(t, prom, query) {
		out = append(out, s.Metric[label])
	}
	slices.Sort(out)
	return out
}
