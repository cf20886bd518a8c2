package main

import (
	"context"
	"html"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// markers lists the ConfigMap markers of a replica in ns.
func markers(t *testing.T, client kubernetes.Interface, ns, replica string) []string {
	t.Helper()
	return configMapNames(t, client, ns, probe.LabelReplica+"="+replica)
}

// The exporter serves lint-clean metrics for its probe, becomes ready, and
// on SIGTERM deletes its live markers before it exits. A SIGKILLed exporter
// leaves its marker behind; the next start of the same replica removes it.
func TestExporterLifecycle(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{})
	kubeconfig := writeKubeconfig(t, c.AdminConfig())
	client := kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns := "watchprobe"
	localcluster.CreateNamespacesForTest(t, client, ns)
	// Many updates make a cycle long, so a live marker is there to be seen
	// (and left behind by a kill).
	args := []string{"--kubeconfig", kubeconfig, "--probe.replica", "r1", "--probe.interval", "100ms", "--probe.updates", "100"}

	e := startExporter(t, args...)
	localcluster.Eventually(t, 60*time.Second, "/-/ready answers 200", func() bool { code, _ := e.get("/-/ready"); return code == 200 })
	localcluster.Eventually(t, 30*time.Second, "a live marker", func() bool { return len(markers(t, client, ns, "r1")) > 0 })
	localcluster.Eventually(t, 30*time.Second, "events observed on both paths", func() bool {
		_, body := e.get("/metrics")
		for _, path := range config.DefaultPaths {
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

	if err := e.Signal(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if left := markers(t, client, ns, "r1"); len(left) != 0 {
		t.Errorf("markers left after SIGTERM: %v", left)
	}

	killed := startExporter(t, args...)
	var leftover []string
	localcluster.Eventually(t, 60*time.Second, "a live marker", func() bool { leftover = markers(t, client, ns, "r1"); return len(leftover) > 0 })
	if err := killed.Signal(syscall.SIGKILL, 10*time.Second); err != nil {
		t.Fatal(err)
	}
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

// sample is the value of the series of name whose labels include labels
// in a text exposition, summed, -1 when there is none: a series created at
// zero is 0, not a match.
func sample(t *testing.T, body, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := exportertest.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	v, found := exportertest.Sum(families, name, labels)
	if !found {
		return -1
	}
	return v
}

// An identity that may write its markers but not list or watch them: the
// exporter stays ready and scraped (the cluster's state is a result, not
// its readiness), its paths are down and refused, not stalled, however long
// writes go unanswered, the writes are unmeasurable there, not missed, the
// apiserver's answer is counted by code, and the status page names the
// path, the refusal and the error.
func TestForbiddenPathIsDownNotUnready(t *testing.T) {
	ctx := context.Background()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	ns := "watchprobe"
	localcluster.CreateNamespacesForTest(t, admin, ns)
	// Writes only: create, update and delete, neither list nor watch.
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "write-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "patch", "delete"}}},
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
	kubeconfig := writeKubeconfig(t, rc)
	e := startExporter(t, "--kubeconfig", kubeconfig, "--probe.replica", "r1", "--probe.paths", "watch",
		"--probe.interval", "500ms", "--probe.deadline", "1s", "--probe.stall-after", "2s")
	localcluster.Eventually(t, 60*time.Second, "/-/ready answers 200", func() bool { code, _ := e.get("/-/ready"); return code == 200 })
	path := map[string]string{"probe": "default", "path": "watch"}
	var body string
	// Past the 30 s the probe waits for its paths to sync, writes are sent
	// and acknowledged; then stall_after passes several times over.
	localcluster.Eventually(t, 90*time.Second, "acknowledged writes, unmeasurable on the refused path", func() bool {
		_, body = e.get("/metrics")
		return sample(t, body, "watchprobe_writes_total", map[string]string{"probe": "default", "verb": "create"}) >= 3 &&
			sample(t, body, "watchprobe_write_errors_total", map[string]string{"probe": "default", "verb": "create", "code": "0"}) == 0 &&
			sample(t, body, "watchprobe_events_unmeasurable_total", map[string]string{"probe": "default", "path": "watch", "reason": "path_refused"}) >= 3
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
	if got := sample(t, body, "watchprobe_path_refused", map[string]string{"probe": "default", "path": "watch", "reason": "forbidden"}); got != 1 {
		t.Errorf("watchprobe_path_refused{reason=\"forbidden\"} = %g, want 1", got)
	}
	for _, reason := range []string{"relist", "unavailable", "silent"} {
		if got := sample(t, body, "watchprobe_events_missed_total", map[string]string{"probe": "default", "path": "watch", "reason": reason}); got != 0 {
			t.Errorf("missed (%s) = %g, want 0: the refused path's writes are unmeasurable", reason, got)
		}
	}
	if got := sample(t, body, "watchprobe_requests_failed_total", map[string]string{"probe": "default", "path": "watch", "request": "list", "code": "403"}); got < 1 {
		t.Errorf("forbidden lists counted %g times, want at least 1", got)
	}
	_, page := e.get("/")
	page = html.UnescapeString(page)
	for _, want := range []string{"<b>Paths down:</b> watch: refused (forbidden): ", "cannot list resource"} {
		if !strings.Contains(page, want) {
			t.Errorf("the status page lacks %s", want)
		}
	}
}

// --config.check names the probe and field at fault and exits non-zero,
// before touching any cluster.
func TestConfigCheck(t *testing.T) {
	out, err := exec.Command(exporterBin, "--config.check", "--config.file", "../../pkg/config/testdata/bad-kind.yml").CombinedOutput()
	if err == nil {
		t.Fatalf("--config.check accepted a bad file:\n%s", out)
	}
	if want := `probe \"fast\" (line 2): kind: \"Secret\" is not supported`; !strings.Contains(string(out), want) {
		t.Errorf("output lacks %s:\n%s", want, out)
	}
	out, err = exec.Command(exporterBin, "--config.check", "--config.file", "../../pkg/config/testdata/good.yml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration is valid: 2 probe(s)") {
		t.Errorf("good config: %v\n%s", err, out)
	}
	out, err = exec.Command(exporterBin, "--config.check", "--config.file", "../../pkg/config/testdata/good.yml", "--probe.updates", "3").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--probe.updates cannot be combined with --config.file") {
		t.Errorf("flags with a config file: %v\n%s", err, out)
	}
}
