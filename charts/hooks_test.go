package charts

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// renderValues renders the chart with values (YAML) over the defaults.
func renderValues(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return render(t, "monitoring", f)
}

// The hooks kube-prometheus-stack users reach for, as kube-state-metrics'
// and blackbox-exporter's charts have them: each, set, lands where
// prometheus-operator reads it (TestRenderGolden shows each renders
// nothing unset).
const serviceMonitorHooks = `
serviceMonitor:
  enabled: true
  namespace: prometheus
  jobLabel: app.kubernetes.io/name
  targetLabels: [team]
  sampleLimit: 5000
  honorLabels: true
  proxyUrl: http://proxy.example:3128
  basicAuth:
    username: {name: scrape-auth, key: username}
    password: {name: scrape-auth, key: password}
service:
  labels: {team: platform}
`

func TestRenderServiceMonitorHooks(t *testing.T) {
	objs := renderValues(t, serviceMonitorHooks)
	sm := one(t, objs, "ServiceMonitor")
	if sm.GetNamespace() != "prometheus" {
		t.Errorf("ServiceMonitor in %q, want serviceMonitor.namespace", sm.GetNamespace())
	}
	if got := field(t, sm, "spec", "namespaceSelector", "matchNames"); !equalJSON(got, []any{"monitoring"}) {
		t.Errorf("namespaceSelector %v: the Service stays in the release's namespace", got)
	}
	for path, want := range map[string]any{
		"spec.jobLabel":                       "app.kubernetes.io/name",
		"spec.targetLabels":                   []any{"team"},
		"spec.sampleLimit":                    5000,
		"spec.endpoints.0.honorLabels":        true,
		"spec.endpoints.0.proxyUrl":           "http://proxy.example:3128",
		"spec.endpoints.0.basicAuth.username": map[string]any{"name": "scrape-auth", "key": "username"},
		"spec.endpoints.0.basicAuth.password": map[string]any{"name": "scrape-auth", "key": "password"},
	} {
		if got := at(t, sm, path); !equalJSON(got, want) {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	// With jobLabel the job comes from the Service's label: the chart's
	// last relabeling, which would overwrite it, is gone.
	for _, r := range at(t, sm, "spec.endpoints.0.relabelings").([]any) {
		if r.(map[string]any)["targetLabel"] == "job" {
			t.Errorf("relabeling %v overwrites the job that jobLabel sets", r)
		}
	}
	svc := one(t, objs, "Service")
	if svc.GetLabels()["team"] != "platform" || svc.GetLabels()["app.kubernetes.io/name"] != "watchprobe" {
		t.Errorf("Service labels %v, want service.labels beside the chart's", svc.GetLabels())
	}

	auth := one(t, renderValues(t, "serviceMonitor: {enabled: true, authorization: {type: Bearer, credentials: {name: rbac-proxy, key: token}}}"), "ServiceMonitor")
	if got := at(t, auth, "spec.endpoints.0.authorization"); !equalJSON(got, map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "rbac-proxy", "key": "token"}}) {
		t.Errorf("authorization %v", got)
	}
}

const podMonitorHooks = `
podMonitor:
  enabled: true
  namespace: prometheus
  additionalLabels: {release: kps}
  targetLabels: [team]
  interval: 15s
  sampleLimit: 2000
  metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: go_.*}]
podLabels: {team: platform}
`

// A PodMonitor scrapes the same port with the same relabelings (node, and
// the job last), without the Service; with the ServiceMonitor too, the
// render fails rather than scrape every replica twice.
func TestRenderPodMonitor(t *testing.T) {
	objs := renderValues(t, podMonitorHooks)
	if n := len(find(objs, "ServiceMonitor")); n != 0 {
		t.Errorf("%d ServiceMonitors beside the PodMonitor", n)
	}
	pm := one(t, objs, "PodMonitor")
	if pm.GetNamespace() != "prometheus" || pm.GetLabels()["release"] != "kps" {
		t.Errorf("PodMonitor %s/%s labels %v", pm.GetNamespace(), pm.GetName(), pm.GetLabels())
	}
	for path, want := range map[string]any{
		"spec.podTargetLabels":                         []any{"team"},
		"spec.sampleLimit":                             2000,
		"spec.selector.matchLabels":                    map[string]any{"app.kubernetes.io/name": "watchprobe", "app.kubernetes.io/instance": "wp"},
		"spec.namespaceSelector.matchNames":            []any{"monitoring"},
		"spec.podMetricsEndpoints.0.port":              "http-metrics",
		"spec.podMetricsEndpoints.0.path":              "/metrics",
		"spec.podMetricsEndpoints.0.interval":          "15s",
		"spec.podMetricsEndpoints.0.relabelings":       []any{map[string]any{"action": "replace", "sourceLabels": []any{"__meta_kubernetes_pod_node_name"}, "targetLabel": "node"}, map[string]any{"action": "replace", "targetLabel": "job", "replacement": "watchprobe"}},
		"spec.podMetricsEndpoints.0.metricRelabelings": []any{map[string]any{"action": "drop", "sourceLabels": []any{"__name__"}, "regex": "go_.*"}},
	} {
		if got := at(t, pm, path); !equalJSON(got, want) {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	_, err := helm(t, "template", "wp", chartDir, "--set", "podMonitor.enabled=true", "--set", "serviceMonitor.enabled=true")
	if err == nil || !strings.Contains(err.Error(), "serviceMonitor.enabled and podMonitor.enabled: choose one") {
		t.Errorf("both monitors: %v, want the render refused", err)
	}
}

// prometheusScrape annotates the Service for annotation-based discovery,
// with the port, path and scheme the exporter serves, beside the Service's
// own annotations.
func TestRenderPrometheusScrapeAnnotations(t *testing.T) {
	svc := one(t, renderValues(t, "prometheusScrape: true\nwebConfig: {scheme: HTTPS}\nservice: {port: 9000, annotations: {a: b}}"), "Service")
	want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9000", "prometheus.io/path": "/metrics", "prometheus.io/scheme": "https", "a": "b"}
	if !equalJSON(svc.GetAnnotations(), want) {
		t.Errorf("Service annotations %v, want %v", svc.GetAnnotations(), want)
	}
}

// The PrometheusRule in another namespace, with rules of the user's own in
// a group of their own, and labels on every one of the chart's alerts.
func TestRenderPrometheusRuleHooks(t *testing.T) {
	rule := one(t, renderValues(t, `
prometheusRule:
  enabled: true
  namespace: prometheus
  alertLabels: {team: platform}
  extraRules:
    - alert: WatchprobeCustom
      expr: watchprobe_probe_success == 0
      for: 1m
    - record: job:watchprobe_probe_success:min
      expr: min by (job) (watchprobe_probe_success)
`), "PrometheusRule")
	if rule.GetNamespace() != "prometheus" {
		t.Errorf("PrometheusRule in %q, want prometheusRule.namespace", rule.GetNamespace())
	}
	groups := field(t, rule, "spec", "groups").([]any)
	last := groups[len(groups)-1].(map[string]any)
	if last["name"] != "watchprobe.extra" || len(last["rules"].([]any)) != 2 ||
		last["rules"].([]any)[0].(map[string]any)["alert"] != "WatchprobeCustom" {
		t.Errorf("last group %v, want watchprobe.extra with the two extra rules", last)
	}
	alerts := 0
	for _, g := range groups[:len(groups)-1] {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			r := r.(map[string]any)
			if r["alert"] == nil {
				continue
			}
			alerts++
			if r["labels"].(map[string]any)["team"] != "platform" {
				t.Errorf("alert %s labels %v lack alertLabels", r["alert"], r["labels"])
			}
		}
	}
	if alerts == 0 {
		t.Error("no alerts rendered")
	}
}

const deploymentHooks = `
deploymentAnnotations: {reloader.stakater.com/auto: "true"}
strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}
terminationGracePeriodSeconds: 10
startupProbe: {httpGet: {path: /-/healthy, port: http-metrics}, failureThreshold: 30, periodSeconds: 1}
initContainers: [{name: wait, image: busybox, command: [sh, -c, "true"]}]
extraContainers: [{name: kube-rbac-proxy, image: quay.io/brancz/kube-rbac-proxy:v0.19.1, args: [--upstream=http://127.0.0.1:9917/]}]
`

func TestRenderDeploymentHooks(t *testing.T) {
	dep := one(t, renderValues(t, deploymentHooks), "Deployment")
	if dep.GetAnnotations()["reloader.stakater.com/auto"] != "true" {
		t.Errorf("Deployment annotations %v", dep.GetAnnotations())
	}
	for path, want := range map[string]any{
		"spec.strategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": 0, "maxUnavailable": 1}},
		"spec.template.spec.terminationGracePeriodSeconds": 10,
		// The web config's scheme is added, as to the other probes.
		"spec.template.spec.containers.0.startupProbe": map[string]any{"httpGet": map[string]any{"path": "/-/healthy", "port": "http-metrics", "scheme": "HTTP"}, "failureThreshold": 30, "periodSeconds": 1},
		"spec.template.spec.initContainers.0.name":     "wait",
		"spec.template.spec.containers.0.name":         "watchprobe",
		"spec.template.spec.containers.1.name":         "kube-rbac-proxy",
	} {
		if got := at(t, dep, path); !equalJSON(got, want) {
			t.Errorf("%s = %v, want %v", path, got, want)
		}
	}
	// 0 is a grace period too (kill at once), not "unset".
	zero := one(t, renderValues(t, "terminationGracePeriodSeconds: 0"), "Deployment")
	if got := at(t, zero, "spec.template.spec.terminationGracePeriodSeconds"); got != float64(0) && got != int64(0) {
		t.Errorf("terminationGracePeriodSeconds 0 rendered as %v", got)
	}
}

// The marker namespaces come from the values alone: no template calls
// lookup, so helm template and helm install agree (TestHelmInstallLeavesNamespaces
// compares them on a real apiserver); a namespace you own is left out; the
// chart's carry the annotations asked for, and keep=false drops Helm's.
func TestRenderMarkerNamespacesWithoutLookup(t *testing.T) {
	err := filepath.WalkDir(filepath.Join(chartDir, "templates"), func(f string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), "lookup ") {
			t.Errorf("%s calls lookup: helm template and GitOps tools would render it otherwise than helm install", f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := renderValues(t, `
probes:
  - {name: a, namespace: mine}
  - {name: b, namespace: charts}
  - {name: c, namespace: monitoring}
markerNamespaces:
  existing: [mine]
  keep: false
  annotations: {argocd.argoproj.io/sync-options: Delete=false}
`)
	ns := one(t, objs, "Namespace")
	if ns.GetName() != "charts" {
		t.Errorf("namespace %s rendered, want only charts (mine is yours, monitoring the release's)", ns.GetName())
	}
	if !equalJSON(ns.GetAnnotations(), map[string]string{"argocd.argoproj.io/sync-options": "Delete=false"}) {
		t.Errorf("namespace annotations %v, want Argo CD's alone with keep=false", ns.GetAnnotations())
	}
	var roles []string
	for _, r := range find(objs, "Role") {
		roles = append(roles, r.GetNamespace())
	}
	for _, want := range []string{"mine", "charts", "monitoring"} {
		if !strings.Contains(strings.Join(roles, " "), want) {
			t.Errorf("Roles in %v, want one in %s", roles, want)
		}
	}
	if n := len(find(renderValues(t, "markerNamespaces: {create: false}"), "Namespace")); n != 0 {
		t.Errorf("create=false rendered %d namespaces", n)
	}
}

// Every hook above, rendered, is what the real apiserver accepts: applied
// (dry run) with strict field validation against prometheus-operator's
// CRDs, so that a field the operator does not know is refused here rather
// than dropped silently in a user's cluster.
func TestHooksAcceptedByRealAPIServer(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	cfg := c.AdminConfig()
	applyCRDs(t, ctx, cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))
	for _, ns := range []string{"monitoring", "prometheus", "watchprobe"} {
		apply(t, ctx, cfg, []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}})
	}
	for _, values := range []string{serviceMonitorHooks, podMonitorHooks, deploymentHooks + "prometheusScrape: true\n",
		"prometheusRule: {enabled: true, namespace: prometheus, extraRules: [{alert: X, expr: vector(1)}]}"} {
		for _, o := range renderValues(t, values) {
			if o.GetKind() == "Namespace" {
				continue
			}
			gvk := o.GroupVersionKind()
			m := restMapping(t, mapper, gvk)
			data, err := json.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			_, err = dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
				FieldManager: "watchprobe-chart-test", Force: ptrTo(true), DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
			if err != nil {
				t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// at is the field at a dotted path, list elements by index.
func at(t *testing.T, obj *unstructured.Unstructured, path string) any {
	t.Helper()
	var cur any = obj.Object
	for _, p := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[p]
			if !ok {
				t.Fatalf("%s %s: no %s", obj.GetKind(), obj.GetName(), path)
			}
			cur = v
		case []any:
			i := 0
			for _, ch := range p {
				i = i*10 + int(ch-'0')
			}
			if i >= len(c) {
				t.Fatalf("%s %s: no %s", obj.GetKind(), obj.GetName(), path)
			}
			cur = c[i]
		default:
			t.Fatalf("%s %s: no %s", obj.GetKind(), obj.GetName(), path)
		}
	}
	return cur
}

// A jobLabel whose value is not scrapeJob would give the targets a job the
// rules do not select: WatchprobeAbsent would fire for good and hide an
// exporter that is really down. The chart refuses it, naming the fix.
func TestRenderRefusesAJobTheRulesDoNotSelect(t *testing.T) {
	for _, tc := range []struct{ kind, labels string }{
		{"serviceMonitor", "service.labels"},
		{"podMonitor", "podLabels"},
	} {
		_, err := helm(t, "template", "wp", chartDir, "--set", tc.kind+".enabled=true", "--set", tc.kind+".jobLabel=team")
		want := tc.kind + `.jobLabel: "team" must name a label whose value is scrapeJob ("watchprobe"), the job the rules select: set ` + tc.labels + `.team: watchprobe, or leave jobLabel empty`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s.jobLabel=team without the label: %v, want %q", tc.kind, err, want)
		}
		if _, err := helm(t, "template", "wp", chartDir, "--set", tc.kind+".enabled=true", "--set", tc.kind+".jobLabel=team", "--set", tc.labels+".team=watchprobe"); err != nil {
			t.Errorf("%s.jobLabel=team with %s.team=watchprobe: %v", tc.kind, tc.labels, err)
		}
	}
}
