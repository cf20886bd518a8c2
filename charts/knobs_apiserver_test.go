package charts

import (
	"context"
	"encoding/json"
	"os/exec"
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

// knobValues turn on every knob of knobs_test.go the core API serves (the
// VerticalPodAutoscaler's CRD is the autoscaler project's, not here): a
// PriorityClass from extraManifests for priorityClassName, both network
// policies, the token mounted by the chart, the reloader with its
// resources, and the helm test hook.
const knobValues = `
probes:
  - {name: knobs, namespace: knobs}
priorityClassName: watchprobe-knobs
extraManifests:
  - apiVersion: scheduling.k8s.io/v1
    kind: PriorityClass
    metadata: {name: '{{ .Values.priorityClassName }}'}
    value: 1000000
    description: Monitoring above the workloads it watches.
imagePullSecrets: [regcred, {name: other}]
serviceAccount:
  automountServiceAccountToken: false
networkPolicy:
  enabled: true
  from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: prometheus}}}]
  egress:
    enabled: true
    apiServer: {cidrs: [10.0.0.0/28, "fd00::/64"]}
    otlpTo: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: observability}}}]
tracing:
  otlp: {endpoint: "http://otel-collector.observability:4317"}
configReloader:
  enabled: true
helmTest:
  enabled: true
  cycles: 2
  extraArgs: [--objective.latency=5s]
`

// The knobs' objects are what the real apiserver accepts with strict field
// validation, the test hook's Pod included (dry run: nothing here runs
// pods), and the hook's command passes against that apiserver: the
// exporter binary, run with the Pod's args and a token of the chart's
// ServiceAccount, checks the release's probe through the chart's RBAC.
func TestKnobsAgainstRealAPIServer(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	cfg := c.AdminConfig()
	dyn := dynamic.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))
	objs := renderValues(t, knobValues)
	// As `helm install --namespace monitoring --create-namespace` would,
	// then the chart's namespaces, then the rest; the hook's Pod last.
	ordered := []*unstructured.Unstructured{{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "monitoring"}}}}
	var others []*unstructured.Unstructured
	var testPod *unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "Pod":
			testPod = o
		case "Namespace":
			ordered = append(ordered, o)
		default:
			others = append(others, o)
		}
	}
	if testPod == nil {
		t.Fatal("no test hook Pod rendered")
	}
	ordered = append(ordered, others...)
	strictApply := func(o *unstructured.Unstructured, dryRun bool) error {
		m := restMapping(t, mapper, o.GroupVersionKind())
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if ns := o.GetNamespace(); ns != "" {
			r = dyn.Resource(m.Resource).Namespace(ns)
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		opts := metav1.PatchOptions{FieldManager: "watchprobe-chart-test", Force: ptrTo(true), FieldValidation: "Strict"}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = r.Patch(ctx, o.GetName(), types.ApplyPatchType, data, opts)
		return err
	}
	for _, o := range ordered {
		if err := strictApply(o, false); err != nil {
			t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	if err := strictApply(testPod, true); err != nil {
		t.Errorf("the test hook's Pod: %v", err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// The hook's command, as the Pod runs it, outside a pod: its config
	// file from the rendered ConfigMap, the ServiceAccount's token by a
	// kubeconfig instead of the mounted one.
	saCfg, err := c.ServiceAccountConfig(ctx, "monitoring", "wp-watchprobe")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := localcluster.WriteKubeconfig(saCfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	config := checkableConfig(t, renderedConfig(t, objs, "wp-watchprobe"))
	var args []string
	for _, a := range field(t, testPod, "spec", "containers").([]any)[0].(map[string]any)["args"].([]any) {
		a := a.(string)
		if strings.HasPrefix(a, "--config.file=") {
			a = "--config.file=" + config
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+kubeconfig)
	out, err := exec.Command(buildExporter(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("watchprobe %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if !strings.Contains(string(out), "knobs") {
		t.Errorf("the check's report does not name probe knobs:\n%s", out)
	}
	t.Logf("watchprobe %s:\n%s", strings.Join(args, " "), out)
}
