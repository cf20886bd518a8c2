// Package charts tests the Helm chart: lint, rendering, the values schema,
// and an install into the real local apiserver whose ServiceAccount then
// runs the real exporter.
package charts

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
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
	corev1 "k8s.io/api/core/v1"
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
	"github.com/watchprobe/watchprobe/pkg/probe"
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

// Lint mode turns the chart's fail calls into notes, so the render tests
// below are what catch those.
func TestLint(t *testing.T) {
	for _, values := range [][]string{
		nil,
		{"watchprobe/ci/all-enabled-values.yaml"},
		{"watchprobe/ci/two-namespaces-values.yaml"},
		{"watchprobe/ci/overrides-values.yaml"},
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

// `helm template charts/watchprobe`, no release name, no --kube-version:
// the chart declares no kubeVersion, whose check would refuse helm's
// built-in default version.
func TestRenderWithoutFlags(t *testing.T) {
	out, err := helm(t, "template", chartDir)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, out)
	if one(t, objs, "Deployment").GetName() == "" {
		t.Error("Deployment without a name")
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
	for _, kind := range []string{"ClusterRole", "ClusterRoleBinding", "ServiceMonitor", "NetworkPolicy", "PodSecurityPolicy", "PodDisruptionBudget", "PrometheusRule"} {
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
	wantJob := map[string]any{"action": "replace", "targetLabel": "job", "replacement": "watchprobe-prod"}
	if relabel, _ := ep["relabelings"].([]any); len(relabel) < 2 || !equalJSON(relabel[len(relabel)-1], wantJob) {
		t.Errorf("ServiceMonitor relabelings %v, want the user's, then %v", ep["relabelings"], wantJob)
	}
	out, err := helm(t, "template", "other-name", chartDir, "--set", "serviceMonitor.enabled=true", "--set", "fullnameOverride=renamed")
	if err != nil {
		t.Fatal(err)
	}
	wantJob["replacement"] = "watchprobe"
	renamed := field(t, one(t, decodeObjects(t, out), "ServiceMonitor"), "spec", "endpoints").([]any)[0].(map[string]any)
	if relabel, _ := renamed["relabelings"].([]any); len(relabel) != 1 || !equalJSON(relabel[0], wantJob) {
		t.Errorf("ServiceMonitor of a renamed release relabels %v, want only %v: the rules select job=\"watchprobe\"", renamed["relabelings"], wantJob)
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

// The chart's PrometheusRule with default values is rules/watchprobe.rules.yml
// (both come from templates/_rules.tpl; rules/rules_test.go keeps the file
// current and tests other values), and the dashboard ConfigMap carries
// dashboards/watchprobe.json, whose files/ copy `make dashboards` refreshes.
func TestRulesAndDashboardShipped(t *testing.T) {
	a, errA := os.ReadFile("watchprobe/files/watchprobe.json")
	b, errB := os.ReadFile("../dashboards/watchprobe.json")
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !bytes.Equal(a, b) {
		t.Error("watchprobe/files/watchprobe.json differs from dashboards/watchprobe.json: run `make dashboards`")
	}
	out, err := helm(t, "template", "wp", chartDir, "--set", "prometheusRule.enabled=true")
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
	want, _ := os.ReadFile("../dashboards/watchprobe.json")
	if got := field(t, dash, "data", "watchprobe.json").(string); got != strings.TrimRight(string(want), "\n") {
		t.Error("the dashboard ConfigMap does not hold dashboards/watchprobe.json")
	}
	if dash.GetAnnotations()["grafana_folder"] != "Kubernetes" {
		t.Errorf("dashboard annotations %v", dash.GetAnnotations())
	}

	// Another cluster label gives exactly what the generator writes for it.
	generated := filepath.Join(t.TempDir(), "region.json")
	if out, err := exec.Command("go", "run", "../dashboards", "-o", generated, "-cluster-label", "region").CombinedOutput(); err != nil {
		t.Fatalf("generating the dashboard for label region: %v\n%s", err, out)
	}
	want, _ = os.ReadFile(generated)
	out, err = helm(t, "template", "wp", chartDir, "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.clusterLabel=region")
	if err != nil {
		t.Fatal(err)
	}
	var regional any
	for _, cm := range find(decodeObjects(t, out), "ConfigMap") {
		if cm.GetLabels()["grafana_dashboard"] == "1" {
			regional = field(t, cm, "data", "watchprobe.json")
		}
	}
	if regional != strings.TrimRight(string(want), "\n") {
		t.Error("the dashboard with grafanaDashboard.clusterLabel=region differs from the generator's with -cluster-label region")
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

// The flags the chart passes are flags the exporter has: the exporter
// parses the Deployment's args (its config file swapped for the rendered
// one) and checks the config.
func TestExporterAcceptsDeploymentArgs(t *testing.T) {
	objs := render(t, "monitoring", "watchprobe/ci/all-enabled-values.yaml")
	file := checkableConfig(t, renderedConfig(t, objs, "wp-watchprobe"))
	c := field(t, one(t, objs, "Deployment"), "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	args := []string{"--config.check"}
	for _, a := range c["args"].([]any) {
		a := a.(string)
		if strings.HasPrefix(a, "--config.file=") {
			a = "--config.file=" + file
		}
		args = append(args, a)
	}
	// metrics.classicHistograms: false in the values.
	if !slices.Contains(args, "--no-metrics.classic-histograms") {
		t.Errorf("args %v lack --no-metrics.classic-histograms", args)
	}
	out, err := exec.Command(buildExporter(t), args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration is valid") {
		t.Errorf("the exporter refused the chart's args %v (%v):\n%s", args, err, out)
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
		// Certificates expected in the chart's mount with no Secret mounted.
		{[]string{"probes[0].paths={etcd}", "probes[0].etcd.endpoints={https://10.0.0.1:2379}", "probes[0].etcd.ca_file=/etc/watchprobe/etcd/ca.crt", "probes[0].name=x", "probes[0].namespace=y"}, `probe "x" reads etcd.ca_file from /etc/watchprobe/etcd/ca.crt, but etcd.clientCertsSecret is empty, so nothing is mounted there`},
	} {
		args := []string{"template", "wp", chartDir}
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
	if err := os.WriteFile(config, []byte(renderedConfig(t, objs, "wp-watchprobe")), 0o600); err != nil {
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
	// cm-b's controller markers are made and changed with the Role's
	// verbs (no controller-manager runs here: they are never answered).
	for _, ctl := range []string{"deployment", "replicaset"} {
		changed := fmt.Sprintf(`watchprobe_controller_changes_total{controller=%q,probe="cm-b"} `, ctl)
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(body, changed) || strings.Contains(body, changed+"0\n"); body = scrape(url) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s marker changed with the chart's ServiceAccount:\n%s", ctl, grep(body, "watchprobe_controller_"))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if line := grep(body, fmt.Sprintf(`watchprobe_controller_change_errors_total{controller=%q,probe="cm-b"}`, ctl)); !strings.HasSuffix(strings.TrimSpace(line), " 0") {
			t.Errorf("controller marker errors with the chart's RBAC: %s", line)
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
	if _, err := sa.AppsV1().Deployments("probes-a").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Deployments where no probe times controllers: %v, want Forbidden", err)
	}
	if _, err := sa.AppsV1().DaemonSets("probes-b").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing DaemonSets beside the controller markers: %v, want Forbidden", err)
	}

	// A probe with `apiservers: discover` adds a Role in default with which
	// the same ServiceAccount reads and watches the kubernetes Service's
	// EndpointSlices, and nothing else there or elsewhere.
	if _, err := sa.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing EndpointSlices while no probe discovers apiservers: %v, want Forbidden", err)
	}
	discover := filepath.Join(dir, "discover.yaml")
	if err := os.WriteFile(discover, []byte("probes:\n  - {name: ha, namespace: probes-a, apiservers: discover}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var inDefault []*unstructured.Unstructured
	for _, o := range render(t, release, discover) {
		if o.GetNamespace() == "default" {
			inDefault = append(inDefault, o)
		}
	}
	apply(t, ctx, admin, inDefault)
	selector := metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"}
	deadline = time.Now().Add(30 * time.Second) // the authorizer learns of new RBAC objects from its informers
	for {
		eps, err := sa.DiscoveryV1().EndpointSlices("default").List(ctx, selector)
		if err == nil && len(eps.Items) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listing the kubernetes EndpointSlices with the discovery Role: %v, %v", eps, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	w, err := sa.DiscoveryV1().EndpointSlices("default").Watch(ctx, selector)
	if err != nil {
		t.Errorf("watching the kubernetes EndpointSlices: %v", err)
	} else {
		w.Stop()
	}
	if _, err := sa.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing EndpointSlices in kube-system: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Secrets in default with the discovery Role: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Endpoints("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing Endpoints in default: %v, want Forbidden (only EndpointSlices are granted)", err)
	}
}

// helm install, upgrade and uninstall against the real apiserver: a marker
// namespace that exists already (with objects of its own) is used, not
// taken over, so the install does not fail on Helm's ownership check; one
// the chart creates stays in the release on upgrade; and uninstall leaves
// both, with what they hold.
func TestHelmInstallLeavesNamespaces(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "existing"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ConfigMaps("existing").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "precious"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte("probes:\n  - {name: a, namespace: existing}\n  - {name: b, namespace: created}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--kubeconfig", kubeconfig, "--namespace", "monitoring", "-f", values}
	if _, err := helm(t, append([]string{"install", "wp", chartDir, "--create-namespace"}, common...)...); err != nil {
		t.Fatalf("installing beside an existing marker namespace: %v", err)
	}
	created, err := admin.CoreV1().Namespaces().Get(ctx, "created", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart did not create its marker namespace: %v", err)
	}
	if created.Labels["watchprobe.io/markers"] != "true" {
		t.Errorf("created namespace labels %v", created.Labels)
	}
	existing, err := admin.CoreV1().Namespaces().Get(ctx, "existing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, owned := existing.Annotations["meta.helm.sh/release-name"]; owned {
		t.Errorf("the chart took over the existing namespace: %v", existing.Annotations)
	}
	if _, err := helm(t, append([]string{"upgrade", "wp", chartDir, "--set", "replicaCount=2"}, common...)...); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "created", metav1.GetOptions{}); err != nil {
		t.Errorf("the created namespace is gone after an upgrade: %v", err)
	}
	if _, err := helm(t, "uninstall", "wp", "--kubeconfig", kubeconfig, "--namespace", "monitoring"); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"existing", "created"} {
		n, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			t.Errorf("namespace %s after uninstall: %v, deleting %v", ns, err, n.GetDeletionTimestamp())
		}
	}
	if _, err := admin.CoreV1().ConfigMaps("existing").Get(ctx, "precious", metav1.GetOptions{}); err != nil {
		t.Errorf("a ConfigMap of the existing namespace after uninstall: %v", err)
	}
	for _, ns := range []string{"existing", "created"} {
		if roles, err := admin.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{}); err != nil || len(roles.Items) != 0 {
			t.Errorf("Roles left in %s after uninstall: %v %v", ns, roles, err)
		}
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

// checkableConfig writes config to a file the exporter can load outside
// the pod (see withEtcdFiles) and returns its path.
func checkableConfig(t *testing.T, config string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(file, []byte(withEtcdFiles(t, config)), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// withEtcdFiles points the etcd files of a rendered config, which the pod
// gets from the mounted Secret, at a real certificate, key and CA in a
// temporary directory: the exporter reads them when it loads the config, as
// promtool does a scrape config's TLS files.
func withEtcdFiles(t *testing.T, config string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "watchprobe-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for name, data := range map[string][]byte{
		"tls.crt": cert, "ca.crt": cert,
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return strings.ReplaceAll(config, "/etc/watchprobe/etcd/", dir+"/")
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
