// Package charts tests the Helm chart: lint, rendering, the values schema,
// and an install into the real local apiserver whose ServiceAccount then
// runs the real exporter.
package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

const (
	chartDir    = "watchprobe"
	kubeVersion = "1.37.2"
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

// render runs helm template with the values files and returns the objects.
func render(t *testing.T, namespace string, valuesFiles ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "wp", chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
	for _, f := range valuesFiles {
		args = append(args, "-f", f)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

func decodeObjects(t *testing.T, manifests string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func one(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	found := find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	return found[0]
}

func field(t *testing.T, obj *unstructured.Unstructured, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(obj.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s %s: no field %s (%v)", obj.GetKind(), obj.GetName(), strings.Join(path, "."), err)
	}
	return v
}

func TestLint(t *testing.T) {
	for _, values := range []string{"", "watchprobe/ci/all-enabled-values.yaml", "watchprobe/ci/two-namespaces-values.yaml"} {
		args := []string{"lint", "--strict", chartDir, "--kube-version", kubeVersion}
		if values != "" {
			args = append(args, "-f", values)
		}
		if _, err := helm(t, args...); err != nil {
			t.Error(err)
		}
	}
}

// The defaults run one hardened exporter that may touch ConfigMaps in its
// one marker namespace and nothing else.
func TestRenderDefaults(t *testing.T) {
	objs := render(t, "monitoring")
	for _, o := range objs {
		if o.GetLabels()["app.kubernetes.io/name"] != "watchprobe" || o.GetLabels()["app.kubernetes.io/instance"] != "wp" {
			t.Errorf("%s %s lacks the app.kubernetes.io labels", o.GetKind(), o.GetName())
		}
	}
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "ServiceMonitor", "NetworkPolicy", "PodSecurityPolicy"} {
		if n := len(find(objs, kind)); n != 0 {
			t.Errorf("%d %s objects by default", n, kind)
		}
	}
	ns := one(t, objs, "Namespace")
	if ns.GetName() != "watchprobe" {
		t.Errorf("marker namespace %q, want watchprobe", ns.GetName())
	}

	dep := one(t, objs, "Deployment")
	selector := field(t, dep, "spec", "selector", "matchLabels").(map[string]any)
	if _, ok := selector["helm.sh/chart"]; ok || len(selector) != 2 {
		t.Errorf("selector %v: want only name and instance, never the chart version", selector)
	}
	pod := field(t, dep, "spec", "template", "spec").(map[string]any)
	psc := pod["securityContext"].(map[string]any)
	if psc["runAsNonRoot"] != true || psc["seccompProfile"].(map[string]any)["type"] != "RuntimeDefault" {
		t.Errorf("pod security context %v", psc)
	}
	c := pod["containers"].([]any)[0].(map[string]any)
	sc := c["securityContext"].(map[string]any)
	if sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true || sc["runAsNonRoot"] != true {
		t.Errorf("container security context %v", sc)
	}
	if drop := sc["capabilities"].(map[string]any)["drop"].([]any); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("capabilities drop %v, want [ALL]", drop)
	}
	if _, set := c["resources"]; set {
		t.Errorf("resources set by default: %v", c["resources"])
	}
	// The etcd path is off by default, and so is access to etcd's certificates.
	if mounts := fmt.Sprint(c["volumeMounts"]); strings.Contains(mounts, "etcd") {
		t.Errorf("etcd certificates mounted by default: %s", mounts)
	}
	for probe, path := range map[string]string{"livenessProbe": "/-/healthy", "readinessProbe": "/-/ready"} {
		if got := c[probe].(map[string]any)["httpGet"].(map[string]any)["path"]; got != path {
			t.Errorf("%s path %v, want %s", probe, got, path)
		}
	}
	var env []string
	for _, e := range c["env"].([]any) {
		env = append(env, e.(map[string]any)["name"].(string))
	}
	// No OTLP endpoint by default: tracing stays off (auto mode).
	if !slices.Equal(env, []string{"POD_NAME", "POD_NAMESPACE", "NODE_NAME", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"}) {
		t.Errorf("env %v", env)
	}

	role := one(t, objs, "Role")
	if role.GetNamespace() != "watchprobe" {
		t.Errorf("Role in %q, want the marker namespace", role.GetNamespace())
	}
	wantRules := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"list", "watch", "create", "update", "delete"}}}
	if got := field(t, role, "rules"); !equalJSON(got, wantRules) {
		t.Errorf("rules %v, want %v", got, wantRules)
	}
	rb := one(t, objs, "RoleBinding")
	subject := field(t, rb, "subjects").([]any)[0].(map[string]any)
	if subject["name"] != "wp-watchprobe" || subject["namespace"] != "monitoring" {
		t.Errorf("RoleBinding subject %v", subject)
	}

	cm := one(t, objs, "ConfigMap")
	if !strings.Contains(field(t, cm, "data", "config.yml").(string), "name: default") {
		t.Errorf("config.yml lacks the default probe: %v", field(t, cm, "data", "config.yml"))
	}
}

// Every optional object renders as configured.
func TestRenderAllEnabled(t *testing.T) {
	objs := render(t, "monitoring", "watchprobe/ci/all-enabled-values.yaml")
	sm := one(t, objs, "ServiceMonitor")
	if sm.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v lack the additional release label", sm.GetLabels())
	}
	ep := field(t, sm, "spec", "endpoints").([]any)[0].(map[string]any)
	if ep["port"] != "http-metrics" || ep["interval"] != "15s" || ep["scrapeTimeout"] != "10s" {
		t.Errorf("ServiceMonitor endpoint %v", ep)
	}
	np := one(t, objs, "NetworkPolicy")
	if from := field(t, np, "spec", "ingress").([]any)[0].(map[string]any)["from"]; from == nil {
		t.Error("NetworkPolicy admits any peer despite networkPolicy.from")
	}
	if one(t, objs, "Namespace").GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Error("markerNamespaces.keep did not annotate the namespace")
	}
	c := field(t, one(t, objs, "Deployment"), "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	args := fmt.Sprint(c["args"])
	for _, want := range []string{"--web.config.file=/etc/watchprobe-web/web-config.yml", "--web.disable-exporter-metrics"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %s lack %s", args, want)
		}
	}
	if c["resources"] == nil {
		t.Error("resources not set")
	}
	env := map[string]any{}
	for _, e := range c["env"].([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			env[m["name"].(string)] = v
		} else {
			env[m["name"].(string)] = m["valueFrom"]
		}
	}
	for name, want := range map[string]any{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317",
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.5",
	} {
		if env[name] != want {
			t.Errorf("env %s = %v, want %v", name, env[name], want)
		}
	}
	if ref := fmt.Sprint(env["OTEL_EXPORTER_OTLP_HEADERS"]); !strings.Contains(ref, "otlp-headers") {
		t.Errorf("OTLP headers not taken from the Secret: %s", ref)
	}
}

// A probe with the etcd path gets its client certificate from the Secret,
// mounted read-only where the probe's etcd files point, one file per key of
// a kubernetes.io/tls Secret; and the exporter accepts the config.yml the
// chart renders, etcd block included.
func TestRenderEtcdPath(t *testing.T) {
	objs := render(t, "monitoring", "watchprobe/ci/all-enabled-values.yaml")
	pod := field(t, one(t, objs, "Deployment"), "spec", "template", "spec").(map[string]any)
	var volume string
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if secret, ok := v["secret"].(map[string]any); ok && secret["secretName"] == "watchprobe-etcd-client" {
			volume = v["name"].(string)
		}
	}
	if volume == "" {
		t.Fatalf("no volume of Secret watchprobe-etcd-client in %v", pod["volumes"])
	}
	const dir = "/etc/watchprobe/etcd"
	var mount map[string]any
	for _, m := range pod["containers"].([]any)[0].(map[string]any)["volumeMounts"].([]any) {
		if m := m.(map[string]any); m["name"] == volume {
			mount = m
		}
	}
	if mount == nil || mount["mountPath"] != dir || mount["readOnly"] != true || mount["subPath"] != nil {
		t.Errorf("the Secret's volume is mounted as %v, want the whole volume read-only at %s", mount, dir)
	}

	var configMap *unstructured.Unstructured
	for _, cm := range find(objs, "ConfigMap") {
		if cm.GetName() == "wp-watchprobe" {
			configMap = cm
		}
	}
	if configMap == nil {
		t.Fatal("no ConfigMap wp-watchprobe")
	}
	config := field(t, configMap, "data", "config.yml").(string)
	var parsed struct {
		Probes []struct {
			Paths []string
			Etcd  map[string]any
		}
	}
	if err := yaml.Unmarshal([]byte(config), &parsed); err != nil || len(parsed.Probes) != 1 {
		t.Fatalf("config.yml (%v):\n%s", err, config)
	}
	p := parsed.Probes[0]
	if !slices.Contains(p.Paths, "etcd") {
		t.Errorf("paths %v lack etcd", p.Paths)
	}
	if got := fmt.Sprint(p.Etcd["endpoints"]); got != "[https://10.0.0.1:2379 https://10.0.0.2:2379]" {
		t.Errorf("etcd.endpoints %s", got)
	}
	for key, file := range map[string]string{"cert_file": "tls.crt", "key_file": "tls.key", "ca_file": "ca.crt"} {
		if got := p.Etcd[key]; got != dir+"/"+file {
			t.Errorf("etcd.%s = %v, want %s/%s, the Secret's key in the mount", key, got, dir, file)
		}
	}

	file := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(buildExporter(t), "--config.check", "--config.file", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration is valid: 1 probe(s)") {
		t.Errorf("the exporter refused the rendered config.yml (%v):\n%s\n%s", err, out, config)
	}
}

// The chart ships the repository's rules and dashboard unchanged: its
// files/ copies are the sources (`make dashboards` refreshes them), and the
// PrometheusRule and dashboard ConfigMap carry exactly those.
func TestRulesAndDashboardShipped(t *testing.T) {
	for copy, source := range map[string]string{
		"watchprobe/files/watchprobe.rules.yml": "../rules/watchprobe.rules.yml",
		"watchprobe/files/watchprobe.json":      "../dashboards/watchprobe.json",
	} {
		a, errA := os.ReadFile(copy)
		b, errB := os.ReadFile(source)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: run `make dashboards`", copy, source)
		}
	}
	objs := render(t, "monitoring", "watchprobe/ci/all-enabled-values.yaml")
	rule := one(t, objs, "PrometheusRule")
	if rule.GetLabels()["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels %v lack the release label", rule.GetLabels())
	}
	var source struct{ Groups []any }
	data, _ := os.ReadFile("../rules/watchprobe.rules.yml")
	rf := decodeObjects(t, string(data))
	source.Groups = rf[0].Object["groups"].([]any)
	if got := field(t, rule, "spec", "groups"); !equalJSON(got, source.Groups) {
		t.Error("the PrometheusRule's groups differ from rules/watchprobe.rules.yml")
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
	want, _ := os.ReadFile("../dashboards/watchprobe.json")
	if got := field(t, dash, "data", "watchprobe.json").(string); got != strings.TrimRight(string(want), "\n") {
		t.Error("the dashboard ConfigMap does not hold dashboards/watchprobe.json")
	}
	if dash.GetAnnotations()["grafana_folder"] != "Kubernetes" {
		t.Errorf("dashboard annotations %v", dash.GetAnnotations())
	}
}

// RBAC follows the probes: one Role per marker namespace, with exactly the
// kinds written there.
func TestRenderTwoNamespaces(t *testing.T) {
	objs := render(t, "monitoring", "watchprobe/ci/two-namespaces-values.yaml")
	rules := map[string][]string{}
	for _, r := range find(objs, "Role") {
		for _, rule := range field(t, r, "rules").([]any) {
			for _, res := range rule.(map[string]any)["resources"].([]any) {
				rules[r.GetNamespace()] = append(rules[r.GetNamespace()], res.(string))
			}
		}
	}
	want := map[string][]string{"probes-a": {"configmaps"}, "probes-b": {"configmaps", "leases"}}
	if !equalJSON(rules, want) {
		t.Errorf("resources by namespace %v, want %v", rules, want)
	}
	if n := len(find(objs, "RoleBinding")); n != 2 {
		t.Errorf("%d RoleBindings, want 2", n)
	}
	var nss []string
	for _, ns := range find(objs, "Namespace") {
		nss = append(nss, ns.GetName())
	}
	if slices.Sort(nss); !slices.Equal(nss, []string{"probes-a", "probes-b"}) {
		t.Errorf("namespaces %v", nss)
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
		// Certificates expected in the chart's mount with no Secret mounted.
		{[]string{"probes[0].paths={etcd}", "probes[0].etcd.endpoints={https://10.0.0.1:2379}", "probes[0].etcd.ca_file=/etc/watchprobe/etcd/ca.crt", "probes[0].name=x", "probes[0].namespace=y"}, `probe "x" reads etcd.ca_file from /etc/watchprobe/etcd/ca.crt, but etcd.clientCertsSecret is empty, so nothing is mounted there`},
	} {
		args := []string{"template", "wp", chartDir, "--kube-version", kubeVersion}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		_, err := helm(t, args...)
		if err == nil {
			t.Errorf("--set %v: rendered without error", tc.set)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--set %v: error lacks %q:\n%v", tc.set, tc.want, err)
		}
	}
}

// The rendered chart is accepted by the real apiserver (server-side apply,
// with the prometheus-operator CRDs installed), and the exporter, running
// with a token of the chart's ServiceAccount, probes successfully in every
// marker namespace while being refused everything else.
func TestInstallIntoRealAPIServer(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := c.AdminConfig()
	applyCRDs(t, ctx, admin)

	const release = "monitoring"
	objs := render(t, release, "watchprobe/ci/all-enabled-values.yaml", "watchprobe/ci/two-namespaces-values.yaml")
	// As `helm install --namespace monitoring --create-namespace` would.
	releaseNS := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": release}}}
	apply(t, ctx, admin, append([]*unstructured.Unstructured{releaseNS}, objs...))

	saCfg, err := c.ServiceAccountConfig(ctx, release, "wp-watchprobe")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := localcluster.WriteKubeconfig(saCfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yml")
	var configMap *unstructured.Unstructured
	for _, cm := range find(objs, "ConfigMap") {
		if cm.GetName() == "wp-watchprobe" {
			configMap = cm
		}
	}
	if configMap == nil {
		t.Fatal("no ConfigMap wp-watchprobe")
	}
	if err := os.WriteFile(config, []byte(field(t, configMap, "data", "config.yml").(string)), 0o600); err != nil {
		t.Fatal(err)
	}

	url := runExporter(t, "--kubeconfig", kubeconfig, "--config.file", config, "--probe.replica", "chart-test")
	probes := []string{"cm-a", "lease-b", "cm-b"}
	var body string
	deadline := time.Now().Add(90 * time.Second)
	for {
		body = scrape(url)
		ok := true
		for _, p := range probes {
			ok = ok && strings.Contains(body, fmt.Sprintf("watchprobe_probe_success{probe=%q} 1", p))
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probes did not all succeed with the chart's ServiceAccount:\n%s", grep(body, "watchprobe_probe_success", "watchprobe_write_errors_total"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, line := range strings.Split(grep(body, "watchprobe_write_errors_total{"), "\n") {
		if line != "" && !strings.HasSuffix(line, " 0") {
			t.Errorf("write errors with the chart's RBAC: %s", line)
		}
	}

	sa := kubernetes.NewForConfigOrDie(saCfg)
	for _, ns := range []string{"default", "kube-system", release} {
		if _, err := sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing ConfigMaps in %s: %v, want Forbidden", ns, err)
		}
		if _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("listing Secrets in %s: %v, want Forbidden", ns, err)
		}
	}
	if _, err := sa.CoreV1().Secrets("probes-a").Get(ctx, "anything", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("reading a Secret in a marker namespace: %v, want Forbidden", err)
	}
	if _, err := sa.CoordinationV1().Leases("probes-a").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Leases where no probe writes them: %v, want Forbidden", err)
	}
}

// applyCRDs installs the ServiceMonitor and PrometheusRule CRDs from the
// pinned prometheus-operator module.
func applyCRDs(t *testing.T, ctx context.Context, cfg *rest.Config) {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", operatorModule).Output()
	if err != nil {
		t.Fatalf("downloading %s: %v", operatorModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	var crds []*unstructured.Unstructured
	for _, name := range []string{"servicemonitors", "prometheusrules"} {
		data, err := os.ReadFile(filepath.Join(mod.Dir, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+name+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crds = append(crds, decodeObjects(t, string(data))...)
	}
	apply(t, ctx, cfg, crds)
	dyn := dynamic.NewForConfigOrDie(cfg)
	for _, crd := range crds {
		deadline := time.Now().Add(30 * time.Second)
		for !established(ctx, dyn, crd.GetName()) {
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established", crd.GetName())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func established(ctx context.Context, dyn dynamic.Interface, name string) bool {
	obj, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// apply server-side applies objs in order, namespaces first, so the real API
// validates every field.
func apply(t *testing.T, ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cfg)
	ordered := slices.Clone(objs)
	slices.SortStableFunc(ordered, func(a, b *unstructured.Unstructured) int {
		rank := func(o *unstructured.Unstructured) int {
			if o.GetKind() == "Namespace" {
				return 0
			}
			return 1
		}
		return rank(a) - rank(b)
	})
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))
	for _, o := range ordered {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				t.Fatalf("%s: %v", gvk, err)
			}
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := o.GetNamespace(); ns != "" {
			r = dyn.Resource(m.Resource).Namespace(ns)
		}
		if _, err := r.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "watchprobe-chart-test", Force: true}); err != nil {
			t.Fatalf("applying %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

// buildExporter builds the exporter from the working tree and returns its path.
func buildExporter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "watchprobe")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/exporter").CombinedOutput(); err != nil {
		t.Fatalf("building the exporter: %v\n%s", err, out)
	}
	return bin
}

// runExporter builds and starts the exporter and returns its base URL.
func runExporter(t *testing.T, args ...string) string {
	t.Helper()
	bin := buildExporter(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var log bytes.Buffer
	cmd := exec.Command(bin, append([]string{"--web.listen-address", addr}, args...)...)
	cmd.Stderr = &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("exporter log:\n%s", log.String())
		}
	})
	return "http://" + addr
}

func scrape(url string) string {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grep(body string, prefixes ...string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}
