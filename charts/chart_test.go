// Package charts tests the Helm chart: lint, rendering, the values schema,
// an install into the real local apiserver whose ServiceAccount then runs
// the real exporter, and an install on a real node where its image runs as
// a pod, is scraped, alerts, and is upgraded and removed.
package charts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/repotest"
)

const (
	chartDir = "watchprobe"
	// The prometheus-operator release whose module carries the CRDs of
	// ServiceMonitor and PrometheusRule; the newest the module proxy serves.
	operatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
)

func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(localcluster.ToolForTest(t, "helm"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Lint mode turns the chart's fail calls into notes, so the render tests
// below are what catch those.
func TestLint(t *testing.T) {
	for _, values := range [][]string{
		nil,
		{"watchprobe/ci/all-enabled-values.yaml"},
		{"watchprobe/ci/two-namespaces-values.yaml"},
		{"watchprobe/ci/overrides-values.yaml"},
		{"watchprobe/ci/agent-values.yaml"},
		{"watchprobe/ci/all-enabled-values.yaml", "watchprobe/ci/overrides-values.yaml"},
	} {
		args := []string{"lint", "--strict", chartDir}
		for _, f := range values {
			args = append(args, "-f", f)
		}
		if _, err := helm(t, args...); err != nil {
			t.Error(err)
		}
	}
}

// The chart's PrometheusRule with default values is rules/watchprobe.rules.yml
// (both come from templates/_rules.tpl; rules/rules_test.go keeps the file
// current and tests other values), and the dashboard ConfigMap carries
// dashboards/watchprobe.json with default values, and what the generator
// writes for the release's values with others: its files/ copy, which
// `make dashboards` refreshes, holds placeholders for them.
func TestRulesAndDashboardShipped(t *testing.T) {
	dashboardOf := func(out string) string {
		t.Helper()
		for _, cm := range find(decodeObjects(t, out), "ConfigMap") {
			if cm.GetLabels()["grafana_dashboard"] == "1" {
				return field(t, cm, "data", "watchprobe.json").(string)
			}
		}
		t.Fatal("no ConfigMap labelled grafana_dashboard: \"1\"")
		return ""
	}
	// generated is the generator's dashboard for flags.
	generated := func(flags ...string) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "watchprobe.json")
		if out, err := exec.Command("go", append([]string{"run", "../dashboards", "-o", path}, flags...)...).CombinedOutput(); err != nil {
			t.Fatalf("generating the dashboard with %v: %v\n%s", flags, err, out)
		}
		return strings.TrimRight(repotest.Read(t, path), "\n")
	}
	out, err := helm(t, "template", "wp", chartDir, "--set", "grafanaDashboard.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	if dashboardOf(out) != strings.TrimRight(repotest.Read(t, "../dashboards/watchprobe.json"), "\n") {
		t.Error("the dashboard ConfigMap with default values does not hold dashboards/watchprobe.json: run `make dashboards`")
	}

	out, err = helm(t, "template", "wp", chartDir, "--set", "prometheusRule.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../rules/watchprobe.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	source := decodeObjects(t, string(data))[0].Object["groups"]
	if got := field(t, one(t, decodeObjects(t, out), "PrometheusRule"), "spec", "groups"); !equalJSON(got, source) {
		t.Error("the PrometheusRule's groups with default values differ from rules/watchprobe.rules.yml: run `make rules`")
	}

	objs := render(t, "monitoring", "watchprobe/ci/all-enabled-values.yaml")
	rule := one(t, objs, "PrometheusRule")
	if rule.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels %v lack the release label", rule.GetLabels())
	}
	// The values reach the rules: the page's 2h window is recorded, the
	// disabled alert is gone.
	groups, _ := json.Marshal(field(t, rule, "spec", "groups"))
	if !strings.Contains(string(groups), "probe_path:watchprobe_sli_error_ratio:rate2h") || strings.Contains(string(groups), "WatchprobeEventsDuplicatedOrReordered") {
		t.Errorf("the PrometheusRule does not follow prometheusRule values:\n%s", groups)
	}
	var dash *unstructured.Unstructured
	for _, cm := range find(objs, "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			dash = cm
		}
	}
	if dash == nil {
		t.Fatal("no ConfigMap labelled grafana_dashboard: \"1\"")
	}
	// all-enabled-values.yaml's SLO, burn windows (the first two, the
	// faster first), scrape job and replicas, and its runbookUrlBase for
	// the runbook links.
	want := strings.ReplaceAll(generated("-objective", "0.5", "-target", "0.995", "-burn-windows", "2h:14.4,1d:3",
		"-scrape-job", "watchprobe-prod", "-replicas", "2", "-vantage-points", "2", "-page-severity", "P1"),
		"https://github.com/watchprobe/watchprobe/blob/v"+repotest.Version(t, "..")+"/docs/alerts.md", "https://runbooks.example.com/watchprobe")
	if got := field(t, dash, "data", "watchprobe.json").(string); got != want {
		t.Error("the dashboard ConfigMap with all-enabled-values.yaml differs from the generator's for its values")
	}
	if dash.GetAnnotations()["grafana_folder"] != "Kubernetes" {
		t.Errorf("dashboard annotations %v", dash.GetAnnotations())
	}

	// Another cluster label, and burn windows whose second burns faster,
	// give exactly what the generator writes for them.
	out, err = helm(t, "template", "wp", chartDir, "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.clusterLabel=region",
		"--set-json", `prometheusRule.alerts.eventLatencyBudgetBurn.windows=[{"long":"6h","short":"30m","burnRate":6,"severity":"page"},{"long":"30m","short":"5m","burnRate":20,"severity":"page"}]`,
		"--set-json", "prometheusRule.slo.objectiveSeconds=0.25", "--set-json", "replicaCount=3", "--set-json", "prometheusRule.vantagePoints.required=3",
		"--set", "prometheusRule.severities.page=P1")
	if err != nil {
		t.Fatal(err)
	}
	if dashboardOf(out) != generated("-cluster-label", "region", "-burn-windows", "6h:6,30m:20", "-objective", "0.25", "-replicas", "3", "-vantage-points", "3", "-page-severity", "P1") {
		t.Error("the dashboard with grafanaDashboard.clusterLabel=region and other SLO values differs from the generator's for them")
	}

	// Without a burn-rate window the dashboard has no burn lines to draw:
	// the render is refused, naming the values.
	_, err = helm(t, "template", "wp", chartDir, "--set", "grafanaDashboard.enabled=true", "--set-json", "prometheusRule.alerts.eventLatencyBudgetBurn.windows=[]")
	if err == nil || !strings.Contains(err.Error(), "prometheusRule.alerts.eventLatencyBudgetBurn.windows: give at least one window") {
		t.Errorf("no burn-rate window: %v, want the render refused naming the windows", err)
	}

	// The panels' runbook links follow the rules' runbookUrlBase.
	out, err = helm(t, "template", "wp", chartDir, "--set", "grafanaDashboard.enabled=true", "--set", "prometheusRule.runbookUrlBase=https://runbooks.example.org/wp")
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range find(decodeObjects(t, out), "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			d := field(t, cm, "data", "watchprobe.json").(string)
			if strings.Contains(d, "github.com/watchprobe/watchprobe/blob/") || !strings.Contains(d, `"https://runbooks.example.org/wp#watchprobewatchstalled"`) {
				t.Error("the dashboard's runbook links do not follow prometheusRule.runbookUrlBase")
			}
		}
	}
}

// charts/watchprobe/README.md is what helm-docs makes of values.yaml and
// README.md.gotmpl, with the flags of `make chart-readme`.
func TestChartREADMEIsCurrent(t *testing.T) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(localcluster.ToolForTest(t, "helm-docs"), "--chart-search-root", chartDir, "--sort-values-order", "file", "--dry-run")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm-docs: %v\n%s", err, stderr.String())
	}
	committed, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, stdout.Bytes()) {
		t.Error("charts/watchprobe/README.md is stale: run `make chart-readme`")
	}
	// Every value has a description.
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, "| ") && strings.HasSuffix(line, "|  |") {
			t.Errorf("a value without a `# --` description: %s", line)
		}
	}
}

// The schema rejects misspelled and mistyped values with a message that
// names them.
func TestSchemaRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"serviceMonitr.enabled=true"}, "additional properties 'serviceMonitr' not allowed"},
		{[]string{"service.port=http"}, "at '/service/port': got string, want integer"},
		{[]string{"probes[0].kind=Secret", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/kind': value must be one of 'ConfigMap', 'Lease'"},
		{[]string{"probes[0].interval=10", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/interval'"},
		{[]string{"probes[0].intervall=10s", "probes[0].name=x", "probes[0].namespace=y"}, "additional properties 'intervall' not allowed"},
		{[]string{"probes[0].paths={informer,reflector}", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/paths/1': value must be one of 'informer', 'watch', 'etcd'"},
		// The exporter's own rules about the etcd path, refused at install
		// rather than by a crash-looping pod.
		{[]string{"probes[0].paths={informer,watch,etcd}", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0': missing property 'etcd'"},
		{[]string{"probes[0].paths={etcd}", "probes[0].etcd.prefix=/registry", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/etcd': missing property 'endpoints'"},
		{[]string{"probes[0].etcd.endpoints={https://10.0.0.1:2379}", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/etcd/endpoints': maxItems: got 1, want 0"},
		{[]string{"probes[0].paths={etcd}", "probes[0].etcd.endpoints={https://10.0.0.1:2379}", "probes[0].etcd.cert_file=/c", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/etcd': properties 'key_file' required, if 'cert_file' exists"},
		{[]string{"probes[0].paths={etcd}", "probes[0].etcd.endpoints={https://10.0.0.1:2379}", "probes[0].etcd.certfile=/c", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/etcd': additional properties 'certfile' not allowed"},
		{[]string{"probes[0].paths={etcd}", "probes[0].etcd.endpoints={https://10.0.0.1:2379}", "probes[0].etcd.dial_timeout=5", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/etcd/dial_timeout'"},
		{[]string{"etcd.clientCertSecret=x"}, "at '/etcd': additional properties 'clientCertSecret' not allowed"},
		{[]string{"prometheusRule.slo.objectiveSeconds=0.3"}, "at '/prometheusRule/slo/objectiveSeconds': value must be one of"},
		{[]string{"prometheusRule.slo.target=99"}, "at '/prometheusRule/slo/target'"},
		{[]string{"prometheusRule.alerts.writeErrors.treshold=0.1"}, "at '/prometheusRule/alerts/writeErrors': additional properties 'treshold' not allowed"},
		{[]string{"prometheusRule.alerts.relistStorm.for=5"}, "at '/prometheusRule/alerts/relistStorm/for'"},
		{[]string{"prometheusRule.clusterLabels={cluster-name}"}, "at '/prometheusRule/clusterLabels/0'"},
		// Severities are roles whose label values the inhibit rules know:
		// a label value in an alert's severity is refused, and so are
		// equal values for both roles.
		{[]string{"prometheusRule.alerts.watchStalled.severity=critical"}, "at '/prometheusRule/alerts/watchStalled/severity': value must be one of 'page', 'ticket'"},
		{[]string{"prometheusRule.alerts.eventLatencyBudgetBurn.windows[0].severity=P1", "prometheusRule.alerts.eventLatencyBudgetBurn.windows[0].long=1h", "prometheusRule.alerts.eventLatencyBudgetBurn.windows[0].short=5m", "prometheusRule.alerts.eventLatencyBudgetBurn.windows[0].burnRate=14.4"}, "at '/prometheusRule/alerts/eventLatencyBudgetBurn/windows/0/severity': value must be one of 'page', 'ticket'"},
		// Labels the chart sets on alerts itself: a second severity key
		// makes Prometheus refuse the whole rule file.
		{[]string{"prometheusRule.alertLabels.severity=critical"}, "at '/prometheusRule/alertLabels/severity': false schema"},
		{[]string{"prometheusRule.alerts.watchStalled.labels.vantage_points=x"}, "at '/prometheusRule/alerts/watchStalled/labels/vantage_points': false schema"},
		{[]string{"prometheusRule.alerts.eventLatencyBudgetBurn.labels.long=x"}, "at '/prometheusRule/alerts/eventLatencyBudgetBurn/labels/long': false schema"},
		{[]string{"prometheusRule.alertLabels.short=x"}, "at '/prometheusRule/alertLabels/short': false schema"},
		{[]string{"prometheusRule.vantagePoints.oneSeverity=warning"}, "at '/prometheusRule/vantagePoints/oneSeverity': value must be one of 'page', 'ticket'"},
		{[]string{"prometheusRule.severities.pager=P1"}, "at '/prometheusRule/severities': additional properties 'pager' not allowed"},
		{[]string{"prometheusRule.severities.page="}, "at '/prometheusRule/severities/page'"},
		{[]string{"prometheusRule.enabled=true", "prometheusRule.severities.page=P1", "prometheusRule.severities.ticket=P1"}, `prometheusRule.severities: page and ticket are both "P1"`},
		{[]string{"alertmanagerConfig.enabled=true", "prometheusRule.severities.ticket=critical"}, `prometheusRule.severities: page and ticket are both "critical"`},
		{[]string{"probes[0].apiservers=discovery", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/apiservers': 'oneOf' failed"},
		{[]string{"probes[0].apiservers={10.0.0.1}", "probes[0].name=x", "probes[0].namespace=y"}, "'10.0.0.1' does not match pattern"},
		{[]string{"probes[0].apiservers.discover=true", "probes[0].apiservers.endpoints={10.0.0.1:6443}", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/apiservers/endpoints': maxItems: got 1, want 0"},
		{[]string{"probes[0].controllers={job}", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/controllers/0': value must be one of 'deployment', 'replicaset'"},
		{[]string{"probes[0].resume.age={10s}", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/resume': additional properties 'age' not allowed"},
		{[]string{"probes[0].resume.ages={10}", "probes[0].name=x", "probes[0].namespace=y"}, "at '/probes/0/resume/ages/0'"},
		{[]string{"prometheusRule.alerts.resumeWindowShort.threshold=60"}, "at '/prometheusRule/alerts/resumeWindowShort': additional properties 'threshold' not allowed"},
		{[]string{"podDisruptionBudget.enabled=true", "podDisruptionBudget.minAvailable=1", "podDisruptionBudget.maxUnavailable=1"}, "podDisruptionBudget: set minAvailable or maxUnavailable, not both"},
		{[]string{"podDisruptionBudget.minAvailable=half"}, "at '/podDisruptionBudget/minAvailable'"},
		{[]string{"configReloader.image.tagg=v1"}, "at '/configReloader/image': additional properties 'tagg' not allowed"},
		{[]string{"serviceMonitor.basicAuth.username.name=s", "serviceMonitor.basicAuth.username.key=u"}, "at '/serviceMonitor/basicAuth': properties 'password' required, if 'username' exists"},
		{[]string{"serviceMonitor.sampleLimit=-1"}, "at '/serviceMonitor/sampleLimit'"},
		{[]string{"podMonitor.jobLable=x"}, "at '/podMonitor': additional properties 'jobLable' not allowed"},
		{[]string{"strategy.type=Rolling"}, "at '/strategy/type'"},
		{[]string{"prometheusRule.extraRules[0].expr=up"}, "at '/prometheusRule/extraRules/0'"},
		{[]string{"markerNamespaces.existing={Bad_NS}"}, "at '/markerNamespaces/existing/0'"},
		{[]string{"flowControl.enabeld=true"}, "at '/flowControl': additional properties 'enabeld' not allowed"},
		{[]string{"flowControl.nominalConcurrencyShares=0"}, "at '/flowControl/nominalConcurrencyShares'"},
		{[]string{"agent.alerts.manyFraction=30"}, "at '/agent/alerts/manyFraction'"},
		{[]string{"agent.alerts.nodesWatchDegraded.severity=critical"}, "at '/agent/alerts/nodesWatchDegraded/severity': value must be one of 'page', 'ticket'"},
		{[]string{"agent.alerts.nodeWatchDegraded.labels.severity=x"}, "at '/agent/alerts/nodeWatchDegraded/labels/severity': false schema"},
		// Certificates expected in the chart's mount with no Secret mounted.
		{[]string{"probes[0].paths={etcd}", "probes[0].etcd.endpoints={https://10.0.0.1:2379}", "probes[0].etcd.ca_file=/etc/watchprobe/etcd/ca.crt", "probes[0].name=x", "probes[0].namespace=y"}, `probe "x" reads etcd.ca_file from /etc/watchprobe/etcd/ca.crt, but etcd.clientCertsSecret is empty, so nothing is mounted there`},
	} {
		wantRenderError(t, tc.set, tc.want)
	}
}

// Without the schema (--skip-schema-validation), the rules' template
// refuses the labels it sets itself, naming the field.
func TestRenderRefusesOwnAlertLabels(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"prometheusRule.alertLabels.severity=critical", `prometheusRule.alertLabels: remove the label "severity"`},
		{"prometheusRule.alerts.eventLatencyBudgetBurn.labels.short=x", `prometheusRule.alerts.eventLatencyBudgetBurn.labels: remove the label "short"`},
		{"prometheusRule.alerts.pathDown.labels.vantage_points=x", `prometheusRule.alerts.pathDown.labels: remove the label "vantage_points"`},
		{"agent.alerts.nodeWatchDegraded.labels.severity=x", `agent.alerts.nodeWatchDegraded.labels: remove the label "severity"`},
	} {
		_, err := helm(t, "template", "wp", chartDir, "--skip-schema-validation", "--set", "prometheusRule.enabled=true", "--set", "agent.alerts.withoutAgents=true", "--set", tc.set)
		if err == nil {
			t.Errorf("--set %s: rendered without error", tc.set)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %s: error lacks %q:\n%v", tc.set, tc.want, err)
		}
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	return chart.AppVersion
}

// wantRenderError renders the chart with set (--set each) after the
// arguments of extra and wants an error containing want.
func wantRenderError(t *testing.T, set []string, want string, extra ...string) {
	t.Helper()
	args := append([]string{"template", "wp", chartDir}, extra...)
	for _, s := range set {
		args = append(args, "--set", s)
	}
	_, err := helm(t, args...)
	if err == nil {
		t.Errorf("--set %v: rendered without error", set)
		return
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("--set %v: error lacks %q:\n%v", set, want, err)
	}
}
