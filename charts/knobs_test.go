package charts

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// renderSet renders the chart with --set-json values over the defaults.
func renderSet(t *testing.T, setJSON ...string) (string, error) {
	t.Helper()
	args := []string{"template", "wp", chartDir, "--namespace", "monitoring"}
	for _, v := range setJSON {
		args = append(args, "--set-json", v)
	}
	return helm(t, args...)
}

// podSpec is the Deployment's pod spec rendered with setJSON.
func podSpec(t *testing.T, setJSON ...string) map[string]any {
	t.Helper()
	out, err := renderSet(t, setJSON...)
	if err != nil {
		t.Fatal(err)
	}
	return field(t, one(t, decodeObjects(t, out), "Deployment"), "spec", "template", "spec").(map[string]any)
}

// No priority class unless set: the cluster's default, as before; set, the
// pods carry it.
func TestKnobPriorityClassName(t *testing.T) {
	if pc, ok := podSpec(t)["priorityClassName"]; ok {
		t.Errorf("priorityClassName %v by default, want none", pc)
	}
	if pc := podSpec(t, `priorityClassName="monitoring"`)["priorityClassName"]; pc != "monitoring" {
		t.Errorf("priorityClassName %v, want monitoring", pc)
	}
}

// imagePullSecrets take names or references, global ones first; none are
// rendered when none are given; a reference without a name is refused.
func TestKnobImagePullSecrets(t *testing.T) {
	if s, ok := podSpec(t)["imagePullSecrets"]; ok {
		t.Errorf("imagePullSecrets %v by default, want none", s)
	}
	got := podSpec(t, `imagePullSecrets=["by-name", {"name": "by-ref"}]`, `global.imagePullSecrets=["global", {"name": "global-ref"}]`)["imagePullSecrets"]
	want := []any{map[string]any{"name": "global"}, map[string]any{"name": "global-ref"}, map[string]any{"name": "by-name"}, map[string]any{"name": "by-ref"}}
	if !equalJSON(got, want) {
		t.Errorf("imagePullSecrets %v, want %v", got, want)
	}
	for _, bad := range []string{`imagePullSecrets=[{"nam": "x"}]`, `imagePullSecrets=[""]`, `imagePullSecrets=[3]`} {
		if _, err := renderSet(t, bad); err == nil || !strings.Contains(err.Error(), "/imagePullSecrets/0") {
			t.Errorf("%s: %v, want the schema to refuse /imagePullSecrets/0", bad, err)
		}
	}
}

// serviceAccount.automountServiceAccountToken false: the ServiceAccount
// says so, and the exporter still authenticates with its token, which the
// pod mounts explicitly into the exporter's container only, where
// in-cluster configuration reads it; with automountServiceAccountToken
// false too (a kubeconfig's credentials), no token at all.
func TestKnobServiceAccountToken(t *testing.T) {
	const tokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"
	for _, tc := range []struct {
		name      string
		set       []string
		saField   any // the ServiceAccount's automountServiceAccountToken, nil: unset
		automount bool
		projected bool
	}{
		{"default", nil, nil, true, false},
		{"service account off", []string{`serviceAccount.automountServiceAccountToken=false`, `configReloader.enabled=true`}, false, false, true},
		{"no token", []string{`serviceAccount.automountServiceAccountToken=false`, `automountServiceAccountToken=false`}, false, false, false},
		{"pod off only", []string{`automountServiceAccountToken=false`}, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderSet(t, tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeObjects(t, out)
			if got := one(t, objs, "ServiceAccount").Object["automountServiceAccountToken"]; got != tc.saField {
				t.Errorf("ServiceAccount automountServiceAccountToken %v, want %v", got, tc.saField)
			}
			pod := field(t, one(t, objs, "Deployment"), "spec", "template", "spec").(map[string]any)
			if pod["automountServiceAccountToken"] != tc.automount {
				t.Errorf("pod automountServiceAccountToken %v, want %v", pod["automountServiceAccountToken"], tc.automount)
			}
			var volume map[string]any
			for _, v := range pod["volumes"].([]any) {
				if v := v.(map[string]any); v["name"] == "serviceaccount-token" {
					volume = v
				}
			}
			containers := pod["containers"].([]any)
			if !tc.projected {
				if volume != nil || mountPath(containers[0].(map[string]any), "serviceaccount-token") != nil {
					t.Errorf("a projected token volume %v without need", volume)
				}
				return
			}
			var sources []string
			for _, s := range field(t, &unstructured.Unstructured{Object: volume}, "projected", "sources").([]any) {
				for k := range s.(map[string]any) {
					sources = append(sources, k)
				}
			}
			if strings.Join(sources, ",") != "serviceAccountToken,configMap,downwardAPI" {
				t.Errorf("projected sources %v, want the token, the CA and the namespace", sources)
			}
			if got := mountPath(containers[0].(map[string]any), "serviceaccount-token"); got != tokenDir {
				t.Errorf("exporter mounts the token at %v, want %s", got, tokenDir)
			}
			for _, c := range containers[1:] {
				if got := mountPath(c.(map[string]any), "serviceaccount-token"); got != nil {
					t.Errorf("container %v mounts the token too", c.(map[string]any)["name"])
				}
			}
		})
	}
}

// The ingress policy admits scrapes only from the peers named: the schema
// refuses it enabled with none, which would admit every source.
func TestKnobNetworkPolicyIngressNeedsPeers(t *testing.T) {
	_, err := renderSet(t, `networkPolicy.enabled=true`)
	if err == nil || !strings.Contains(err.Error(), "at '/networkPolicy/from': minItems: got 0, want 1") {
		t.Errorf("networkPolicy.enabled without from: %v, want the schema to refuse it", err)
	}
	out, err := renderSet(t, `networkPolicy.enabled=true`, `networkPolicy.from=[{"namespaceSelector": {}}]`)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, out)
	np := one(t, objs, "NetworkPolicy")
	ingress := field(t, np, "spec", "ingress").([]any)
	if len(ingress) != 1 || !equalJSON(ingress[0].(map[string]any)["from"], []any{map[string]any{"namespaceSelector": map[string]any{}}}) {
		t.Errorf("ingress %v, want the metrics port from the peers given", ingress)
	}
}

// The egress policy: the apiserver's CIDRs on its ports, DNS to kube-dns,
// each etcd endpoint and listed apiserver by address (an ipBlock of it) or
// by name (its port only), the OTLP endpoint's port (to otlpTo's peers
// when given), then extraRules; refused without the apiserver's CIDRs,
// which would cut the exporter off.
func TestKnobNetworkPolicyEgress(t *testing.T) {
	_, err := renderSet(t, `networkPolicy.egress.enabled=true`)
	if err == nil || !strings.Contains(err.Error(), "at '/networkPolicy/egress/apiServer/cidrs': minItems: got 0, want 1") {
		t.Errorf("egress without apiServer.cidrs: %v, want the schema to refuse it", err)
	}
	if _, err := renderSet(t, `networkPolicy.egress.enabled=true`, `networkPolicy.egress.apiServer.cidrs=["10.0.0.1"]`); err == nil || !strings.Contains(err.Error(), "/networkPolicy/egress/apiServer/cidrs/0") {
		t.Errorf("an apiserver address without a prefix length: %v, want the schema to refuse it", err)
	}

	ipBlock := func(cidr string) []any { return []any{map[string]any{"ipBlock": map[string]any{"cidr": cidr}}} }
	tcp := func(ports ...int) []any {
		var out []any
		for _, p := range ports {
			out = append(out, map[string]any{"port": p, "protocol": "TCP"})
		}
		return out
	}
	kubeDNS := []any{map[string]any{
		"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "kube-system"}},
		"podSelector":       map[string]any{"matchLabels": map[string]any{"k8s-app": "kube-dns"}},
	}}
	dns := map[string]any{"to": kubeDNS, "ports": []any{map[string]any{"port": 53, "protocol": "UDP"}, map[string]any{"port": 53, "protocol": "TCP"}}}
	apiserver := map[string]any{"to": ipBlock("10.0.0.0/28"), "ports": tcp(443, 6443)}
	collector := []any{map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "observability"}}}}
	extra := map[string]any{"to": ipBlock("192.0.2.0/24"), "ports": tcp(8443)}

	for _, tc := range []struct {
		name string
		set  []string
		want []any
	}{
		{"apiserver and DNS", nil, []any{apiserver, dns}},
		{"etcd, apiservers, tracing, extra", []string{
			`probes=[{"name": "a", "namespace": "a", "paths": ["informer", "etcd"], "etcd": {"endpoints": ["https://10.0.0.5:2379", "https://etcd.example:2379", "http://[fd00::5]"]}, "apiservers": ["10.0.0.1:6443", "[fd00::1]:443", "cp.example:6443"]},
			         {"name": "b", "namespace": "b", "paths": ["etcd"], "etcd": {"endpoints": ["https://10.0.0.5:2379"]}, "apiservers": {"endpoints": ["10.0.0.2:6443"]}}]`,
			`tracing.otlp.endpoint="http://otel-collector.observability:4317"`,
			`networkPolicy.egress.extraRules=[{"to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}], "ports": [{"port": 8443, "protocol": "TCP"}]}]`,
		}, []any{apiserver, dns,
			map[string]any{"ports": tcp(2379), "to": ipBlock("10.0.0.5/32")},
			map[string]any{"ports": tcp(2379)},
			map[string]any{"ports": tcp(80), "to": ipBlock("fd00::5/128")},
			map[string]any{"ports": tcp(6443), "to": ipBlock("10.0.0.1/32")},
			map[string]any{"ports": tcp(443), "to": ipBlock("fd00::1/128")},
			map[string]any{"ports": tcp(6443)},
			map[string]any{"ports": tcp(6443), "to": ipBlock("10.0.0.2/32")},
			map[string]any{"ports": tcp(4317)},
			extra,
		}},
		{"collector peers, no DNS", []string{
			`tracing.otlp.endpoint="https://collector.example"`,
			`networkPolicy.egress.otlpTo=` + mustJSON(t, collector),
			`networkPolicy.egress.dns.to=[]`,
		}, []any{apiserver, map[string]any{"ports": tcp(443), "to": collector}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderSet(t, append([]string{`networkPolicy.egress.enabled=true`, `networkPolicy.egress.apiServer.cidrs=["10.0.0.0/28"]`}, tc.set...)...)
			if err != nil {
				t.Fatal(err)
			}
			np := one(t, decodeObjects(t, out), "NetworkPolicy")
			if np.GetName() != "wp-watchprobe-egress" || !equalJSON(field(t, np, "spec", "policyTypes"), []any{"Egress"}) {
				t.Errorf("NetworkPolicy %s with policyTypes %v, want wp-watchprobe-egress for Egress only", np.GetName(), field(t, np, "spec", "policyTypes"))
			}
			if got := field(t, np, "spec", "egress"); !equalJSON(got, tc.want) {
				t.Errorf("egress rules\n%s\nwant\n%s", mustJSON(t, got), mustJSON(t, tc.want))
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The VerticalPodAutoscaler, when on, targets the chart's Deployment and
// scales the exporter's container only, memory by default (a CPU request
// cut to the exporter's use would starve it), within the bounds given.
func TestKnobVerticalPodAutoscaler(t *testing.T) {
	out, err := renderSet(t, `verticalPodAutoscaler.enabled=true`, `verticalPodAutoscaler.minAllowed={"memory": "48Mi"}`, `verticalPodAutoscaler.maxAllowed={"memory": "512Mi"}`, `fullnameOverride="probe"`)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, out)
	vpa := one(t, objs, "VerticalPodAutoscaler")
	if vpa.GetAPIVersion() != "autoscaling.k8s.io/v1" || vpa.GetNamespace() != "monitoring" {
		t.Errorf("VerticalPodAutoscaler %s in %s", vpa.GetAPIVersion(), vpa.GetNamespace())
	}
	dep := one(t, objs, "Deployment")
	wantRef := map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": dep.GetName()}
	if got := field(t, vpa, "spec", "targetRef"); !equalJSON(got, wantRef) {
		t.Errorf("targetRef %v, want %v", got, wantRef)
	}
	want := []any{
		map[string]any{"containerName": "watchprobe", "controlledResources": []any{"memory"}, "controlledValues": "RequestsAndLimits",
			"minAllowed": map[string]any{"memory": "48Mi"}, "maxAllowed": map[string]any{"memory": "512Mi"}},
		map[string]any{"containerName": "*", "mode": "Off"},
	}
	if got := field(t, vpa, "spec", "resourcePolicy", "containerPolicies"); !equalJSON(got, want) {
		t.Errorf("containerPolicies %v, want %v", got, want)
	}
	if got := field(t, vpa, "spec", "updatePolicy", "updateMode"); got != "Auto" {
		t.Errorf("updateMode %v", got)
	}
	for _, bad := range []struct{ set, at string }{
		{`verticalPodAutoscaler.controlledResources=["storage"]`, "/verticalPodAutoscaler/controlledResources/0"},
		{`verticalPodAutoscaler.maxAllowed={"memroy": "1Gi"}`, "/verticalPodAutoscaler/maxAllowed"},
		{`verticalPodAutoscaler.updateMode="auto"`, "/verticalPodAutoscaler/updateMode"},
	} {
		if _, err := renderSet(t, bad.set); err == nil || !strings.Contains(err.Error(), bad.at) {
			t.Errorf("%s: %v, want the schema to refuse %s", bad.set, err, bad.at)
		}
	}
}

// extraManifests: objects and strings alike go through tpl and are
// rendered as they are otherwise.
func TestKnobExtraManifests(t *testing.T) {
	out, err := renderSet(t, `extraManifests=[
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ include \"watchprobe.fullname\" . }}-object", "namespace": "{{ .Release.Namespace }}"}, "data": {"k": "v"}},
		"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ .Release.Name }}-string\nstringData:\n  k: v\n"]`)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, out)
	var names []string
	for _, o := range objs {
		if strings.HasSuffix(o.GetName(), "-object") || strings.HasSuffix(o.GetName(), "-string") {
			names = append(names, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	if slices.Sort(names); strings.Join(names, ", ") != "ConfigMap monitoring/wp-watchprobe-object, Secret /wp-string" {
		t.Errorf("extra objects %v, want the ConfigMap and the Secret, templated", names)
	}
	if _, err := renderSet(t, `extraManifests=[3]`); err == nil || !strings.Contains(err.Error(), "/extraManifests/0") {
		t.Errorf("a number in extraManifests: %v, want the schema to refuse it", err)
	}
}

// The reloader asks for what it was measured to use (values.yaml says
// how), so policies that require requests admit the pod, with a memory
// limit and no CPU limit.
func TestKnobConfigReloaderResources(t *testing.T) {
	pod := podSpec(t, `configReloader.enabled=true`)
	var reloader map[string]any
	for _, c := range pod["containers"].([]any) {
		if c := c.(map[string]any); c["name"] == "config-reloader" {
			reloader = c
		}
	}
	if reloader == nil {
		t.Fatal("no config-reloader container")
	}
	want := map[string]any{"requests": map[string]any{"cpu": "5m", "memory": "40Mi"}, "limits": map[string]any{"memory": "64Mi"}}
	if got := reloader["resources"]; !equalJSON(got, want) {
		t.Errorf("reloader resources %v, want %v", got, want)
	}
}

// The `helm test` hook, when on: a Pod annotated as Helm's test that runs
// `watchprobe check` on the release's config for helmTest.cycles cycles,
// with the release's ServiceAccount, image and volumes, and labels the
// Deployment's selector does not match (its ReplicaSet would adopt it).
// Off by default, and left out by `helm template --skip-tests`.
func TestKnobHelmTest(t *testing.T) {
	out, err := renderSet(t)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(find(decodeObjects(t, out), "Pod")); n != 0 {
		t.Errorf("%d Pods by default, want no test hook", n)
	}
	set := []string{`helmTest.enabled=true`, `helmTest.cycles=2`, `helmTest.extraArgs=["--objective.latency=2s"]`,
		`etcd.clientCertsSecret="etcd-client"`, `serviceAccount.automountServiceAccountToken=false`, `priorityClassName="monitoring"`, `imagePullSecrets=["regcred"]`}
	out, err = renderSet(t, set...)
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeObjects(t, out)
	pod := one(t, objs, "Pod")
	dep := one(t, objs, "Deployment")
	if pod.GetAnnotations()["helm.sh/hook"] != "test" || pod.GetNamespace() != "monitoring" {
		t.Errorf("Pod %s/%s annotations %v, want a test hook in the release's namespace", pod.GetNamespace(), pod.GetName(), pod.GetAnnotations())
	}
	selector := field(t, dep, "spec", "selector", "matchLabels").(map[string]any)
	matches := true
	for k, v := range selector {
		matches = matches && pod.GetLabels()[k] == v
	}
	if matches {
		t.Errorf("test Pod labels %v match the Deployment's selector %v", pod.GetLabels(), selector)
	}
	spec := field(t, pod, "spec").(map[string]any)
	podOf := field(t, dep, "spec", "template", "spec").(map[string]any)
	for _, key := range []string{"serviceAccountName", "automountServiceAccountToken", "priorityClassName", "imagePullSecrets", "securityContext"} {
		if !equalJSON(spec[key], podOf[key]) {
			t.Errorf("test Pod %s %v, the Deployment's %v", key, spec[key], podOf[key])
		}
	}
	if spec["restartPolicy"] != "Never" {
		t.Errorf("restartPolicy %v, want Never: a test runs once", spec["restartPolicy"])
	}
	c := spec["containers"].([]any)[0].(map[string]any)
	exporter := podOf["containers"].([]any)[0].(map[string]any)
	if c["image"] != exporter["image"] {
		t.Errorf("test image %v, the exporter's %v", c["image"], exporter["image"])
	}
	want := []any{"check", "--config.file=/etc/watchprobe/config.yml", "--cycles=2", "--log.level=info", "--log.format=logfmt", "--marker.orphan-age=1h", "--agents.namespace=", "--objective.latency=2s"}
	if !equalJSON(c["args"], want) {
		t.Errorf("test args %v, want %v", c["args"], want)
	}
	for _, v := range []string{"config", "etcd-client-certs", "serviceaccount-token"} {
		if got, want := mountPath(c, v), mountPath(exporter, v); got == nil || got != want {
			t.Errorf("test Pod mounts %s at %v, the exporter at %v", v, got, want)
		}
	}
	var volumes, exporterVolumes []any
	volumes, exporterVolumes = spec["volumes"].([]any), podOf["volumes"].([]any)
	if !equalJSON(volumes, exporterVolumes) {
		t.Errorf("test Pod volumes %v, the exporter's %v", volumes, exporterVolumes)
	}

	args := []string{"template", "wp", chartDir, "--namespace", "monitoring", "--skip-tests"}
	for _, s := range set {
		args = append(args, "--set-json", s)
	}
	out, err = helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(find(decodeObjects(t, out), "Pod")); n != 0 {
		t.Errorf("%d Pods with --skip-tests", n)
	}
	if _, err := renderSet(t, `helmTest.cycles=0`); err == nil || !strings.Contains(err.Error(), "/helmTest/cycles") {
		t.Errorf("helmTest.cycles=0: %v, want the schema to refuse it", err)
	}
}
