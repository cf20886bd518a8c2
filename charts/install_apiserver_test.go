package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

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
	// forbidden takes the results of a call of sa's that the chart's RBAC
	// must refuse, what names it in the error.
	forbidden := func(what string) func(any, error) {
		return func(_ any, err error) {
			t.Helper()
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: %v, want Forbidden", what, err)
			}
		}
	}
	for _, ns := range []string{"default", "kube-system", release} {
		forbidden(fmt.Sprintf("listing ConfigMaps in %s", ns))(sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}))
		forbidden(fmt.Sprintf("listing Secrets in %s", ns))(sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}))
	}
	forbidden("reading a Secret in a marker namespace")(sa.CoreV1().Secrets("probes-a").Get(ctx, "anything", metav1.GetOptions{}))
	forbidden("listing Leases where no probe writes them")(sa.CoordinationV1().Leases("probes-a").List(ctx, metav1.ListOptions{}))
	forbidden("listing Deployments where no probe times controllers")(sa.AppsV1().Deployments("probes-a").List(ctx, metav1.ListOptions{}))
	forbidden("listing DaemonSets beside the controller markers")(sa.AppsV1().DaemonSets("probes-b").List(ctx, metav1.ListOptions{}))

	// A probe with `apiservers: discover` adds a Role in default with which
	// the same ServiceAccount reads and watches the kubernetes Service's
	// EndpointSlices, and nothing else there or elsewhere.
	forbidden("listing EndpointSlices while no probe discovers apiservers")(sa.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{}))
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
	forbidden("listing EndpointSlices in kube-system")(sa.DiscoveryV1().EndpointSlices("kube-system").List(ctx, metav1.ListOptions{}))
	forbidden("listing Secrets in default with the discovery Role")(sa.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{}))
	forbidden("listing Endpoints in default (only EndpointSlices are granted)")(sa.CoreV1().Endpoints("default").List(ctx, metav1.ListOptions{}))

	// flowControl (on in the all-enabled values): the apiserver sends the
	// ServiceAccount's requests, resources and discovery alike, to the
	// chart's priority level, as its response headers say.
	plc, err := kubernetes.NewForConfigOrDie(admin).FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, "wp-watchprobe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(saCfg)
	if err != nil {
		t.Fatal(err)
	}
	levelOf := func(path string) string {
		resp, err := hc.Get(saCfg.Host + path)
		if err != nil {
			return err.Error()
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)
	}
	for _, path := range []string{"/api/v1/namespaces/probes-a/configmaps?limit=1", "/apis"} {
		deadline = time.Now().Add(30 * time.Second) // the apiserver's APF controller applies new objects in the background
		for got := levelOf(path); got != string(plc.UID); got = levelOf(path) {
			if time.Now().After(deadline) {
				t.Fatalf("GET %s as the chart's ServiceAccount went to priority level %q, want the chart's (%s)", path, got, plc.UID)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// helm install, upgrade and uninstall against the real apiserver: a marker
// namespace that exists already (with objects of its own), listed in
// markerNamespaces.existing, is used, not taken over, so the install does
// not fail on Helm's ownership check; one the chart owns stays in the
// release on upgrade; uninstall leaves both, with what they hold. What
// helm install applied is what helm template renders without a cluster,
// as Argo CD and Flux render it.
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
	if err := os.WriteFile(values, []byte("probes:\n  - {name: a, namespace: existing}\n  - {name: b, namespace: created}\nmarkerNamespaces: {existing: [existing]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--kubeconfig", kubeconfig, "--namespace", "monitoring", "-f", values}
	if _, err := helm(t, append([]string{"install", "wp", chartDir, "--create-namespace"}, common...)...); err != nil {
		t.Fatalf("installing beside an existing marker namespace: %v", err)
	}
	installed, err := helm(t, "get", "manifest", "wp", "--kubeconfig", kubeconfig, "--namespace", "monitoring")
	if err != nil {
		t.Fatal(err)
	}
	// No kubeconfig: nothing to look up, as a GitOps tool renders.
	rendered, err := helm(t, "template", "wp", chartDir, "--namespace", "monitoring", "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(installed) != strings.TrimSpace(rendered) {
		t.Errorf("helm install applied what helm template does not render:\n%s", lineDiff(rendered, installed))
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

// applyCRDs installs the ServiceMonitor, PodMonitor, PrometheusRule and
// AlertmanagerConfig CRDs from the pinned prometheus-operator module.
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
	for _, name := range []string{"servicemonitors", "podmonitors", "prometheusrules", "alertmanagerconfigs"} {
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
		m := restMapping(t, mapper, gvk)
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
	bin, err := exportertest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runExporter builds and starts the exporter and returns its base URL.
func runExporter(t *testing.T, args ...string) string {
	t.Helper()
	bin := buildExporter(t)
	addr, err := exportertest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
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
	// With the node test's credentials, which an exporter without basic
	// auth ignores.
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return ""
	}
	req.SetBasicAuth(scrapeUser, scrapePassword)
	resp, err := http.DefaultClient.Do(req)
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
	ca, cert, key := localcluster.CertificateForTest(t, "watchprobe-test")
	dir := t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": cert, "ca.crt": ca, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return strings.ReplaceAll(config, "/etc/watchprobe/etcd/", dir+"/")
}

// restMapping maps gvk to its resource, discovering again once: a CRD
// applied a moment ago may not be in the cached discovery yet.
func restMapping(t *testing.T, mapper *restmapper.DeferredDiscoveryRESTMapper, gvk schema.GroupVersionKind) *meta.RESTMapping {
	t.Helper()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		mapper.Reset()
		if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
	}
	return m
}
