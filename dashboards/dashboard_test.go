package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/repotest"
)

// A stale dashboard fails the tests: the committed JSON must be what the
// generator writes (`make dashboards` regenerates it).
func TestCommittedDashboardIsFresh(t *testing.T) {
	want := buildDefault(t)
	got, err := os.ReadFile("watchprobe.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("dashboards/watchprobe.json is stale: run `make dashboards` and commit it")
	}
}

// buildDefault builds the dashboard as `make dashboards` does.
func buildDefault(t *testing.T) []byte {
	t.Helper()
	runbooks, err := defaultRunbooks()
	if err != nil {
		t.Fatal(err)
	}
	data, err := build(defaultParams(runbooks))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// splitPanel splits the latency into etcd's, the apiserver's and the
// client's shares; its queries come in that order.
const splitPanel = "Where the time goes: etcd / apiserver / client"

// panelQueries returns each panel's title and its queries' expressions.
func panelQueries(t *testing.T) map[string][]string {
	t.Helper()
	data := buildDefault(t)
	type panel struct {
		Title   string
		Type    string
		Targets []struct{ Expr string }
		Panels  []panel // of a collapsed row
	}
	var d struct{ Panels []panel }
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(panels []panel) {
		for _, p := range panels {
			walk(p.Panels)
			for _, q := range p.Targets {
				out[p.Title] = append(out[p.Title], q.Expr)
			}
		}
	}
	walk(d.Panels)
	return out
}

// concrete replaces Grafana's variables with what they stand for when
// every value is selected over a short range.
func concrete(expr string) string {
	return strings.NewReplacer(
		"$__rate_interval", "15s", "$__range", "1m",
		"$cluster", ".*", "$job", ".*", "$pod", ".*", "$probe", ".*", "$path", ".*", "$apiserver", ".*",
	).Replace(expr)
}

type rulesFile struct {
	Groups []struct {
		Rules []struct {
			Record string
			Alert  string
			Expr   string
		}
	}
}

func loadRules(t *testing.T) rulesFile {
	t.Helper()
	data, err := os.ReadFile("../rules/watchprobe.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rf rulesFile
	if err := yaml.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	return rf
}

// checkNames parses expr and reports every metric or label it names that
// is not among known.
func checkNames(t *testing.T, where, expr string, metrics, labels map[string]bool) {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: does not parse as PromQL: %v\n%s", where, err, expr)
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name != "" && !metrics[n.Name] {
				t.Errorf("%s: names metric %s, which the exporter does not expose", where, n.Name)
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !labels[m.Name] {
					t.Errorf("%s: names label %s, which no exposed series has", where, m.Name)
				}
			}
		case *parser.AggregateExpr:
			for _, l := range n.Grouping {
				if !labels[l] {
					t.Errorf("%s: groups by label %s, which no exposed series has", where, l)
				}
			}
		}
		return nil
	})
}

// histogramMode is how the exporter exposes its histograms and how
// Prometheus ingests them.
type histogramMode struct {
	name         string
	exporterArgs []string
	scrape       string // lines added to the scrape config
	// native: Prometheus stores the latency histograms as native
	// histograms and has no _bucket series of them.
	native bool
}

var histogramModes = []histogramMode{
	// The exporter's default (classic and native buckets) scraped by
	// Prometheus's default, which ingests the classic buckets only.
	{name: "classic"},
	// --no-metrics.classic-histograms scraped by a Prometheus that ingests
	// native histograms: no histogram has a _bucket series.
	{name: "native", exporterArgs: []string{"--no-metrics.classic-histograms"}, scrape: "    scrape_native_histograms: true\n", native: true},
}

// loadTolerant raises the exporter's starvation threshold: these tests
// count the faults they inject exactly, and on the loaded test machine the
// exporter's self-monitor rightly finds itself starved at times and makes a
// share of its verdicts unmeasurable, none of them injected. No cgroup
// limits the exporter here, so nothing else counts as starvation.
var loadTolerant = [2]string{"--exporter.starved-threshold", "30s"}

// The dashboard and the rules, proven against a real Prometheus scraping
// the real exporter on the real control plane, with classic histograms and
// with native histograms only: every query names only what the exporter
// exposes and returns data, and a fault injected into the watch stream
// fires the matching alert through a real Alertmanager to a webhook, with
// its severity and annotations. The modes run in parallel, each with its
// own control plane, processes, ports and directories.
func TestMonitoringEndToEnd(t *testing.T) {
	for _, mode := range histogramModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			monitoringEndToEnd(t, mode)
		})
	}
}

// monitoredCluster starts a control plane with a controller-manager,
// straight to the apiserver, for the controller row (its deployment
// controller answers the probe's changes), the namespace watchprobe, and a
// fault proxy in front of the apiserver; it writes into dir the
// kubeconfig through that proxy that the exporter gets.
func monitoredCluster(ctx context.Context, t *testing.T, dir string) (*localcluster.Cluster, *faultproxy.Proxy, string) {
	t.Helper()
	cluster := localcluster.StartForTest(t, localcluster.Options{})
	localcluster.StartControllerManagerForTest(t, cluster, localcluster.ControllerManagerOptions{})
	admin := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "watchprobe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	proxy := cluster.FaultProxyForTest(t)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := localcluster.WriteKubeconfig(proxy.Config(cluster.AdminConfig()), kubeconfig); err != nil {
		t.Fatal(err)
	}
	return cluster, proxy, kubeconfig
}

func monitoringEndToEnd(t *testing.T, mode histogramMode) {
	ctx := context.Background()
	dir := t.TempDir()
	cluster, proxy, kubeconfig := monitoredCluster(ctx, t, dir)

	// The etcd path too, straight to the control plane's etcd (plain http
	// on loopback, past the fault proxy), so that the panel splitting the
	// latency into etcd, apiserver and client shares has data; a path
	// pinned to the apiserver itself for the per-apiserver row (its
	// loopback certificate names localhost); resume checks for the resume
	// row; and the deployment controller for the controller row.
	// The pinned path goes through a fault proxy of its own, so that the
	// exporter's permissions can be taken from every path below, as RBAC
	// would, while the outage before them leaves it up.
	pinned := cluster.FaultProxyForTest(t)
	apiserver := strings.TrimPrefix(pinned.URL, "https://")
	config := localcluster.WriteFileForTest(t, dir, "watchprobe.yml", monitoredProbes(cluster.EtcdURL, apiserver))
	exporterAddr := localcluster.RunForTest(t, dir, "watchprobe", buildExporter(t, dir), append([]string{
		"--kubeconfig", kubeconfig, "--probe.replica", "e2e", "--config.file", config,
		"--web.listen-address", "{addr}", loadTolerant[0], loadTolerant[1]}, mode.exporterArgs...)...)
	localcluster.WaitHTTP(t, "http://"+exporterAddr+"/-/ready")
	// Ready is the exporter's own state; the series of its paths' activity
	// come once they have delivered.
	waitScrape(t, "http://"+exporterAddr+"/metrics", `watchprobe_probe_success{probe="default"} 1`)
	// The resume window exists once a round has judged every age.
	waitScrape(t, "http://"+exporterAddr+"/metrics", `watchprobe_resume_window_seconds{apiserver="`+apiserver+`"`)

	// Names the exporter really exposes, read from its output, and the
	// node agents' series as an agent registers them.
	metrics, labels := exposed(t, "http://"+exporterAddr+"/metrics")
	agentAddr := serveAgents(t)
	agentMetrics, agentLabels := exposed(t, "http://"+agentAddr+"/metrics")
	maps.Copy(metrics, agentMetrics)
	maps.Copy(labels, agentLabels)
	rules := loadRules(t)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				metrics[r.Record] = true
			}
		}
	}
	// Target labels Prometheus adds (pod and node: the chart's
	// ServiceMonitor), and the version labels a ServiceMonitor's
	// targetLabels may copy, which the SLO rules sum away
	// (prometheusRule.slo.aggregateLabels).
	for _, l := range []string{"job", "instance", "cluster", "pod", "node", "helm_sh_chart", "app_kubernetes_io_version", "pod_template_hash", "controller_revision_hash"} {
		labels[l] = true
	}
	metrics["up"] = true
	// The alerts Prometheus records, which the verdicts and the fleet
	// table read: what pages.
	metrics["ALERTS"] = true
	for _, l := range []string{"alertname", "alertstate", "vantage_points", "severity"} {
		labels[l] = true
	}
	queries := panelQueries(t)
	for title, exprs := range queries {
		for _, e := range exprs {
			checkNames(t, "panel "+title, concrete(e), metrics, labels)
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			checkNames(t, "rule "+r.Record+r.Alert, r.Expr, metrics, labels)
		}
	}

	amAddr, hook := localcluster.AlertmanagerForTest(t, dir)

	// The chart's default rules for the one exporter this runs
	// (replicaCount 1: its view pages alone), but for WatchprobePathDown's
	// and WatchprobePathRefused's minutes.
	rulesPath := localcluster.WriteFileForTest(t, dir, "watchprobe.rules.yml", renderRules(t, "--set", "replicaCount=1", "--set", "prometheusRule.alerts.pathDown.for=10s",
		"--set", "prometheusRule.alerts.pathDown.window=20s", "--set", "prometheusRule.alerts.pathRefused.for=10s"))
	prom := localcluster.PrometheusForTest(t, dir, []string{rulesPath}, amAddr, fmt.Sprintf(`
  - job_name: watchprobe
%s    static_configs:
      - targets: [%q]
        labels: {pod: watchprobe-e2e, node: node-1}
`, mode.scrape, exporterAddr)+agentScrape(agentAddr, mode.scrape))

	// Every query returns data once a minute of samples exists (the SLO
	// panels read recording rules over a minute). Anomaly counters return
	// zero-valued series on a healthy cluster. The agents' latency panels
	// read native histograms only: with classic ones ingested they have
	// none, as the row says.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var empty []string
		for title, exprs := range queries {
			for _, e := range exprs {
				if got := localcluster.PromQuery(t, prom, concrete(e)); !mode.native && readsAgentLatency(e) {
					if len(got) > 0 {
						t.Fatalf("%s: %s returns %s from classic histograms, want nothing", title, e, got)
					}
				} else if len(got) == 0 {
					empty = append(empty, title+": "+e)
				}
			}
		}
		if len(empty) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(empty)
			t.Fatalf("queries without data after 3 minutes:\n%s", strings.Join(empty, "\n"))
		}
		time.Sleep(2 * time.Second)
	}
	// The split is per exporter and probe: every share keeps the labels
	// that tell exporters apart (the client's share matched its two
	// quantiles on them), and is a number of seconds; etcd's is above zero,
	// as every write takes time to reach etcd and come back.
	for i, e := range queries[splitPanel] {
		for _, raw := range localcluster.PromQuery(t, prom, concrete(e)) {
			var s struct {
				Metric map[string]string
				Value  [2]any
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			if s.Metric["job"] != "watchprobe" || s.Metric["instance"] != exporterAddr || s.Metric["probe"] != "default" {
				t.Errorf("%s: series %v, want job, instance and probe kept", e, s.Metric)
			}
			v, err := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || (i == 0 && v <= 0) {
				t.Errorf("%s: value %v, want seconds (above zero for etcd's share)", e, s.Value[1])
			}
		}
	}
	if len(queries[splitPanel]) != 3 {
		t.Errorf("panel %q has %d queries, want etcd, apiserver and client", splitPanel, len(queries[splitPanel]))
	}

	// The panels answered from the form the mode stores: classic buckets,
	// or native histograms with no bucket series at all.
	buckets := len(localcluster.PromQuery(t, prom, `{__name__=~"watchprobe_.*_bucket"}`))
	natives := len(localcluster.PromQuery(t, prom, `histogram_count(watchprobe_event_latency_seconds)`))
	if mode.native && (buckets != 0 || natives == 0) || !mode.native && (buckets == 0 || natives != 0) {
		t.Errorf("Prometheus stores %d _bucket series and %d native latency histograms, want %s ones only", buckets, natives, mode.name)
	}
	// The SLI is a fraction of events, from either form: a number between
	// 0 and 1 for each path, never NaN, on this healthy cluster close to 0.
	// The panels may have answered from the 1h and 6h records first; the
	// 5m one follows within a few evaluations.
	var sli []json.RawMessage
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		if sli = localcluster.PromQuery(t, prom, `probe_path:watchprobe_sli_error_ratio:rate5m`); len(sli) >= 4 || time.Now().After(deadline) {
			break
		}
	}
	if len(sli) != 4 {
		t.Errorf("SLI error ratio for %d paths, want informer, watch, etcd and apiserver", len(sli))
	}
	for _, raw := range sli {
		var s struct {
			Metric map[string]string
			Value  [2]any
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		if v, err := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64); err != nil || !(v >= 0 && v <= 0.5) {
			t.Errorf("SLI error ratio of %v: %v, want a fraction near 0 on a healthy cluster", s.Metric, s.Value[1])
		}
	}

	if firing := localcluster.PromQuery(t, prom, `ALERTS{alertstate="firing"}`); len(firing) > 0 {
		t.Errorf("alerts firing on a healthy cluster: %v", firing)
	}

	// Drop every MODIFIED marker event on its way to the exporter: its
	// updates are lost, silently, on both paths once lost_after passes.
	proxy.Drop(1<<30, func(ev faultproxy.Event) bool { return ev.Type == "MODIFIED" && ev.Namespace == "watchprobe" })
	alert := hook.Wait(t, 2*time.Minute, "WatchprobeEventsLost")
	if alert.Labels["severity"] != "warning" {
		t.Errorf("severity %q, want warning", alert.Labels["severity"])
	}
	for _, a := range []string{"summary", "description", "runbook_url"} {
		if alert.Annotations[a] == "" {
			t.Errorf("alert delivered without the %s annotation: %v", a, alert.Annotations)
		}
	}
	if !strings.Contains(alert.Annotations["runbook_url"], "/docs/alerts.md#watchprobeeventslost") {
		t.Errorf("runbook_url %q", alert.Annotations["runbook_url"])
	}

	// Fail the proxied paths' lists and watches (503) and cut their
	// streams: they are down, not stalled, while writes go on succeeding;
	// the exporter stays ready and scraped, and WatchprobePathDown fires.
	listOrWatch := func(r faultproxy.Request) bool { return r.Kind == "list" || r.Kind == "watch" }
	proxy.Refuse(1<<30, listOrWatch, http.StatusServiceUnavailable)
	proxy.CutConnections()
	cut := time.Now()
	// One replica is every replica that reports: the agreed form, a page.
	down := hook.Wait(t, 2*time.Minute, "WatchprobePathDown")
	if down.Labels["severity"] != "critical" || (down.Labels["path"] != "informer" && down.Labels["path"] != "watch") {
		t.Errorf("WatchprobePathDown delivered with labels %v", down.Labels)
	}
	// Past stall_after (30 s by default) since the cut, with writes
	// acknowledged all along, and two evaluations more.
	time.Sleep(time.Until(cut.Add(35 * time.Second)))
	if stalled := localcluster.PromQuery(t, prom, `watchprobe_watch_stalled == 1 or ALERTS{alertname="WatchprobeWatchStalled"}`); len(stalled) > 0 {
		t.Errorf("a path down counted stalled: %s", stalled)
	}
	if up := localcluster.PromQuery(t, prom, `up{job="watchprobe"} == 1`); len(up) != 1 {
		t.Errorf("the exporter is not scraped while its paths are down: %s", up)
	}
	if resp, err := http.Get("http://" + exporterAddr + "/-/ready"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/-/ready while the paths are down: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Forbid them instead (403), on every path of the probe, the pinned one
	// too: the exporter's own RBAC, not the cluster (a refusal that
	// another apiserver's path does not share is not the exporter's own).
	// WatchprobePathRefused, a warning, says so; WatchprobePathDown
	// resolves; and the writes are unmeasurable on those paths, never
	// missed, so nothing burns.
	proxy.Clear()
	for _, p := range []*faultproxy.Proxy{proxy, pinned} {
		p.Refuse(1<<30, listOrWatch, http.StatusForbidden)
		p.CutConnections()
	}
	refused := hook.Wait(t, 2*time.Minute, "WatchprobePathRefused")
	if refused.Labels["severity"] != "warning" || refused.Labels["reason"] != "forbidden" {
		t.Errorf("WatchprobePathRefused delivered with labels %v", refused.Labels)
	}
	// Each path is refused after three refusals in a row; the informer's
	// reflector backed off to 30 s, jittered up to 60 s, in the outage
	// before, so its three take up to three minutes.
	localcluster.EventuallyShows(t, 4*time.Minute, "WatchprobePathDown resolved", func() bool {
		return len(localcluster.PromQuery(t, prom, `ALERTS{alertname="WatchprobePathDown"}`)) == 0
	}, func() string {
		return fmt.Sprint(localcluster.PromQuery(t, prom, `ALERTS{alertname="WatchprobePathDown"}`))
	})
	exporterURL := "http://" + exporterAddr
	unmeasurable := func() float64 {
		return proxiedSum(t, exporterURL, "watchprobe_events_unmeasurable_total", map[string]string{"reason": "path_refused"})
	}
	missed, before := proxiedSum(t, exporterURL, "watchprobe_events_missed_total", nil), unmeasurable()
	localcluster.Eventually(t, time.Minute, "writes unmeasurable on the refused paths", func() bool { return unmeasurable() >= before+4 })
	if got := proxiedSum(t, exporterURL, "watchprobe_events_missed_total", nil); got != missed {
		t.Errorf("the refused paths missed %g events more while refused, want none", got-missed)
	}
}

// proxiedSum scrapes the exporter at url, its base URL, and sums family
// over the paths behind the fault proxy, informer and watch, and the
// labels of match.
func proxiedSum(t *testing.T, url, family string, match map[string]string) float64 {
	t.Helper()
	families, err := exportertest.Scrape(url)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, path := range []string{"informer", "watch"} {
		labels := map[string]string{"path": path}
		maps.Copy(labels, match)
		v, _ := exportertest.Sum(families, family, labels)
		sum += v
	}
	return sum
}

// renderRules renders the chart's rules file with the chart's defaults and
// helmArgs, as rules/watchprobe.rules.yml is rendered.
func renderRules(t *testing.T, helmArgs ...string) string {
	t.Helper()
	out := repotest.HelmTemplate(t, localcluster.ToolForTest(t, "helm"), append([]string{"watchprobe", "../charts/watchprobe",
		"--set", "prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml"}, helmArgs...)...)
	var rule struct{ Spec any }
	if err := yaml.Unmarshal(out, &rule); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(spec)
}

func buildExporter(t *testing.T, dir string) string {
	t.Helper()
	bin, err := exportertest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// waitScrape waits for a line of url's exposition to start with want.
func waitScrape(t *testing.T, url, want string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, want) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no line %s after 90 s", url, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exposed scrapes the exporter and returns the metric names (histograms
// with their _bucket, _sum and _count series) and label names it exposes.
func exposed(t *testing.T, url string) (metrics, labels map[string]bool) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, labels = map[string]bool{}, map[string]bool{}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return metrics, labels
			}
			t.Fatal(err)
		}
		name := mf.GetName()
		metrics[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				metrics[name+s] = true
			}
			labels["le"] = true
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
	}
}

// The dashboard answers "which cluster?" and "is List-Watch healthy, and
// where not?" at a glance: the fleet comes first, the verdicts and the SLO
// row next; every stat colours
// its value by thresholds (more than one colour); every latency series
// panel draws the objective; every runbook link points at an alert's
// section of docs/alerts.md; the cluster variable is one cluster, not All.
func TestDashboardAtAGlance(t *testing.T) {
	type panel struct {
		Title       string
		Type        string
		Unit        string
		FieldConfig struct {
			Defaults struct {
				Unit       string
				Thresholds struct{ Steps []struct{ Color string } }
				Custom     struct {
					ThresholdsStyle struct{ Mode string }
				}
			}
		}
		Links  []struct{ Url string }
		Panels []panel
	}
	var d struct {
		Panels     []panel
		Templating struct {
			List []struct {
				Name       string
				IncludeAll bool
				Multi      bool
			}
		}
	}
	if err := json.Unmarshal(buildDefault(t), &d); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
		}
	}
	if len(rows) < 3 || !strings.HasPrefix(rows[0], "Fleet") || rows[1] != "Verdicts" || !strings.HasPrefix(rows[2], "SLO") {
		t.Errorf("rows %v, want the fleet first, then Verdicts and the SLO row", rows)
	}
	docs, err := os.ReadFile("../docs/alerts.md")
	if err != nil {
		t.Fatal(err)
	}
	links := 0
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			fd := p.FieldConfig.Defaults
			if p.Type == "stat" && len(fd.Thresholds.Steps) < 2 {
				t.Errorf("stat %q has thresholds %v: one colour says nothing", p.Title, fd.Thresholds.Steps)
			}
			if p.Type == "timeseries" && fd.Unit == "s" && strings.Contains(strings.ToLower(p.Title), "latency") && fd.Custom.ThresholdsStyle.Mode != "line" {
				t.Errorf("latency panel %q draws no objective line", p.Title)
			}
			for _, l := range p.Links {
				links++
				_, anchor, ok := strings.Cut(l.Url, "/docs/alerts.md#")
				if !ok || !strings.Contains(string(docs), "\n## "+anchorTitle(anchor)+"\n") {
					t.Errorf("panel %q links to %s, no section of docs/alerts.md", p.Title, l.Url)
				}
			}
		}
	}
	walk(d.Panels)
	if links < 20 {
		t.Errorf("%d panels link to a runbook", links)
	}
	for _, v := range d.Templating.List {
		if v.Name == "cluster" && (v.IncludeAll || v.Multi) {
			t.Errorf("the cluster variable includes All or several clusters")
		}
	}
}

// anchorTitle is the alert name of a runbook anchor (its lowercase form).
func anchorTitle(anchor string) string {
	for _, name := range alertNames {
		if strings.ToLower(name) == anchor {
			return name
		}
	}
	return anchor
}

var alertNames = func() []string {
	data, err := os.ReadFile("../rules/watchprobe.rules.yml")
	if err != nil {
		return nil
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)`).FindAllStringSubmatch(string(data), -1) {
		names = append(names, m[1])
	}
	return names
}()

// monitoredProbes is the exporter's config in the monitoring tests: a
// probe with every path, one pinned apiserver at apiserver (whose loopback
// certificate names localhost), resume checks, the deployment controller,
// freshness and WatchList sync checks, so that every row of the dashboard
// has series.
func monitoredProbes(etcd, apiserver string) string {
	return fmt.Sprintf(`
probes:
  - name: default
    interval: 500ms
    deadline: 1s
    lost_after: 5s
    watch_timeout: 5s
    paths: [informer, watch, etcd]
    etcd: {endpoints: [%q]}
    apiservers: {endpoints: [%q], server_name: localhost}
    resume: {ages: [2s, 4s], every: 3s}
    controllers: [deployment]
    freshness: {resources: [configmaps], every: 6s, timeout: 5s, stuck_window: 18s}
    watch_list: {resources: [configmaps], every: 5s, bound: 2s, stuck_window: 15s}
`, etcd, apiserver)
}
