package charts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

const (
	installRelease   = "wp"
	installNamespace = "monitoring"
	exporterImage    = "ghcr.io/watchprobe/watchprobe"
	// The reloader's image, built from the module hack/tools/reloader pins.
	reloaderRepository = "localhost/watchprobe/prometheus-config-reloader"
	reloaderTag        = "v0.85.0"
)

// installValues are what the test sets beyond the chart's defaults: the
// image it imported instead of pulling, the ServiceMonitor, PrometheusRule
// and dashboard a monitoring stack would pick up, a scrape interval short
// enough for rates within a minute, WatchprobeMarkersPiling without its
// `for`, so the injected fault's alert needs no half-hour wait, and one
// replica: the test follows one pod through upgrade, reload and rollback,
// and the node is one vantage point however many replicas it runs. The
// helm test hook's check holds its events to the probe's deadline, not
// check's 1s default: a later event is missed, a real failure, while
// this shared machine's load alone may delay one past a second. And it
// tolerates that load as the other tests' exporters do (loadTolerant in
// cmd/exporter): with the default threshold its self-monitor rightly found
// itself starved in every cycle here (load 4 on two cores, the pod's 100m
// request), and a check that judges no cycle fails; no CPU limit applies,
// so nothing else counts as starvation.
const installValues = `
replicaCount: 1
helmTest:
  enabled: true
  cycles: 2
  extraArgs: [--objective.latency=5s, --exporter.starved-threshold=30s]
image:
  pullPolicy: Never
serviceMonitor:
  enabled: true
  interval: 5s
prometheusRule:
  enabled: true
  alerts:
    markersPiling:
      for: 0s
grafanaDashboard:
  enabled: true
`

// authValues are the first install's: the exporter behind the chart's own
// basic-auth web config (a Secret the test makes), scraped through the
// ServiceMonitor's basicAuth, with TCP kubelet probes, which need no
// credentials. Upgrades without them return to plain HTTP, for the
// reloader, which cannot authenticate; the rollback to the first revision
// brings them back.
const authValues = `
webConfig:
  existingSecret: scrape-web-config
livenessProbe:
  httpGet: null
  tcpSocket: {port: http-metrics}
readinessProbe:
  httpGet: null
  tcpSocket: {port: http-metrics}
serviceMonitor:
  basicAuth:
    username: {name: scrape-credentials, key: username}
    password: {name: scrape-credentials, key: password}
`

// The credentials of authValues' web config. Every scrape the tests make
// sends them: an exporter without basic auth ignores them.
const scrapeUser, scrapePassword = "prometheus", "not-a-secret-outside-this-test"

// install is the chart installed on the local node.
type install struct {
	t          *testing.T
	node       *localcluster.Node
	client     kubernetes.Interface
	dyn        dynamic.Interface
	kubeconfig string
	values     string
	dir        string
}

// The chart on a real node, as users run it: installed with helm into a
// namespace that enforces the restricted Pod Security Standard, its pod
// Running and Ready, reaching the apiserver by in-cluster config through
// the kubernetes Service and kube-proxy, and observing its markers on every
// path of the default probe; scraped by a real Prometheus that discovers it
// as the chart's ServiceMonitor says, with the chart's PrometheusRule, which
// fires the matching alert through a real Alertmanager when its writes are
// forbidden; the chart's dashboard answering for its series; its memory,
// measured on the node while scraped, within its resources; `helm test`
// passing, its `watchprobe check` Pod run by the kubelet. Then its
// lifecycle: an upgrade with a changed probe rolls the pod and the old pod
// deletes its markers on SIGTERM; a rollback; the config-reloader sidecar
// applying a changed probe list without a restart; and an uninstall that
// leaves no marker, no Role, no object of the release.
func TestInstallOnNode(t *testing.T) {
	ctx := context.Background()
	node := localcluster.StartNodeForTest(t, localcluster.Options{})
	in := &install{
		t: t, node: node, dir: t.TempDir(),
		client: kubernetes.NewForConfigOrDie(node.AdminConfig()),
		dyn:    dynamic.NewForConfigOrDie(node.AdminConfig()),
	}
	in.kubeconfig = filepath.Join(in.dir, "kubeconfig")
	if err := node.WriteKubeconfig(in.kubeconfig); err != nil {
		t.Fatal(err)
	}
	in.values = localcluster.WriteFileForTest(t, in.dir, "values.yaml", installValues)
	in.importImages(ctx)
	applyCRDs(t, ctx, node.AdminConfig())
	if _, err := in.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   installNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The namespace does enforce: a pod without the chart's security
	// context is refused.
	_, err := in.client.CoreV1().Pods(installNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unrestricted"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: exporterImage + ":" + chartAppVersion(t)}}},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("a pod without a security context in %s: %v, want Forbidden by the restricted Pod Security Standard", installNamespace, err)
	}
	in.createScrapeSecrets(ctx)
	in.helm("install", installRelease, chartDir, "--namespace", installNamespace, "-f", in.values,
		"-f", localcluster.WriteFileForTest(t, in.dir, "auth-values.yaml", authValues), "--wait", "--timeout", "5m")
	pod := in.onlyPod(ctx)
	in.checkMarkersObserved(ctx, pod, "default")
	in.checkInClusterConfig(ctx, pod)
	in.checkHelmTest(ctx)
	in.checkMonitoring(ctx, pod)
	in.checkUpgradeRollsAndCleansUp(ctx, pod)
	in.checkReloader(ctx)
	in.checkUninstallLeavesNothing(ctx)
}

// checkHelmTest: `helm test` runs the chart's test hook, `watchprobe
// check` in a Pod of the release's image, ServiceAccount and config, on
// the node: it passes, its Pod is deleted as its hook-delete-policy says,
// and the check leaves none of its markers behind.
func (in *install) checkHelmTest(ctx context.Context) {
	t := in.t
	t.Helper()
	out := in.helm("test", installRelease, "--namespace", installNamespace, "--timeout", "5m")
	if !regexp.MustCompile(`(?m)^TEST SUITE:\s+`+installRelease+`-watchprobe-test$`).MatchString(out) || !regexp.MustCompile(`(?m)^Phase:\s+Succeeded$`).MatchString(out) {
		t.Errorf("helm test ran no passing wp-watchprobe-test:\n%s", out)
	}
	if _, err := in.client.CoreV1().Pods(installNamespace).Get(ctx, installRelease+"-watchprobe-test", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the passed test's Pod: %v, want it deleted (hook-succeeded)", err)
	}
	cms, err := in.client.CoreV1().ConfigMaps("watchprobe").List(ctx, metav1.ListOptions{LabelSelector: probe.LabelManagedBy + "=" + probe.ManagedByValue})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Labels[probe.LabelReplica], "check-") {
			t.Errorf("marker %s of the test's check left behind", cm.Name)
		}
	}
}

// createScrapeSecrets makes authValues' Secrets: the exporter's web config
// with the scrape user's bcrypt hash, and the ServiceMonitor's credentials.
func (in *install) createScrapeSecrets(ctx context.Context) {
	t := in.t
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(scrapePassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "scrape-web-config"}, StringData: map[string]string{
			"web-config.yml": fmt.Sprintf("basic_auth_users:\n  %s: %q\n", scrapeUser, hash)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "scrape-credentials"}, StringData: map[string]string{"username": scrapeUser, "password": scrapePassword}},
	} {
		if _, err := in.client.CoreV1().Secrets(installNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// secretKey reads one key of a Secret in the install's namespace, as
// prometheus-operator reads a ServiceMonitor's SecretKeySelector.
func (in *install) secretKey(ctx context.Context, name, key string) string {
	in.t.Helper()
	s, err := in.client.CoreV1().Secrets(installNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		in.t.Fatal(err)
	}
	return string(s.Data[key])
}

// helm runs helm against the node's cluster.
func (in *install) helm(args ...string) string {
	in.t.Helper()
	out, err := helm(in.t, append(args, "--kubeconfig", in.kubeconfig)...)
	if err != nil {
		in.t.Fatalf("%v\n%s", err, in.podLogs())
	}
	return out
}

// importImages builds the exporter's image as `make image` does (for this
// machine's platform only) and the reloader's from bin/, and imports both
// into the node.
func (in *install) importImages(ctx context.Context) {
	t := in.t
	layout := filepath.Join(in.dir, "image")
	cmd := exec.Command("go", "run", "../hack/image", "-root", "..", "-o", layout,
		"-version", chartAppVersion(t), "-revision", "install-test", "-repository", exporterImage,
		"-platforms", runtime.GOOS+"/"+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the image with hack/image: %v\n%s", err, out)
	}
	img, err := localcluster.LayoutImage(layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.node.ImportImage(ctx, exporterImage+":"+chartAppVersion(t), img); err != nil {
		t.Fatal(err)
	}
	reloader, err := localcluster.BinaryImage(localcluster.ToolForTest(t, "prometheus-config-reloader"))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.node.ImportImage(ctx, reloaderRepository+":"+reloaderTag, reloader); err != nil {
		t.Fatal(err)
	}
}

var releasePods = metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + installRelease}

// onlyPod waits for the release's one pod to be Running and Ready, with no
// other pod of the release left, and returns it.
func (in *install) onlyPod(ctx context.Context) *corev1.Pod {
	in.t.Helper()
	var pod *corev1.Pod
	var last string
	localcluster.EventuallyShows(in.t, 3*time.Minute, "one pod of the release, Running and Ready", func() bool {
		pods, err := in.client.CoreV1().Pods(installNamespace).List(ctx, releasePods)
		if err != nil {
			last = err.Error()
			return false
		}
		last = ""
		for _, p := range pods.Items {
			last += fmt.Sprintf("%s %s %v; ", p.Name, p.Status.Phase, p.Status.Conditions)
		}
		if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning || pods.Items[0].DeletionTimestamp != nil {
			return false
		}
		for _, c := range pods.Items[0].Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				pod = &pods.Items[0]
				return true
			}
		}
		return false
	}, func() string { return last + "\n" + in.podLogs() })
	return pod
}

// podLogs is the tail of every container log on the node, to explain a
// failure.
func (in *install) podLogs() string {
	var b strings.Builder
	_ = filepath.WalkDir(filepath.Join(in.node.Dir(), "pod-logs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, installNamespace+"_") {
			data, _ := os.ReadFile(p)
			if len(data) > 3000 {
				data = data[len(data)-3000:]
			}
			fmt.Fprintf(&b, "--- %s:\n%s\n", p, data)
		}
		return nil
	})
	return b.String()
}

// metricsURL is the exporter's /metrics through the pod's address.
func metricsURL(pod *corev1.Pod) string {
	return "http://" + pod.Status.PodIP + ":9917"
}

// checkMarkersObserved waits until the pod's probe succeeds and has
// observed marker events on every path of the chart's default probe, read
// from the pod's address and through the Service's ClusterIP, which only
// kube-proxy's rules lead to the pod.
func (in *install) checkMarkersObserved(ctx context.Context, pod *corev1.Pod, probeName string) {
	t := in.t
	t.Helper()
	svc, err := in.client.CoreV1().Services(installNamespace).Get(ctx, installRelease+"-watchprobe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range chartDefaultProbe(t)["paths"].([]any) {
		paths = append(paths, p.(string))
	}
	for _, url := range []string{metricsURL(pod), "http://" + svc.Spec.ClusterIP + ":9917"} {
		var body string
		var err error
		localcluster.EventuallyShows(t, 2*time.Minute, "markers observed on every path at "+url, func() bool {
			if body, err = scrapeOrErr(url); err != nil {
				return false
			}
			if !strings.Contains(body, fmt.Sprintf("watchprobe_probe_success{probe=%q} 1", probeName)) {
				return false
			}
			for _, path := range paths {
				if !regexp.MustCompile(`(?m)^watchprobe_events_observed_total\{[^}]*path="` + path + `"[^}]*probe="` + probeName + `"[^}]*\} [1-9]`).MatchString(body) {
					return false
				}
			}
			return true
		}, func() string {
			return fmt.Sprintf("%v\n%s\n%s", err, grep(body, "watchprobe_probe_success", "watchprobe_events_observed_total", "watchprobe_write_errors_total"), in.podLogs())
		})
	}
}

// checkInClusterConfig: the exporter reaches the apiserver by in-cluster
// config, through the kubernetes Service and kube-proxy. It is given no
// kubeconfig, its environment names the Service's ClusterIP, and the
// machine's connection tracking holds its connection to that ClusterIP,
// which kube-proxy's rules translated to the apiserver's endpoint.
func (in *install) checkInClusterConfig(ctx context.Context, pod *corev1.Pod) {
	t := in.t
	t.Helper()
	svc, err := in.client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eps, err := in.client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=kubernetes"})
	if err != nil {
		t.Fatal(err)
	}
	if len(eps.Items) != 1 || len(eps.Items[0].Endpoints) != 1 || len(eps.Items[0].Endpoints[0].Addresses) != 1 || len(eps.Items[0].Ports) != 1 {
		t.Fatalf("the kubernetes Service's EndpointSlices: %+v, want the one apiserver", eps.Items)
	}
	apiserver, apiserverPort := eps.Items[0].Endpoints[0].Addresses[0], *eps.Items[0].Ports[0].Port
	port := svc.Spec.Ports[0].Port

	for _, c := range pod.Spec.Containers {
		if c.Name == "watchprobe" && slices.ContainsFunc(append(c.Command, c.Args...), func(a string) bool { return strings.HasPrefix(a, "--kubeconfig") }) {
			t.Errorf("the exporter is given a kubeconfig: %q", c.Args)
		}
	}
	env := in.containerStats(pod).env
	for _, want := range []string{fmt.Sprintf("KUBERNETES_SERVICE_HOST=%s", svc.Spec.ClusterIP), fmt.Sprintf("KUBERNETES_SERVICE_PORT=%d", port)} {
		if !slices.Contains(env, want) {
			t.Errorf("the exporter's environment lacks %s: %q", want, env)
		}
	}
	if slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "KUBECONFIG=") }) {
		t.Errorf("the exporter's environment sets KUBECONFIG: %q", env)
	}

	// An established connection from the pod to the ClusterIP, answered
	// by the apiserver's own address and port.
	out, err := exec.Command("conntrack", "-L", "-p", "tcp", "--orig-src", pod.Status.PodIP, "--orig-dst", svc.Spec.ClusterIP, "--dport", strconv.Itoa(int(port))).Output()
	if err != nil {
		t.Fatalf("conntrack -L: %v", err)
	}
	reply := regexp.MustCompile(`ESTABLISHED .* src=` + regexp.QuoteMeta(apiserver) + ` dst=\S+ sport=` + strconv.Itoa(int(apiserverPort)) + ` `)
	found := slices.ContainsFunc(strings.Split(string(out), "\n"), reply.MatchString)
	if !found {
		t.Errorf("no established connection from the pod %s to the kubernetes Service %s:%d answered by the apiserver %s:%d; conntrack:\n%s",
			pod.Status.PodIP, svc.Spec.ClusterIP, port, apiserver, apiserverPort, out)
	}
}

// probes writes a values file whose probes are the chart's default probe
// under each of names, and returns its path.
func (in *install) probes(names ...string) string {
	in.t.Helper()
	var probes []map[string]any
	for _, name := range names {
		p := chartDefaultProbe(in.t)
		p["name"] = name
		probes = append(probes, p)
	}
	data, err := yaml.Marshal(map[string]any{"probes": probes})
	if err != nil {
		in.t.Fatal(err)
	}
	return localcluster.WriteFileForTest(in.t, in.dir, "probes-"+strings.Join(names, "-")+".yaml", string(data))
}

// scrapeOrErr is scrape that says why it got nothing.
func scrapeOrErr(url string) (string, error) {
	client := http.Client{Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.SetBasicAuth(scrapeUser, scrapePassword)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return string(b), err
}

// chartDefaultProbe is the first probe of the chart's default values.
func chartDefaultProbe(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Probes []map[string]any }
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v.Probes[0]
}

var (
	serviceMonitorGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
	prometheusRuleGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}
)

// checkMonitoring runs Prometheus with the scrape config prometheus-operator
// makes of the release's ServiceMonitor and the rules of its
// PrometheusRule, and Alertmanager; checks that exactly the pod is scraped
// (a decoy Service in front of the same pod, without the chart's labels,
// is discovered and dropped), that the dashboard's queries have data for
// it, and that forbidding the deletes of its markers fires
// WatchprobeMarkersPiling through Alertmanager. The fault stays: the
// markers it leaves are for the upgrade to clean up.
func (in *install) checkMonitoring(ctx context.Context, pod *corev1.Pod) {
	t := in.t
	t.Helper()
	sm, err := in.dyn.Resource(serviceMonitorGVR).Namespace(installNamespace).Get(ctx, installRelease+"-watchprobe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rule, err := in.dyn.Resource(prometheusRuleGVR).Namespace(installNamespace).Get(ctx, installRelease+"-watchprobe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	rulesYAML, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := localcluster.WriteFileForTest(t, in.dir, "rules.yml", string(rulesYAML))

	// A Service that selects the pod but is no Service of the chart.
	if _, err := in.client.CoreV1().Services(installNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "decoy", Labels: map[string]string{"app.kubernetes.io/name": "decoy"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app.kubernetes.io/instance": installRelease},
			Ports:    []corev1.ServicePort{{Name: "http-metrics", Port: 9917, TargetPort: intstr.FromString("http-metrics")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	amAddr, hook := localcluster.AlertmanagerForTest(t, in.dir)
	// The chart's web config asks for the credentials: without them the
	// exporter refuses the scrape.
	if resp, err := http.Get(metricsURL(pod) + "/metrics"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a scrape without credentials: %v %v, want 401 Unauthorized", resp, err)
	} else {
		resp.Body.Close()
	}
	scrape := scrapeConfigFor(t, sm, in.kubeconfig, func(name, key string) string { return in.secretKey(ctx, name, key) })
	prom := localcluster.PrometheusForTest(t, in.dir, []string{rulesFile}, amAddr, scrape)

	// The pod, and nothing else, is a target: once discovery has seen the
	// decoy (and dropped it), the one active target is the pod's.
	var targets promTargets
	localcluster.EventuallyShows(t, 2*time.Minute, "Prometheus discovers the pod, and the decoy Service, which it drops", func() bool {
		targets = readTargets(t, prom)
		return len(targets.Active) > 0 && targets.Active[0].Health == "up" && slices.ContainsFunc(targets.Dropped, func(d promTarget) bool {
			return d.DiscoveredLabels["__meta_kubernetes_service_name"] == "decoy"
		})
	}, func() string { return fmt.Sprintf("%+v", targets) })
	if len(targets.Active) != 1 {
		t.Fatalf("%d active targets, want the release's pod only: %+v", len(targets.Active), targets.Active)
	}
	target := targets.Active[0].Labels
	if target["pod"] != pod.Name || target["service"] != installRelease+"-watchprobe" || target["namespace"] != installNamespace {
		t.Errorf("target labels %v, want pod %s of Service %s-watchprobe in %s", target, pod.Name, installRelease, installNamespace)
	}
	in.checkDashboard(ctx, prom, target["job"], target["instance"])
	if firing := localcluster.PromQuery(t, prom, `ALERTS{alertstate="firing"}`); len(firing) > 0 {
		t.Errorf("alerts firing on a healthy install: %s", firing)
	}
	// Sized as it runs: the default probe, scraped.
	in.measure(ctx, pod)

	if err := in.client.CoreV1().Services(installNamespace).Delete(ctx, "decoy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The fault: the exporter may no longer delete its markers.
	in.setMarkerVerbs(ctx, func(verbs []string) []string {
		return slices.DeleteFunc(verbs, func(v string) bool { return v == "delete" })
	})
	alert := hook.Wait(t, 3*time.Minute, "WatchprobeMarkersPiling")
	if alert.Labels["probe"] != "default" || alert.Labels["pod"] != pod.Name || alert.Labels["severity"] != "warning" || alert.Annotations["runbook_url"] == "" {
		t.Errorf("delivered alert %+v, want probe default of pod %s, severity warning, a runbook", alert, pod.Name)
	}
	if len(in.markers(ctx, pod.Name)) == 0 {
		t.Fatal("no marker left while the exporter may not delete them")
	}
}

// setMarkerVerbs changes the verbs of the release's Role in the marker
// namespace.
func (in *install) setMarkerVerbs(ctx context.Context, change func([]string) []string) {
	in.t.Helper()
	roles := in.client.RbacV1().Roles("watchprobe")
	role, err := roles.Get(ctx, installRelease+"-watchprobe", metav1.GetOptions{})
	if err != nil {
		in.t.Fatal(err)
	}
	for i := range role.Rules {
		role.Rules[i].Verbs = change(role.Rules[i].Verbs)
	}
	if _, err := roles.Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		in.t.Fatal(err)
	}
}

type promTarget struct {
	Labels, DiscoveredLabels map[string]string
	Health                   string
}

type promTargets struct {
	Active  []promTarget `json:"activeTargets"`
	Dropped []promTarget `json:"droppedTargets"`
}

// readTargets reads Prometheus's targets, active and dropped.
func readTargets(t *testing.T, prom string) promTargets {
	t.Helper()
	resp, err := http.Get(prom + "/api/v1/targets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct{ Data promTargets }
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Data
}

// scrapeConfigFor is the scrape config prometheus-operator (v0.85, role
// endpoints) generates for a ServiceMonitor, with the admin kubeconfig for
// discovery. It fails on any selector form it does not translate, so that
// it never selects more or less than the ServiceMonitor.
func scrapeConfigFor(t *testing.T, sm *unstructured.Unstructured, kubeconfig string, secret func(name, key string) string) string {
	t.Helper()
	var spec struct {
		JobLabel string `json:"jobLabel"`
		Selector struct {
			MatchLabels      map[string]string `json:"matchLabels"`
			MatchExpressions []any             `json:"matchExpressions"`
		} `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any"`
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port              string           `json:"port"`
			Path              string           `json:"path"`
			Scheme            string           `json:"scheme"`
			Interval          string           `json:"interval"`
			Relabelings       []map[string]any `json:"relabelings"`
			MetricRelabelings []map[string]any `json:"metricRelabelings"`
			BasicAuth         *struct {
				Username struct{ Name, Key string } `json:"username"`
				Password struct{ Name, Key string } `json:"password"`
			} `json:"basicAuth"`
		} `json:"endpoints"`
	}
	data, err := json.Marshal(sm.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		t.Fatalf("the ServiceMonitor has a field this test does not translate into a scrape config: %v\n%s", err, data)
	}
	if len(spec.Selector.MatchExpressions) > 0 || spec.NamespaceSelector.Any || len(spec.NamespaceSelector.MatchNames) == 0 || len(spec.Endpoints) != 1 {
		t.Fatalf("the ServiceMonitor's selection is not one this test translates: %s", data)
	}
	ep := spec.Endpoints[0]
	sanitize := regexp.MustCompile(`[^a-zA-Z0-9_]`)
	relabel := []map[string]any{}
	keys := make([]string, 0, len(spec.Selector.MatchLabels))
	for k := range spec.Selector.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		name := sanitize.ReplaceAllString(k, "_")
		relabel = append(relabel, map[string]any{"action": "keep",
			"source_labels": []string{"__meta_kubernetes_service_label_" + name, "__meta_kubernetes_service_labelpresent_" + name},
			"regex":         "(" + regexp.QuoteMeta(spec.Selector.MatchLabels[k]) + ");true"})
	}
	relabel = append(relabel,
		map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_endpoint_port_name"}, "regex": regexp.QuoteMeta(ep.Port)},
		map[string]any{"source_labels": []string{"__meta_kubernetes_endpoint_address_target_kind", "__meta_kubernetes_endpoint_address_target_name"}, "regex": "Pod;(.*)", "target_label": "pod", "replacement": "${1}"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_pod_container_name"}, "target_label": "container"},
		map[string]any{"action": "drop", "source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "(Failed|Succeeded)"},
		map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job", "replacement": "${1}"},
	)
	if spec.JobLabel != "" {
		relabel = append(relabel, map[string]any{"source_labels": []string{"__meta_kubernetes_service_label_" + sanitize.ReplaceAllString(spec.JobLabel, "_")},
			"target_label": "job", "regex": "(.+)", "replacement": "${1}"})
	}
	relabel = append(relabel, map[string]any{"target_label": "endpoint", "replacement": ep.Port})
	relabel = append(relabel, snakeCase(ep.Relabelings)...)
	job := map[string]any{
		"job_name":        fmt.Sprintf("serviceMonitor/%s/%s/0", sm.GetNamespace(), sm.GetName()),
		"honor_labels":    false,
		"metrics_path":    ep.Path,
		"scheme":          ep.Scheme,
		"scrape_interval": ep.Interval,
		"kubernetes_sd_configs": []map[string]any{{
			"role": "endpoints", "kubeconfig_file": kubeconfig,
			"namespaces": map[string]any{"names": spec.NamespaceSelector.MatchNames},
		}},
		"relabel_configs":        relabel,
		"metric_relabel_configs": snakeCase(ep.MetricRelabelings),
	}
	// prometheus-operator reads the Secret's keys into the scrape config.
	if a := ep.BasicAuth; a != nil {
		job["basic_auth"] = map[string]any{"username": secret(a.Username.Name, a.Username.Key), "password": secret(a.Password.Name, a.Password.Key)}
	}
	out, err := yaml.Marshal([]any{job})
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// snakeCase turns prometheus-operator's relabel configs (sourceLabels,
// targetLabel) into Prometheus's (source_labels, target_label).
func snakeCase(configs []map[string]any) []map[string]any {
	upper := regexp.MustCompile(`[A-Z]`)
	out := []map[string]any{}
	for _, c := range configs {
		m := map[string]any{}
		for k, v := range c {
			key := upper.ReplaceAllStringFunc(k, func(s string) string { return "_" + strings.ToLower(s) })
			if key == "action" {
				v = strings.ToLower(fmt.Sprint(v))
			}
			m[key] = v
		}
		out = append(out, m)
	}
	return out
}

// checkDashboard runs every query of the dashboard the chart ships on
// Prometheus, for the pod's series (its job and instance), and waits
// until each returns data, except queries that select metrics Prometheus
// holds none of for the pod, or paths the default probe does not measure
// (the etcd and apiserver paths, off by default).
func (in *install) checkDashboard(ctx context.Context, prom, job, instance string) {
	t := in.t
	t.Helper()
	cm, err := in.client.CoreV1().ConfigMaps(installNamespace).Get(ctx, installRelease+"-watchprobe-dashboard", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(cm.Data["watchprobe.json"]), &dash); err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$__rate_interval", "30s", "$__range", "1m",
		"$cluster", ".*", "$job", job, "$pod", ".*", "$probe", "default", "$path", ".*")
	var paths []string
	for _, p := range chartDefaultProbe(t)["paths"].([]any) {
		paths = append(paths, p.(string))
	}
	// Metric names Prometheus holds for the pod, waited for until every
	// recorded one the dashboard selects is there: the chart's recording
	// rules run on the default probe's series, so their absence is a
	// failure, not a query to skip.
	var recorded []string
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			for _, n := range selectedMetrics(t, vars.Replace(q.Expr)) {
				if strings.Contains(n, ":") && !slices.Contains(recorded, n) {
					recorded = append(recorded, n)
				}
			}
		}
	}
	var names []string
	localcluster.EventuallyShows(t, 3*time.Minute, "every recorded series the dashboard selects, for the pod", func() bool {
		names = names[:0]
		for _, raw := range localcluster.PromQuery(t, prom, fmt.Sprintf(`count by (__name__) ({job=%q})`, job)) {
			var s struct{ Metric map[string]string }
			if err := json.Unmarshal(raw, &s); err == nil {
				names = append(names, s.Metric["__name__"])
			}
		}
		return !slices.ContainsFunc(recorded, func(n string) bool { return !slices.Contains(names, n) })
	}, func() string { return fmt.Sprintf("recorded %v; held %v", recorded, names) })
	// A panel's title, then one of its queries.
	var queries [][2]string
	var skipped []string
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			expr := vars.Replace(q.Expr)
			if applies(t, expr, names, paths) {
				queries = append(queries, [2]string{p.Title, expr})
			} else {
				skipped = append(skipped, p.Title+": "+expr)
			}
		}
	}
	if len(queries) < 20 {
		t.Fatalf("only %d of the dashboard's queries apply to the default probe; skipped:\n%s\nmetrics: %v", len(queries), strings.Join(skipped, "\n"), names)
	}
	var empty []string
	localcluster.EventuallyShows(t, 3*time.Minute, "every applicable dashboard query returns data for the pod", func() bool {
		empty = empty[:0]
		for _, q := range queries {
			if len(localcluster.PromQuery(t, prom, q[1])) == 0 {
				empty = append(empty, q[0]+": "+q[1])
			}
		}
		return len(empty) == 0
	}, func() string { return strings.Join(empty, "\n") })
	t.Logf("%d dashboard queries return data for the pod; %d select the etcd or apiserver paths or metrics the default probe does not have%s", len(queries), len(skipped), strings.Join(append([]string{""}, skipped...), "\n"))
}

// selectedMetrics are the metric names expr's selectors name.
func selectedMetrics(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("dashboard query does not parse: %v\n%s", err, expr)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, is := n.(*parser.VectorSelector); is && vs.Name != "" {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// applies says whether expr can have data for the default probe: every
// metric it selects is one Prometheus holds for the pod (a native
// histogram's name counts as held if its classic buckets are, since the
// queries read either form), and every path it names exactly is one the
// probe measures.
func applies(t *testing.T, expr string, names, paths []string) bool {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("dashboard query does not parse: %v\n%s", err, expr)
	}
	ok := true
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, is := n.(*parser.VectorSelector); is {
			if vs.Name != "" && !slices.Contains(names, vs.Name) && !slices.Contains(names, vs.Name+"_bucket") {
				ok = false
			}
			for _, m := range vs.LabelMatchers {
				if m.Name == "path" && m.Type.String() == "=" && !slices.Contains(paths, m.Value) {
					ok = false
				}
			}
		}
		return nil
	})
	return ok
}

// cgroupStats is what the kernel accounts to one container, and to its
// main process.
type cgroupStats struct {
	// anon is the cgroup's anonymous memory; usage adds the page cache
	// charged to it, and is what its memory limit applies to; peak is the
	// highest usage since the container started.
	anon, usage, peak uint64
	// rss and hwm are the process's resident set and its peak, binary
	// pages included (charged to whoever read them first: containerd,
	// which unpacked the image).
	rss, hwm uint64
	cpu      time.Duration
	env      []string // the main process's environment
}

// containerStats reads the exporter container's cgroup v1 accounting on
// the node.
func (in *install) containerStats(pod *corev1.Pod) cgroupStats {
	t := in.t
	t.Helper()
	var id string
	for _, c := range pod.Status.ContainerStatuses {
		if c.Name == "watchprobe" {
			_, id, _ = strings.Cut(c.ContainerID, "://")
		}
	}
	if id == "" {
		t.Fatalf("no container ID for the exporter in %+v", pod.Status.ContainerStatuses)
	}
	find := func(hierarchy string) string {
		var found string
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup", hierarchy), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && d.Name() == id {
				found = p
				return filepath.SkipAll
			}
			return nil
		})
		if found == "" {
			t.Fatalf("no %s cgroup for container %s", hierarchy, id)
		}
		return found
	}
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	mem, cpu := find("memory"), find("cpuacct")
	var s cgroupStats
	for _, line := range strings.Split(read(filepath.Join(mem, "memory.stat")), "\n") {
		if v, ok := strings.CutPrefix(line, "total_rss "); ok {
			s.anon = num(v)
		}
	}
	s.usage = num(read(filepath.Join(mem, "memory.usage_in_bytes")))
	s.peak = num(read(filepath.Join(mem, "memory.max_usage_in_bytes")))
	s.cpu = time.Duration(num(read(filepath.Join(cpu, "cpuacct.usage"))))
	pids := strings.Fields(read(filepath.Join(mem, "cgroup.procs")))
	if len(pids) != 1 {
		t.Fatalf("processes %v in the exporter's container, want its one", pids)
	}
	s.env = strings.Split(read(filepath.Join("/proc", pids[0], "environ")), "\x00")
	for _, line := range strings.Split(read(filepath.Join("/proc", pids[0], "status")), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if kib, ok := strings.CutSuffix(strings.TrimSpace(v), " kB"); ok && (k == "VmRSS" || k == "VmHWM") {
			b := num(kib) * 1024
			if k == "VmRSS" {
				s.rss = b
			} else {
				s.hwm = b
			}
		}
	}
	return s
}

const mib = 1 << 20

// measure reports the exporter's CPU and memory under the default probe
// while Prometheus scrapes it, from its cgroup and /proc, over a minute;
// checks that GOMEMLIMIT is its memory limit, that its resident set,
// binary pages included, fits in its memory request, and that its peak
// (the cgroup's, and the process's) stays under half its limit: the room
// the limit keeps for relists, a slow apiserver's retained writes and a
// scrape of the series. CPU is logged, not judged: values.yaml's requests
// come from these figures.
func (in *install) measure(ctx context.Context, pod *corev1.Pod) {
	t := in.t
	t.Helper()
	const window = time.Minute
	first := in.containerStats(pod)
	time.Sleep(window)
	last := in.containerStats(pod)
	t.Logf("exporter under the default probe, scraped every 5s, on the node: CPU %.1f millicores over %s; process RSS %.1f MiB (peak %.1f MiB); cgroup: anonymous %.1f MiB, usage %.1f MiB (peak %.1f MiB)",
		float64(last.cpu-first.cpu)/float64(window)*1000, window, float64(last.rss)/mib, float64(last.hwm)/mib,
		float64(last.anon)/mib, float64(last.usage)/mib, float64(last.peak)/mib)

	var exporter corev1.Container
	for _, c := range pod.Spec.Containers {
		if c.Name == "watchprobe" {
			exporter = c
		}
	}
	limit, ok := exporter.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		t.Fatal("the exporter container has no memory limit")
	}
	if last.peak >= uint64(limit.Value())/2 || last.hwm >= uint64(limit.Value())/2 {
		t.Errorf("the exporter's peak memory (cgroup %.1f MiB, RSS %.1f MiB) is not under half its limit %s", float64(last.peak)/mib, float64(last.hwm)/mib, limit.String())
	}
	if request, ok := exporter.Resources.Requests[corev1.ResourceMemory]; !ok || last.rss > uint64(request.Value()) {
		t.Errorf("the exporter's RSS %.1f MiB exceeds its memory request %s", float64(last.rss)/mib, request.String())
	}
	if want := "GOMEMLIMIT=" + strconv.FormatInt(limit.Value(), 10); !slices.Contains(last.env, want) {
		t.Errorf("the exporter's environment lacks %s: %q", want, last.env)
	}
	fresh, err := in.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range fresh.Status.ContainerStatuses {
		if c.RestartCount != 0 {
			t.Errorf("container %s restarted %d times: %+v", c.Name, c.RestartCount, c.LastTerminationState)
		}
	}
}

// markers lists the marker objects of replica (a pod name) in the
// default probe's namespace; all replicas' if empty.
func (in *install) markers(ctx context.Context, replica string) []string {
	in.t.Helper()
	selector := probe.LabelManagedBy + "=" + probe.ManagedByValue
	if replica != "" {
		selector += "," + probe.LabelReplica + "=" + replica
	}
	cms, err := in.client.CoreV1().ConfigMaps("watchprobe").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		in.t.Fatal(err)
	}
	var names []string
	for _, cm := range cms.Items {
		names = append(names, cm.Name)
	}
	return names
}

// checkUpgradeRollsAndCleansUp: an upgrade that changes the probe rolls
// the pod; the old pod, sent SIGTERM with the markers its forbidden deletes
// left (checkMonitoring), deletes them and exits by itself (exit code 0:
// not killed at the end of its grace period); and a rollback rolls back,
// with the same cleanup.
func (in *install) checkUpgradeRollsAndCleansUp(ctx context.Context, old *corev1.Pod) {
	t := in.t
	t.Helper()
	in.setMarkerVerbs(ctx, func(verbs []string) []string { return append(verbs, "delete") })
	exit := in.watchExit(ctx, old)
	in.helm("upgrade", installRelease, chartDir, "--namespace", installNamespace, "-f", in.values,
		"-f", in.probes("upgraded"), "--wait", "--timeout", "5m")
	in.checkExitedCleanly(ctx, old, exit)
	upgraded := in.onlyPod(ctx)
	if upgraded.UID == old.UID {
		t.Fatal("the upgrade that changed the probe did not roll the pod")
	}
	in.checkMarkersObserved(ctx, upgraded, "upgraded")

	exit = in.watchExit(ctx, upgraded)
	in.helm("rollback", installRelease, "1", "--namespace", installNamespace, "--wait", "--timeout", "5m")
	in.checkExitedCleanly(ctx, upgraded, exit)
	in.checkMarkersObserved(ctx, in.onlyPod(ctx), "default")
}

// watchExit reports the exporter container's terminated state of pod,
// as last seen before the pod object is deleted.
func (in *install) watchExit(ctx context.Context, pod *corev1.Pod) <-chan *corev1.ContainerStateTerminated {
	t := in.t
	w, err := in.client.CoreV1().Pods(pod.Namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod.Name})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *corev1.ContainerStateTerminated, 1)
	go func() {
		defer w.Stop()
		var last *corev1.ContainerStateTerminated
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, c := range p.Status.ContainerStatuses {
				if c.Name == "watchprobe" && c.State.Terminated != nil {
					last = c.State.Terminated
				}
			}
			if ev.Type == "DELETED" {
				break
			}
		}
		out <- last
	}()
	return out
}

func (in *install) checkExitedCleanly(ctx context.Context, pod *corev1.Pod, exit <-chan *corev1.ContainerStateTerminated) {
	t := in.t
	t.Helper()
	var state *corev1.ContainerStateTerminated
	select {
	case state = <-exit:
	case <-time.After(3 * time.Minute):
		t.Fatalf("pod %s not deleted after the rollout", pod.Name)
	}
	if state == nil || state.ExitCode != 0 {
		t.Errorf("the old exporter's end: %+v, want exit code 0 on SIGTERM within terminationGracePeriodSeconds", state)
	}
	if left := in.markers(ctx, pod.Name); len(left) > 0 {
		t.Errorf("markers of the replaced pod %s left: %v", pod.Name, left)
	}
}

// checkReloader: with the prometheus-config-reloader sidecar (built here
// from its module, as an image of its own), a changed probe list reaches
// the running exporter through /-/reload: a new probe measures, in the same
// pod, with no restart.
func (in *install) checkReloader(ctx context.Context) {
	t := in.t
	t.Helper()
	reloader := []string{"--set", "configReloader.enabled=true",
		"--set", "configReloader.image.registry=localhost", "--set", "configReloader.image.repository=watchprobe/prometheus-config-reloader",
		"--set", "configReloader.image.tag=" + reloaderTag, "--set", "configReloader.image.pullPolicy=Never"}
	in.helm(append([]string{"upgrade", installRelease, chartDir, "--namespace", installNamespace, "-f", in.values, "--wait", "--timeout", "5m"}, reloader...)...)
	pod := in.onlyPod(ctx)
	if len(pod.Spec.Containers) != 2 {
		t.Fatalf("%d containers with the reloader, want 2", len(pod.Spec.Containers))
	}
	in.checkMarkersObserved(ctx, pod, "default")

	in.helm(append([]string{"upgrade", installRelease, chartDir, "--namespace", installNamespace, "-f", in.values, "--wait", "--timeout", "5m",
		"-f", in.probes("default", "reloaded")}, reloader...)...)
	var body string
	localcluster.EventuallyShows(t, 3*time.Minute, "the added probe runs in the same pod", func() bool {
		body = scrape(metricsURL(pod))
		return strings.Contains(body, `watchprobe_probe_success{probe="reloaded"} 1`)
	}, func() string {
		return grep(body, "watchprobe_probe_success", "watchprobe_config") + "\n" + in.podLogs()
	})
	now, err := in.client.CoreV1().Pods(installNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the pod is gone after the reload: %v", err)
	}
	for _, c := range now.Status.ContainerStatuses {
		if c.RestartCount != 0 {
			t.Errorf("container %s restarted %d times with the reloader", c.Name, c.RestartCount)
		}
	}
}

// checkUninstallLeavesNothing: after helm uninstall, no object of any
// kind carries the release's label or name (no Role, no RoleBinding) but
// the marker namespace the chart keeps, and no marker is left in it.
func (in *install) checkUninstallLeavesNothing(ctx context.Context) {
	t := in.t
	t.Helper()
	pods, err := in.client.CoreV1().Pods(installNamespace).List(ctx, releasePods)
	if err != nil {
		t.Fatal(err)
	}
	var exits []<-chan *corev1.ContainerStateTerminated
	for i := range pods.Items {
		exits = append(exits, in.watchExit(ctx, &pods.Items[i]))
	}
	in.helm("uninstall", installRelease, "--namespace", installNamespace, "--wait", "--timeout", "5m")
	for i := range pods.Items {
		in.checkExitedCleanly(ctx, &pods.Items[i], exits[i])
	}
	if left := in.markers(ctx, ""); len(left) > 0 {
		t.Errorf("markers left after uninstall: %v", left)
	}
	var left []string
	localcluster.EventuallyShows(t, 2*time.Minute, "no object of the release left", func() bool {
		left = in.releaseObjects(ctx)
		return len(left) == 0
	}, func() string { return strings.Join(left, "\n") })
}

// releaseObjects lists every object, of every kind the apiserver lists,
// that carries the release's instance label or a name of the release's,
// but the namespaces the chart keeps by policy.
func (in *install) releaseObjects(ctx context.Context) []string {
	t := in.t
	t.Helper()
	// Listing every kind lists deprecated ones too, whose warnings say
	// nothing here.
	cfg := in.node.AdminConfig()
	cfg.WarningHandler = rest.NoWarnings{}
	disc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	lists, err := disc.ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || gv.Group == "events.k8s.io" || r.Name == "events" {
				continue
			}
			objs, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("listing %s: %v", r.Name, err)
			}
			for _, o := range objs.Items {
				if o.GetLabels()["app.kubernetes.io/instance"] != installRelease && !strings.HasPrefix(o.GetName(), installRelease+"-watchprobe") {
					continue
				}
				// The chart keeps the marker namespaces it made
				// (markerNamespaces.keep): deleting one deletes all in it.
				if r.Name == "namespaces" && o.GetAnnotations()["helm.sh/resource-policy"] == "keep" {
					continue
				}
				left = append(left, fmt.Sprintf("%s %s/%s", r.Name, o.GetNamespace(), o.GetName()))
			}
		}
	}
	return left
}
