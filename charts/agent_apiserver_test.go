package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// The agents' objects against a real apiserver: every one accepted under
// strict field validation (the PodMonitor by prometheus-operator's CRD),
// and, applied, their ServiceAccount's own token may do with Leases in
// the agents' namespace what an agent does (create, get, list, watch,
// patch) and get a Node, and nothing more: no delete, no other kind
// there, no Lease elsewhere, no list of Nodes. The exporter's
// ServiceAccount gets nothing there. The real agent, run with the
// DaemonSet's arguments and environment and that token, writes its Lease
// and takes its zone from its Node.
func TestAgentRBACOnRealAPIServer(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := c.AdminConfig()
	applyCRDs(t, ctx, admin)
	const release, agents = "monitoring", "watchprobe-agents"
	objs := renderValues(t, `
agent: {enabled: true}
podMonitor: {enabled: true}
networkPolicy:
  enabled: true
  from: [{namespaceSelector: {}}]
  egress: {enabled: true, apiServer: {cidrs: [10.0.0.0/28]}}
prometheusScrape: true
`)
	releaseNS := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": release}}}
	var namespaces, others []*unstructured.Unstructured
	for _, o := range append([]*unstructured.Unstructured{releaseNS}, objs...) {
		if o.GetKind() == "Namespace" {
			namespaces = append(namespaces, o)
		} else {
			others = append(others, o)
		}
	}
	apply(t, ctx, admin, namespaces)
	dyn := dynamic.NewForConfigOrDie(admin)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(admin)))
	agentKinds := map[string]bool{}
	for _, o := range agentObjects(others) {
		agentKinds[o.GetKind()] = true
		data, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		m := restMapping(t, mapper, o.GroupVersionKind())
		_, err = dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			FieldManager: "watchprobe-chart-test", Force: ptrTo(true), DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
		if err != nil {
			t.Errorf("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "DaemonSet", "PodMonitor", "NetworkPolicy"} {
		if !agentKinds[kind] {
			t.Errorf("no agent %s rendered to check", kind)
		}
	}
	apply(t, ctx, admin, others)

	agentCfg, err := c.ServiceAccountConfig(ctx, release, "wp-watchprobe-agent")
	if err != nil {
		t.Fatal(err)
	}
	agent := kubernetes.NewForConfigOrDie(agentCfg)
	leases := agent.CoordinationV1().Leases(agents)
	// The authorizer learns of the applied Role from its informer: the
	// denials below are judged once the Role's grant is seen.
	localcluster.Eventually(t, 60*time.Second, "the agents' Role in effect", func() bool {
		_, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{})
		return err == nil
	})
	if _, err := leases.Patch(ctx, "node-1", types.MergePatchType, []byte(`{"metadata":{"annotations":{"watchprobe.io/seq":"1"}}}`), metav1.PatchOptions{FieldManager: "watchprobe-agent"}); err != nil {
		t.Errorf("patch of its Lease: %v", err)
	}
	if _, err := leases.Get(ctx, "node-1", metav1.GetOptions{}); err != nil {
		t.Errorf("get of its Lease: %v", err)
	}
	if l, err := leases.List(ctx, metav1.ListOptions{Limit: 1}); err != nil || len(l.Items) != 1 {
		t.Errorf("list of the Leases: %v", err)
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-1"})
	if err != nil {
		t.Errorf("watch of its Lease: %v", err)
	} else {
		w.Stop()
	}
	localcluster.Eventually(t, 60*time.Second, "the agents' ClusterRole in effect", func() bool {
		_, err := agent.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err) // allowed, and there is no such Node
	})

	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	forbidden("delete of its Lease", leases.Delete(ctx, "node-1", metav1.DeleteOptions{}))
	_, err = agent.CoreV1().ConfigMaps(agents).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	forbidden("create of a ConfigMap in the agents' namespace", err)
	_, err = agent.CoreV1().Secrets(agents).List(ctx, metav1.ListOptions{})
	forbidden("list of Secrets in the agents' namespace", err)
	for _, ns := range []string{release, "watchprobe", "default"} {
		_, err = agent.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{})
		forbidden("create of a Lease in "+ns, err)
	}
	_, err = agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	forbidden("list of Nodes", err)
	_, err = agent.CoreV1().Pods(release).List(ctx, metav1.ListOptions{})
	forbidden("list of Pods in the release's namespace", err)

	t.Run("the agent runs with its rights", func(t *testing.T) {
		runAgent(t, ctx, admin, agentCfg, one(t, objs, "DaemonSet"))
	})

	exporterCfg, err := c.ServiceAccountConfig(ctx, release, "wp-watchprobe")
	if err != nil {
		t.Fatal(err)
	}
	_, err = kubernetes.NewForConfigOrDie(exporterCfg).CoordinationV1().Leases(agents).Get(ctx, "node-1", metav1.GetOptions{})
	forbidden("the exporter's get of an agent's Lease", err)
}

// runAgent builds watchprobe-agent and runs it as the DaemonSet's pod would
// on node node-a of zone zone-x (a Node it reads its zone from), with the
// rendered args and env but a free loopback port, authenticated as cfg;
// it waits for the agent's first write to show in its Lease and metrics.
func runAgent(t *testing.T, ctx context.Context, admin, cfg *rest.Config, ds *unstructured.Unstructured) {
	const node, zone = "node-a", "zone-x"
	if _, err := kubernetes.NewForConfigOrDie(admin).CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: node, Labels: map[string]string{"topology.kubernetes.io/zone": zone}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "watchprobe-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/watchprobe/watchprobe/cmd/agent").CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := localcluster.WriteKubeconfig(cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	c := at(t, ds, "spec.template.spec.containers.0").(map[string]any)
	if !equalJSON(c["command"], []any{"/bin/watchprobe-agent"}) {
		t.Fatalf("command %v", c["command"])
	}
	// exportertest.Start gives it a free loopback port of its own
	// instead of the pod's.
	var args []string
	for _, a := range c["args"].([]any) {
		if a == "--web.listen-address=:9918" {
			continue
		}
		args = append(args, a.(string))
	}
	if len(args) != len(c["args"].([]any))-1 {
		t.Fatalf("args %v lack --web.listen-address=:9918", c["args"])
	}
	// NODE_NAME, as the downward API sets it from spec.nodeName.
	env := []string{"NODE_NAME=" + node}
	var log bytes.Buffer
	p, err := exportertest.Start(bin, env, &log, append(args, "--kubeconfig="+kubeconfig)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("agent %v:\n%s", args, log.String())
		}
	})
	url := p.URL
	leases := kubernetes.NewForConfigOrDie(admin).CoordinationV1().Leases("watchprobe-agents")
	localcluster.Eventually(t, 60*time.Second, "the agent's first write in its Lease and its metrics", func() bool {
		l, err := leases.Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Annotations["watchprobe.io/agent-status"] == "" {
			return false
		}
		fams, err := exportertest.Scrape(url)
		if err != nil {
			return false
		}
		writes, _ := exportertest.Sum(fams, "watchprobe_agent_writes_total", map[string]string{"node": node, "zone": zone})
		return writes >= 1
	})
	localcluster.Eventually(t, 60*time.Second, "the agent ready (/-/ready)", func() bool {
		code, _, err := exportertest.Get(url+"/-/ready", "")
		return err == nil && code == 200
	})
	fams, err := exportertest.Scrape(url)
	if err != nil {
		t.Fatal(err)
	}
	if errs, found := exportertest.Sum(fams, "watchprobe_agent_write_errors_total", map[string]string{"node": node, "zone": zone}); !found || errs != 0 {
		t.Errorf("write errors %v (found %v), want 0: the Role lets the agent write", errs, found)
	}
}
