package main

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// These tests run the real exporter binary against the real control plane.

var exporterBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "watchprobe-bin-")
	if err != nil {
		panic(err)
	}
	exporterBin = filepath.Join(dir, "watchprobe")
	if out, err := exec.Command("go", "build", "-o", exporterBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the exporter: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type exporter struct {
	cmd    *exec.Cmd
	url    string
	stderr *bytes.Buffer
	done   chan struct{}
}

func startExporter(t *testing.T, args ...string) *exporter {
	t.Helper()
	return startExporterEnv(t, nil, args...)
}

// startExporterEnv starts the exporter with env added to this process's.
func startExporterEnv(t *testing.T, env []string, args ...string) *exporter {
	t.Helper()
	addr := freeAddr(t)
	e := &exporter{url: "http://" + addr, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	e.cmd = exec.Command(exporterBin, append([]string{"--web.listen-address", addr}, args...)...)
	e.cmd.Env = append(os.Environ(), env...)
	e.cmd.Stderr = e.stderr
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		_ = e.cmd.Process.Kill()
		<-e.done
		if t.Failed() {
			t.Logf("exporter log:\n%s", e.stderr)
		}
	})
	return e
}

func (e *exporter) get(path string) (int, string) {
	resp, err := http.Get(e.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (e *exporter) signal(t *testing.T, sig syscall.Signal, within time.Duration) {
	t.Helper()
	if err := e.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.done:
	case <-time.After(within):
		t.Fatalf("the exporter did not exit within %s of %s", within, sig)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// markers lists the ConfigMap markers of a replica in ns.
func markers(t *testing.T, client kubernetes.Interface, ns, replica string) []string {
	t.Helper()
	return configMapNames(t, client, ns, probe.LabelReplica+"="+replica)
}

// configMapNames lists the ConfigMaps in ns that selector selects.
func configMapNames(t *testing.T, client kubernetes.Interface, ns, selector string) []string {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	return names
}

// The exporter serves lint-clean metrics for its probe, becomes ready, and
// on SIGTERM deletes its live markers before it exits. A SIGKILLed exporter
// leaves its marker behind; the next start of the same replica removes it.
func TestExporterLifecycle(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns := "watchprobe"
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Many updates make a cycle long, so a live marker is there to be seen
	// (and left behind by a kill).
	args := []string{"--kubeconfig", kubeconfig, "--probe.replica", "r1", "--probe.interval", "100ms", "--probe.updates", "100"}

	e := startExporter(t, args...)
	localcluster.Eventually(t, 60*time.Second, "/-/ready answers 200", func() bool { code, _ := e.get("/-/ready"); return code == 200 })
	localcluster.Eventually(t, 30*time.Second, "a live marker", func() bool { return len(markers(t, client, ns, "r1")) > 0 })
	localcluster.Eventually(t, 30*time.Second, "events observed on both paths", func() bool {
		_, body := e.get("/metrics")
		for _, path := range probe.Paths {
			if sample(t, body, "watchprobe_events_observed_total", map[string]string{"event": "modified", "path": path, "probe": "default"}) <= 0 {
				return false
			}
		}
		return true
	})
	code, body := e.get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics answered %d", code)
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
	for _, want := range []string{"watchprobe_build_info{", "go_goroutines ", "process_cpu_seconds_total ", `watchprobe_probe_success{probe="default"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if code, body := e.get("/"); code != 200 || !strings.Contains(body, "/metrics") {
		t.Errorf("landing page: %d %q", code, body)
	}

	e.signal(t, syscall.SIGTERM, 30*time.Second)
	if left := markers(t, client, ns, "r1"); len(left) != 0 {
		t.Errorf("markers left after SIGTERM: %v", left)
	}

	killed := startExporter(t, args...)
	var leftover []string
	localcluster.Eventually(t, 60*time.Second, "a live marker", func() bool { leftover = markers(t, client, ns, "r1"); return len(leftover) > 0 })
	killed.signal(t, syscall.SIGKILL, 10*time.Second)
	if left := markers(t, client, ns, "r1"); len(left) == 0 {
		t.Fatal("SIGKILL left no marker; the test cannot show that the next start removes it")
	}

	startExporter(t, args...)
	localcluster.Eventually(t, 60*time.Second, "the killed exporter's markers deleted", func() bool {
		live := markers(t, client, ns, "r1")
		for _, name := range leftover {
			for _, l := range live {
				if l == name {
					return false
				}
			}
		}
		return true
	})
}

// sample is the value of the series of name with exactly labels in a text
// exposition, -1 when there is none: a series created at zero is 0, not a
// match.
func sample(t *testing.T, body, name string, labels map[string]string) float64 {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range families[name].GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			if l.GetValue() != "" { // an empty label is no label in PromQL
				got[l.GetName()] = l.GetValue()
			}
		}
		if maps.Equal(got, labels) {
			return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return -1
}

// An identity that may write its markers but not list or watch them: the
// exporter stays ready and scraped (the cluster's state is a result, not
// its readiness), its paths are down, not stalled, however long writes go
// unanswered, the apiserver's answer is counted by code, and the status
// page names the path and the error.
func TestForbiddenPathIsDownNotUnready(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns := "watchprobe"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Writes only: create, update and delete, neither list nor watch.
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "write-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "update", "delete"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "write-only"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "write-only"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "write-only"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ClientCertConfig("write-only")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := localcluster.WriteKubeconfig(rc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	e := startExporter(t, "--kubeconfig", kubeconfig, "--probe.replica", "r1", "--probe.paths", "watch",
		"--probe.interval", "500ms", "--probe.deadline", "1s", "--probe.stall-after", "2s")
	localcluster.Eventually(t, 60*time.Second, "/-/ready answers 200", func() bool { code, _ := e.get("/-/ready"); return code == 200 })
	path := map[string]string{"probe": "default", "path": "watch"}
	var body string
	// Past the 30 s the probe waits for its paths to sync, writes are sent
	// and acknowledged; then stall_after passes several times over.
	localcluster.Eventually(t, 90*time.Second, "acknowledged writes and a missed event", func() bool {
		_, body = e.get("/metrics")
		return sample(t, body, "watchprobe_writes_total", map[string]string{"probe": "default", "verb": "create"}) >= 3 &&
			sample(t, body, "watchprobe_write_errors_total", map[string]string{"probe": "default", "verb": "create", "code": "0"}) == 0 &&
			sample(t, body, "watchprobe_events_missed_total", map[string]string{"probe": "default", "path": "watch", "reason": "unavailable"}) >= 3
	})
	time.Sleep(3 * time.Second)
	if code, ready := e.get("/-/ready"); code != http.StatusOK {
		t.Errorf("/-/ready answered %d %q while the path is forbidden, want 200", code, ready)
	}
	code, body := e.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d", code)
	}
	if got := sample(t, body, "watchprobe_path_up", path); got != 0 {
		t.Errorf("watchprobe_path_up = %g, want 0", got)
	}
	if got := sample(t, body, "watchprobe_watch_stalled", path); got != 0 {
		t.Errorf("watchprobe_watch_stalled = %g, want 0: no stream is open, the path is down", got)
	}
	if got := sample(t, body, "watchprobe_requests_failed_total", map[string]string{"probe": "default", "path": "watch", "request": "list", "code": "403"}); got < 1 {
		t.Errorf("forbidden lists counted %g times, want at least 1", got)
	}
	_, page := e.get("/")
	page = html.UnescapeString(page)
	for _, want := range []string{"<b>Paths down:</b> watch: ", "forbidden"} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %s", want)
		}
	}
}

// --config.check names the probe and field at fault and exits non-zero,
// before touching any cluster.
func TestConfigCheck(t *testing.T) {
	out, err := exec.Command(exporterBin, "--config.check", "--config.file", "testdata/bad-kind.yml").CombinedOutput()
	if err == nil {
		t.Fatalf("--config.check accepted a bad file:\n%s", out)
	}
	if want := `probe \"fast\" (line 2): kind: \"Secret\" is not supported`; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %s:\n%s", want, out)
	}
	out, err = exec.Command(exporterBin, "--config.check", "--config.file", "testdata/good.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration is valid: 2 probe(s)") {
		t.Errorf("good config: %v\n%s", err, out)
	}
	out, err = exec.Command(exporterBin, "--config.check", "--config.file", "testdata/good.yml", "--probe.updates", "3").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--probe.updates cannot be combined with --config.file") {
		t.Errorf("flags with a config file: %v\n%s", err, out)
	}
}
