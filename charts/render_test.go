package charts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/watchprobe/watchprobe/pkg/probe"
)

// render runs helm template with the values files and returns the objects.
func render(t *testing.T, namespace string, valuesFiles ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "wp", chartDir, "--namespace", namespace}
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

// `helm template charts/watchprobe`, no release name, no --kube-version:
// helm built as upstream builds it (the Makefile's ldflags) assumes the
// Kubernetes of its client-go, within the chart's kubeVersion.
func TestRenderWithoutFlags(t *testing.T) {
	out, err := helm(t, "template", chartDir)
	if err != nil {
		t.Fatalf("%v\n(a helm built without upstream's version ldflags assumes Kubernetes 1.20: `make bin/helm` rebuilds it)", err)
	}
	objs := decodeObjects(t, out)
	if one(t, objs, "Deployment").GetName() == "" {
		t.Error("Deployment without a name")
	}
}

// The chart's kubeVersion is a lower bound only: the oldest release `make
// compat` passes (hack/compat's range). A monitor must never hold back a
// cluster's upgrade, so a release newer than the tested range installs,
// and the exporter says "untested version" instead (pkg/probe/kube).
func TestKubeVersionIsALowerBoundOnly(t *testing.T) {
	for version, ok := range map[string]bool{"1.30.14": false, "1.31.0": true, "1.33.13": true, "1.37.2": true, "1.38.0": true, "1.45.1": true, "2.0.0": true} {
		_, err := helm(t, "template", "wp", chartDir, "--kube-version", version)
		if ok && err != nil {
			t.Errorf("Kubernetes %s: %v; only a release older than the tested range may be refused", version, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "kubeVersion")) {
			t.Errorf("Kubernetes %s, older than the tested range: %v, want the chart's kubeVersion to refuse it", version, err)
		}
	}
	// The version helm assumes without a cluster is helm's own build's.
	out, err := helm(t, "version", "--template", "{{ .Version }}")
	if err != nil || !strings.HasPrefix(out, "v3.22.") {
		t.Errorf("helm version %q (%v): not built with upstream's version ldflags", out, err)
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
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "ServiceMonitor", "NetworkPolicy", "PodSecurityPolicy", "PrometheusRule", "AlertmanagerConfig"} {
		if n := len(find(objs, kind)); n != 0 {
			t.Errorf("%d %s objects by default", n, kind)
		}
	}
	ns := one(t, objs, "Namespace")
	if ns.GetName() != "watchprobe" {
		t.Errorf("marker namespace %q, want watchprobe", ns.GetName())
	}
	// Kept by default: a namespace holds more than markers, and uninstalling
	// the chart must not delete what else is in it.
	if ns.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("marker namespace annotations %v: not kept on uninstall by default", ns.GetAnnotations())
	}
	// The label webhook configurations exclude by namespaceSelector.
	if ns.GetLabels()["watchprobe.io/markers"] != "true" {
		t.Errorf("marker namespace labels %v lack watchprobe.io/markers", ns.GetLabels())
	}

	dep := one(t, objs, "Deployment")
	selector := field(t, dep, "spec", "selector", "matchLabels").(map[string]any)
	if _, ok := selector["helm.sh/chart"]; ok || len(selector) != 2 {
		t.Errorf("selector %v: want only name and instance, never the chart version", selector)
	}
	// Two vantage points by default, on different nodes where there are
	// several, and a drain that takes one at a time.
	if got := field(t, dep, "spec", "replicas"); got != float64(2) {
		t.Errorf("replicas %v, want 2", got)
	}
	spread := field(t, dep, "spec", "template", "spec", "topologySpreadConstraints").([]any)
	wantSpread := map[string]any{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
		"nodeTaintsPolicy": "Honor", "labelSelector": map[string]any{"matchLabels": selector}}
	if len(spread) != 1 || !equalJSON(spread[0], wantSpread) {
		t.Errorf("topologySpreadConstraints %v, want %v", spread, wantSpread)
	}
	pdb := one(t, objs, "PodDisruptionBudget")
	if got := field(t, pdb, "spec", "maxUnavailable"); got != float64(1) || !equalJSON(field(t, pdb, "spec", "selector", "matchLabels"), selector) {
		t.Errorf("PodDisruptionBudget spec %v, want maxUnavailable 1 of the Deployment's pods", field(t, pdb, "spec"))
	}
	if got := field(t, dep, "spec", "revisionHistoryLimit"); got != float64(10) {
		t.Errorf("revisionHistoryLimit %v, want 10", got)
	}
	// Without the reloader, a changed config rolls the pods.
	if _, ok := field(t, dep, "spec", "template", "metadata", "annotations").(map[string]any)["checksum/config"]; !ok {
		t.Error("no checksum/config annotation: a changed probe list would not reach the pods")
	}
	pod := field(t, dep, "spec", "template", "spec").(map[string]any)
	if n := len(pod["containers"].([]any)); n != 1 {
		t.Errorf("%d containers, want the exporter alone", n)
	}
	if pod["automountServiceAccountToken"] != true {
		t.Errorf("automountServiceAccountToken %v: the exporter authenticates with the token", pod["automountServiceAccountToken"])
	}
	psc := pod["securityContext"].(map[string]any)
	if psc["runAsNonRoot"] != true || psc["seccompProfile"].(map[string]any)["type"] != "RuntimeDefault" {
		t.Errorf("pod security context %v", psc)
	}
	c := pod["containers"].([]any)[0].(map[string]any)
	if image := c["image"].(string); !strings.HasPrefix(image, "ghcr.io/watchprobe/watchprobe:") {
		t.Errorf("image %s, want ghcr.io/watchprobe/watchprobe:<appVersion>", image)
	}
	if args := fmt.Sprint(c["args"]); strings.Contains(args, "--web.enable-lifecycle") {
		t.Errorf("args %s: reloading over HTTP is on without the reloader", args)
	}
	sc := c["securityContext"].(map[string]any)
	if sc["allowPrivilegeEscalation"] != false || sc["readOnlyRootFilesystem"] != true || sc["runAsNonRoot"] != true {
		t.Errorf("container security context %v", sc)
	}
	if drop := sc["capabilities"].(map[string]any)["drop"].([]any); len(drop) != 1 || drop[0] != "ALL" {
		t.Errorf("capabilities drop %v, want [ALL]", drop)
	}
	// Requests and a memory limit by default, and no CPU limit, which
	// would throttle the exporter and delay the events it times.
	res := c["resources"].(map[string]any)
	requests, limits := res["requests"].(map[string]any), res["limits"].(map[string]any)
	if requests["cpu"] == nil || requests["memory"] == nil || limits["memory"] == nil || limits["cpu"] != nil {
		t.Errorf("resources %v, want CPU and memory requests and a memory limit only", res)
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
	if !slices.Equal(env, []string{"POD_NAME", "POD_NAMESPACE", "NODE_NAME", "GOMEMLIMIT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"}) {
		t.Errorf("env %v", env)
	}
	// GOMEMLIMIT is the container's memory limit, in bytes.
	for _, e := range c["env"].([]any) {
		if e := e.(map[string]any); e["name"] == "GOMEMLIMIT" {
			want := map[string]any{"resourceFieldRef": map[string]any{"containerName": "watchprobe", "resource": "limits.memory"}}
			if !equalJSON(e["valueFrom"], want) {
				t.Errorf("GOMEMLIMIT from %v, want %v", e["valueFrom"], want)
			}
		}
	}

	role := one(t, objs, "Role")
	if role.GetNamespace() != "watchprobe" {
		t.Errorf("Role in %q, want the marker namespace", role.GetNamespace())
	}
	// Exactly the verbs the exporter uses, which `check` verifies.
	wantRules := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": anys(probe.MarkerVerbs)}}
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

// GOMEMLIMIT follows the memory limit: none without one, since the
// resourceFieldRef would then give the node's allocatable memory, and none
// of the chart's when extraEnv sets it (two would be refused).
func TestRenderGOMEMLIMITNeedsMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   any // the GOMEMLIMIT variable's value or valueFrom, nil for none
	}{
		{[]string{"resources.limits=null"}, nil},
		{[]string{"resources.limits=null", `resources.requests={"memory": "1Gi"}`}, nil},
		{[]string{`resources.limits={"memory": "1Gi"}`}, map[string]any{"resourceFieldRef": map[string]any{"containerName": "watchprobe", "resource": "limits.memory"}}},
		{[]string{`extraEnv=[{"name": "GOMEMLIMIT", "value": "100MiB"}]`}, "100MiB"},
	} {
		args := []string{"template", "wp", chartDir}
		for _, v := range tc.values {
			args = append(args, "--set-json", v)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		c := field(t, one(t, decodeObjects(t, out), "Deployment"), "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
		var got []any
		for _, e := range c["env"].([]any) {
			if e := e.(map[string]any); e["name"] == "GOMEMLIMIT" {
				if v, ok := e["value"]; ok {
					got = append(got, v)
				} else {
					got = append(got, e["valueFrom"])
				}
			}
		}
		if tc.want == nil && len(got) > 0 || tc.want != nil && (len(got) != 1 || !equalJSON(got[0], tc.want)) {
			t.Errorf("%v: GOMEMLIMIT %v, want %v", tc.values, got, tc.want)
		}
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
	// The job label the rules select on, whatever the Service is called:
	// after the user's relabelings, which cannot change it.
	// First the node, which alerts name beside the pod.
	wantJob := map[string]any{"action": "replace", "targetLabel": "job", "replacement": "watchprobe-prod"}
	wantNode := map[string]any{"action": "replace", "sourceLabels": []any{"__meta_kubernetes_pod_node_name"}, "targetLabel": "node"}
	if relabel, _ := ep["relabelings"].([]any); len(relabel) < 3 || !equalJSON(relabel[0], wantNode) || !equalJSON(relabel[len(relabel)-1], wantJob) {
		t.Errorf("ServiceMonitor relabelings %v, want %v, the user's, then %v", ep["relabelings"], wantNode, wantJob)
	}
	out, err := helm(t, "template", "other-name", chartDir, "--set", "serviceMonitor.enabled=true", "--set", "fullnameOverride=renamed")
	if err != nil {
		t.Fatal(err)
	}
	wantJob["replacement"] = "watchprobe"
	renamed := field(t, one(t, decodeObjects(t, out), "ServiceMonitor"), "spec", "endpoints").([]any)[0].(map[string]any)
	if relabel, _ := renamed["relabelings"].([]any); len(relabel) != 2 || !equalJSON(relabel[0], wantNode) || !equalJSON(relabel[1], wantJob) {
		t.Errorf("ServiceMonitor of a renamed release relabels %v, want only %v and %v: the rules select job=\"watchprobe\"", renamed["relabelings"], wantNode, wantJob)
	}
	// The inhibit rules for prometheus-operator's Alertmanager.
	amc := one(t, objs, "AlertmanagerConfig")
	if amc.GetLabels()["alertmanagerConfig"] != "watchprobe" || amc.GetNamespace() != "monitoring" {
		t.Errorf("AlertmanagerConfig %s/%s labels %v", amc.GetNamespace(), amc.GetName(), amc.GetLabels())
	}
	if rules, _ := field(t, amc, "spec", "inhibitRules").([]any); len(rules) != 8 {
		t.Errorf("AlertmanagerConfig inhibit rules %v, want 4 pairs, each for one severity and for page over ticket", rules)
	} else {
		if eq := fmt.Sprint(rules[0].(map[string]any)["equal"]); eq != "[cluster region job namespace probe path apiserver instance pod node severity]" {
			t.Errorf("the path-down inhibit rule matches on %s, want the cluster labels, the deployment, probe, path and vantage point", eq)
		}
		// The values' severity names (P1 for page, P3 for ticket), not
		// the defaults': a page over tickets.
		r := rules[1].(map[string]any)
		if src, tgt := fmt.Sprint(r["sourceMatch"]), fmt.Sprint(r["targetMatch"]); !strings.Contains(src, "name:severity value:P1") || !strings.Contains(tgt, "name:severity value:P3") {
			t.Errorf("the path-down inhibit rule across severities matches sources %s and targets %s, want severity P1 over P3 (prometheusRule.severities)", src, tgt)
		}
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

	// The values an exporter chart is expected to have.
	for _, o := range objs {
		if o.GetLabels()["team"] != "sre" {
			t.Errorf("%s %s lacks commonLabels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
	}
	dep := one(t, objs, "Deployment")
	if got := field(t, dep, "spec", "revisionHistoryLimit"); got != float64(3) {
		t.Errorf("revisionHistoryLimit %v, want 3", got)
	}
	pod := field(t, dep, "spec", "template", "spec").(map[string]any)
	if pod["automountServiceAccountToken"] != false || pod["priorityClassName"] != "high-priority" {
		t.Errorf("automountServiceAccountToken %v, priorityClassName %v", pod["automountServiceAccountToken"], pod["priorityClassName"])
	}
	if tsc := fmt.Sprint(pod["topologySpreadConstraints"]); !strings.Contains(tsc, "topology.kubernetes.io/zone") {
		t.Errorf("topologySpreadConstraints %s", tsc)
	}
	if image := c["image"]; image != "registry.example.com/watchprobe/watchprobe:"+chartAppVersion(t) {
		t.Errorf("image %v, want it from image.registry", image)
	}
	if env["GOMEMLIMIT"] != "100MiB" {
		t.Errorf("extraEnv not in env: %v", env)
	}
	if from := fmt.Sprint(c["envFrom"]); !strings.Contains(from, "watchprobe-env") {
		t.Errorf("envFrom %s lacks extraEnvFrom", from)
	}
	if !hasVolume(pod, "kubeconfig", "watchprobe-kubeconfig") || mountPath(c, "kubeconfig") != "/etc/watchprobe-kubeconfig" {
		t.Errorf("extraVolumes or extraVolumeMounts missing: volumes %v, mounts %v", pod["volumes"], c["volumeMounts"])
	}
	pdb := one(t, objs, "PodDisruptionBudget")
	if got := field(t, pdb, "spec", "maxUnavailable"); got != float64(1) {
		t.Errorf("PodDisruptionBudget maxUnavailable %v", got)
	}
	if sel := field(t, pdb, "spec", "selector", "matchLabels"); !equalJSON(sel, field(t, dep, "spec", "selector", "matchLabels")) {
		t.Errorf("PodDisruptionBudget selects %v, not the Deployment's pods", sel)
	}
	// An explicit apiserver list needs no EndpointSlices.
	for _, r := range find(objs, "Role") {
		if strings.Contains(fmt.Sprint(r.Object["rules"]), "endpointslices") {
			t.Errorf("Role %s/%s grants EndpointSlices though no probe discovers apiservers", r.GetNamespace(), r.GetName())
		}
	}
}

// With the reloader, a changed config is applied by the running exporter:
// the sidecar watches the config's mount and posts to /-/reload, which the
// exporter then serves, and no checksum restarts the pod.
func TestRenderConfigReloader(t *testing.T) {
	for _, tc := range []struct {
		name, scheme string
		extra        []string
	}{
		{"http", "http", nil},
		// With TLS on the web endpoint, the reloader must speak https.
		{"https", "https", []string{"--set", "webConfig.scheme=HTTPS", "--set", "webConfig.existingSecret=web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helm(t, append([]string{"template", "wp", chartDir, "--set", "configReloader.enabled=true", "--set", "service.port=9100"}, tc.extra...)...)
			if err != nil {
				t.Fatal(err)
			}
			dep := one(t, decodeObjects(t, out), "Deployment")
			if ann, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "annotations"); ann["checksum/config"] != "" {
				t.Error("checksum/config annotation with the reloader: a config change would restart the pod")
			}
			containers := field(t, dep, "spec", "template", "spec", "containers").([]any)
			if len(containers) != 2 {
				t.Fatalf("%d containers, want the exporter and the reloader", len(containers))
			}
			exporter, reloader := containers[0].(map[string]any), containers[1].(map[string]any)
			if !slices.Contains(exporter["args"].([]any), any("--web.enable-lifecycle")) {
				t.Errorf("exporter args %v lack --web.enable-lifecycle", exporter["args"])
			}
			if image := reloader["image"].(string); !strings.HasPrefix(image, "quay.io/prometheus-operator/prometheus-config-reloader:v") {
				t.Errorf("reloader image %s", image)
			}
			want := []any{"--reload-url=" + tc.scheme + "://127.0.0.1:9100/-/reload", "--watched-dir=/etc/watchprobe", "--listen-address=:8081"}
			if !equalJSON(reloader["args"], want) {
				t.Errorf("reloader args %v, want %v", reloader["args"], want)
			}
			if mountPath(reloader, "config") != "/etc/watchprobe" || mountPath(exporter, "config") != "/etc/watchprobe" {
				t.Error("the reloader does not watch the exporter's config mount")
			}
		})
	}
}

// A probe that discovers its apiservers reads the `kubernetes` Service's
// EndpointSlices in namespace default: the chart grants exactly that there,
// in either form of `apiservers`, and nothing for explicit lists.
func TestRenderAPIServerDiscoveryRBAC(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, apiservers string
		discovers        bool
	}{
		{"short form", "discover", true},
		{"mapping", "{discover: true, server_name: kubernetes.default.svc, retire_after: 5m}", true},
		{"list", `["10.0.0.1:6443", "10.0.0.2:6443"]`, false},
		{"mapping with endpoints", `{endpoints: ["10.0.0.1:6443"]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			// A second probe without apiservers: one discovering probe is enough.
			data := "probes:\n  - {name: ha, namespace: probes, apiservers: " + tc.apiservers + "}\n  - {name: plain, namespace: probes}\n"
			if err := os.WriteFile(values, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			objs := render(t, "monitoring", values)
			var roles, bindings []*unstructured.Unstructured
			for _, o := range objs {
				if o.GetNamespace() == "default" {
					switch o.GetKind() {
					case "Role":
						roles = append(roles, o)
					case "RoleBinding":
						bindings = append(bindings, o)
					}
				}
			}
			if !tc.discovers {
				if len(roles)+len(bindings) != 0 {
					t.Errorf("%d Roles and %d RoleBindings in default without discovery", len(roles), len(bindings))
				}
				return
			}
			if len(roles) != 1 || len(bindings) != 1 {
				t.Fatalf("%d Roles and %d RoleBindings in default, want one each", len(roles), len(bindings))
			}
			want := []any{map[string]any{"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": anys(probe.DiscoveryVerbs)}}
			if got := field(t, roles[0], "rules"); !equalJSON(got, want) {
				t.Errorf("rules %v, want %v", got, want)
			}
			if ref := field(t, bindings[0], "roleRef", "name"); ref != roles[0].GetName() {
				t.Errorf("RoleBinding refers to %v, not %s", ref, roles[0].GetName())
			}
			subject := field(t, bindings[0], "subjects").([]any)[0].(map[string]any)
			if subject["name"] != "wp-watchprobe" || subject["namespace"] != "monitoring" {
				t.Errorf("RoleBinding subject %v", subject)
			}
		})
	}
}

// The naming and placement overrides an umbrella chart uses: every object
// takes the full name, the release's own objects the overriding namespace,
// and the images the global registry.
func TestRenderOverrides(t *testing.T) {
	objs := render(t, "monitoring", "watchprobe/ci/overrides-values.yaml")
	for _, o := range objs {
		labels := o.GetLabels()
		if labels["app.kubernetes.io/name"] != "probe" || labels["team"] != "sre" || labels["cost-center"] != "42" {
			t.Errorf("%s %s labels %v: want nameOverride and commonLabels", o.GetKind(), o.GetName(), labels)
		}
		if !strings.HasPrefix(o.GetName(), "cluster-watch-probe") && o.GetKind() != "Namespace" {
			t.Errorf("%s %s: want fullnameOverride", o.GetKind(), o.GetName())
		}
		switch {
		case o.GetKind() == "Namespace":
		case o.GetKind() == "Role" || o.GetKind() == "RoleBinding":
			// In the marker namespace, or default for discovery.
			if ns := o.GetNamespace(); ns != "watchprobe" && ns != "default" {
				t.Errorf("%s %s in %s", o.GetKind(), o.GetName(), ns)
			}
		case o.GetNamespace() != "observability":
			t.Errorf("%s %s in %q, want namespaceOverride observability", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	for _, rb := range find(objs, "RoleBinding") {
		subject := field(t, rb, "subjects").([]any)[0].(map[string]any)
		if subject["name"] != "cluster-watch-probe" || subject["namespace"] != "observability" {
			t.Errorf("RoleBinding %s/%s subject %v", rb.GetNamespace(), rb.GetName(), subject)
		}
	}
	pod := field(t, one(t, objs, "Deployment"), "spec", "template", "spec").(map[string]any)
	if image := pod["containers"].([]any)[0].(map[string]any)["image"].(string); !strings.HasPrefix(image, "mirror.example.com/watchprobe/watchprobe:") {
		t.Errorf("image %s, want global.imageRegistry", image)
	}
	if secrets := fmt.Sprint(pod["imagePullSecrets"]); !strings.Contains(secrets, "mirror-credentials") {
		t.Errorf("imagePullSecrets %s lack global.imagePullSecrets", secrets)
	}
	if got := field(t, one(t, objs, "PodDisruptionBudget"), "spec", "minAvailable"); got != "50%" {
		t.Errorf("PodDisruptionBudget minAvailable %v", got)
	}
	checkConfig(t, objs, "cluster-watch-probe")
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

	config := renderedConfig(t, objs, "wp-watchprobe")
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

	out, err := exec.Command(buildExporter(t), "--config.check", "--config.file", checkableConfig(t, config)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration is valid: 1 probe(s)") {
		t.Errorf("the exporter refused the rendered config.yml (%v):\n%s\n%s", err, out, config)
	}
}

// The chart works as a dependency: a parent chart passes its global values
// (which the schema must admit), places the chart under its condition, and
// renders it; global.imageRegistry reaches both images.
func TestRenderAsSubchart(t *testing.T) {
	parent := t.TempDir()
	// helm reads unpacked dependencies from charts/, as `helm dependency
	// build` would leave them.
	if err := os.CopyFS(filepath.Join(parent, "charts", "watchprobe"), os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version string }
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err == nil {
		err = yaml.Unmarshal(data, &chart)
	}
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"Chart.yaml": fmt.Sprintf(`apiVersion: v2
name: platform
version: 1.0.0
description: An umbrella chart.
dependencies:
  - name: watchprobe
    version: %q
    repository: file://../watchprobe
    condition: watchprobe.enabled
`, chart.Version),
		"values.yaml": `global:
  imageRegistry: mirror.example.com
  imagePullSecrets:
    - name: mirror-credentials
  someOtherChartsSetting: true
watchprobe:
  enabled: true
  configReloader:
    enabled: true
  prometheusRule:
    enabled: true
`,
		"templates/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: platform\n",
	}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(parent, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(parent, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := helm(t, "lint", "--strict", parent); err != nil {
		t.Error(err)
	}
	out, err := helm(t, "template", "infra", parent, "--namespace", "platform")
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, out)
	dep := one(t, objs, "Deployment")
	if dep.GetName() != "infra-watchprobe" || dep.GetNamespace() != "platform" {
		t.Errorf("Deployment %s/%s, want platform/infra-watchprobe", dep.GetNamespace(), dep.GetName())
	}
	pod := field(t, dep, "spec", "template", "spec").(map[string]any)
	for _, c := range pod["containers"].([]any) {
		if image := c.(map[string]any)["image"].(string); !strings.HasPrefix(image, "mirror.example.com/") {
			t.Errorf("image %s ignores global.imageRegistry", image)
		}
	}
	if secrets := fmt.Sprint(pod["imagePullSecrets"]); !strings.Contains(secrets, "mirror-credentials") {
		t.Errorf("imagePullSecrets %s ignore global.imagePullSecrets", secrets)
	}
	one(t, objs, "PrometheusRule")

	out, err = helm(t, "template", "infra", parent, "--set", "watchprobe.enabled=false")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(find(decodeObjects(t, out), "Deployment")); n != 0 {
		t.Errorf("%d Deployments with watchprobe.enabled=false", n)
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
	want := map[string][]string{"probes-a": {"configmaps"}, "probes-b": {"configmaps", "leases", "deployments", "replicasets"}}
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

func hasVolume(pod map[string]any, name, secret string) bool {
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		if s, ok := v["secret"].(map[string]any); ok && v["name"] == name && s["secretName"] == secret {
			return true
		}
	}
	return false
}

func mountPath(container map[string]any, volume string) any {
	for _, m := range container["volumeMounts"].([]any) {
		if m := m.(map[string]any); m["name"] == volume {
			return m["mountPath"]
		}
	}
	return nil
}

// checkConfig runs the exporter's --config.check on the config.yml of the
// ConfigMap name.
func checkConfig(t *testing.T, objs []*unstructured.Unstructured, name string) {
	t.Helper()
	config := renderedConfig(t, objs, name)
	out, err := exec.Command(buildExporter(t), "--config.check", "--config.file", checkableConfig(t, config)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration is valid") {
		t.Errorf("the exporter refused the rendered config.yml (%v):\n%s\n%s", err, out, config)
	}
}

// anys is ss as the []any that decoded YAML holds.
func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func equalJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

// renderedConfig is the config.yml of the rendered ConfigMap name.
func renderedConfig(t *testing.T, objs []*unstructured.Unstructured, name string) string {
	t.Helper()
	for _, cm := range find(objs, "ConfigMap") {
		if cm.GetName() == name {
			return field(t, cm, "data", "config.yml").(string)
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return ""
}

// A probe's controllers get it, in its namespace only, the verbs the
// controller probes use on those kinds, and nothing where no probe lists
// them.
func TestRenderControllerRBAC(t *testing.T) {
	values := filepath.Join(t.TempDir(), "values.yaml")
	data := "probes:\n" +
		"  - {name: ctrl, namespace: probes, controllers: [deployment]}\n" +
		"  - {name: both, namespace: both, kind: Lease, controllers: [replicaset, deployment]}\n" +
		"  - {name: plain, namespace: plain}\n"
	if err := os.WriteFile(values, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	want := map[string][]any{
		"probes": {
			map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": anys(probe.MarkerVerbs)},
			map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}, "verbs": anys(probe.ControllerVerbs)},
		},
		"both": {
			map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": anys(probe.MarkerVerbs)},
			map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"deployments", "replicasets"}, "verbs": anys(probe.ControllerVerbs)},
		},
		"plain": {
			map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": anys(probe.MarkerVerbs)},
		},
	}
	roles := 0
	for _, o := range render(t, "monitoring", values) {
		if o.GetKind() != "Role" {
			continue
		}
		roles++
		if got := field(t, o, "rules"); !equalJSON(got, want[o.GetNamespace()]) {
			t.Errorf("Role in %s: rules %v, want %v", o.GetNamespace(), got, want[o.GetNamespace()])
		}
	}
	if roles != len(want) {
		t.Errorf("%d Roles, want one per marker namespace (%d)", roles, len(want))
	}
}
