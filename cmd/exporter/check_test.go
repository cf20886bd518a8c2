package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/agent"
	"github.com/watchprobe/watchprobe/pkg/check"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// runInProcess runs the command line args as main would, and returns its
// exit status and output.
func runInProcess(args ...string) (code int, stdout, stderr string) {
	if len(args) > 0 && args[0] == "check" {
		args = append([]string{"check"}, loadTolerant(args[1:])...)
	}
	var out, errOut lockedBuffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// lockedBuffer is written by the logger, which client-go goroutines of a
// finished run may still hold.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A check that cannot run says why, naming the flag or field at fault, and
// exits 2 without writing anything.
func TestCheckUsageErrors(t *testing.T) {
	addr, err := exportertest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	closed := writeKubeconfig(t, &rest.Config{Host: "https://" + addr})
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"cycles and duration", []string{"--cycles", "3", "--duration", "10s"}, []string{"--cycles and --duration cannot be combined; give one"}},
		{"no cycles", []string{"--cycles", "0"}, []string{"--cycles: 0 is too few; use at least 1"}},
		{"negative duration", []string{"--duration=-1s"}, []string{"--duration: must be positive, got -1s"}},
		{"target above 1", []string{"--objective.target", "99"}, []string{"--objective.target: 99 is not a share; use a number above 0 and at most 1, e.g. 0.99"}},
		{"zero latency", []string{"--objective.latency", "0s"}, []string{"--objective.latency: must be positive, got 0s"}},
		{"negative anomalies", []string{"--objective.allowed-anomalies=-1"}, []string{"--objective.allowed-anomalies: -1 is negative; use 0 or more"}},
		{"every bad flag at once", []string{"--cycles", "0", "--objective.target", "0"}, []string{"--cycles: 0 is too few", "--objective.target: 0 is not a share"}},
		{"unknown output", []string{"--output", "yaml"}, []string{"enum value must be one of text,json, got 'yaml'"}},
		{"starvation threshold too low", []string{"--exporter.starved-threshold", "1ms"}, []string{"--exporter.starved-threshold: the starvation threshold 1ms is below 5ms"}},
		{"unknown flag", []string{"--objective.ratio", "0.9"}, []string{"unknown long flag '--objective.ratio'"}},
		{"bad config field", []string{"--config.file", "../../pkg/config/testdata/bad-kind.yml"}, []string{`../../pkg/config/testdata/bad-kind.yml: probe "fast" (line 2): kind: "Secret" is not supported; use ConfigMap or Lease`}},
		{"unknown config field", []string{"--config.file", "../../pkg/config/testdata/unknown-field.yml"}, []string{"probe at line 2: intervall: is not a setting (line 3"}},
		{"flags with a config file", []string{"--config.file", "../../pkg/config/testdata/good.yml", "--probe.updates", "3"}, []string{"--probe.updates cannot be combined with --config.file"}},
		{"bad probe flag", []string{"--probe.paths", "informer,reflector"}, []string{`--probe.* flags: paths: "reflector" is not a path; use one or more of informer, watch, etcd`}},
		{"no kubeconfig", []string{"--kubeconfig", "testdata/no-such-kubeconfig"}, []string{"no Kubernetes configuration", "no-such-kubeconfig"}},
		{"apiserver unreachable", []string{"--kubeconfig", closed}, []string{"cannot reach the apiserver at https://127.0.0.1:"}},
		{"objective beyond the deadline", []string{"--objective.latency", "10s"}, []string{`--objective.latency: 10s is longer than probe "default"'s deadline (5s)`}},
		{"unreadable etcd certificate", []string{"--probe.paths", "watch,etcd", "--probe.etcd.endpoints", "https://127.0.0.1:2379",
			"--probe.etcd.cert-file", "testdata/no-such-cert.pem", "--probe.etcd.key-file", "testdata/no-such-key.pem"},
			[]string{"etcd.cert_file: open testdata/no-such-cert.pem: no such file or directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runInProcess(append([]string{"check"}, tc.args...)...)
			if code != checkError {
				t.Errorf("exit status %d, want %d", code, checkError)
			}
			for _, want := range tc.want {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if stdout != "" {
				t.Errorf("a check that did not run printed a report:\n%s", stdout)
			}
		})
	}
}

// validateReport checks a JSON report against the schema, strictly, and
// decodes it.
func validateReport(t *testing.T, out string) check.Report {
	t.Helper()
	var r check.Report
	if err := exportertest.ValidateJSON("../../docs/check-report.schema.json", out, &r); err != nil {
		t.Fatalf("the report: %v\n%s", err, out)
	}
	return r
}

// `watchprobe check` against the real control plane: a healthy cluster
// passes with every path in the report; events dropped on their way pass
// no more, and the report counts exactly those dropped; an interrupted
// check deletes its markers.
func TestCheck(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{EtcdTLS: true})
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	kubeconfig := writeKubeconfig(t, admin)
	etcdCert, etcdKey, etcdCA := c.EtcdClientFiles()

	t.Run("healthy", func(t *testing.T) {
		localcluster.CreateNamespacesForTest(t, client, "check-healthy")
		config := filepath.Join(t.TempDir(), "probes.yml")
		writeFile(t, config, fmt.Sprintf(`probes:
  - name: configmaps
    namespace: check-healthy
    interval: 500ms
    deadline: 2s
    updates: 2
    paths: [informer, watch, etcd]
    etcd: {endpoints: [%q], cert_file: %q, key_file: %q, ca_file: %q}
  - name: leases
    kind: Lease
    namespace: check-healthy
    interval: 500ms
    paths: [watch]
    freshness: {resources: [pods, configmaps], every: 6s, timeout: 5s, stuck_window: 18s}
    watch_list: {resources: [pods, configmaps], cluster_resources: [nodes], every: 5s, bound: 2s, stuck_window: 15s}
`, c.EtcdURL, etcdCert, etcdKey, etcdCA))
		const cycles = 5
		args := []string{"check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", fmt.Sprint(cycles), "--objective.latency", "2s"}
		code, stdout, stderr := runInProcess(append(args, "--output", "json")...)
		if code != checkOK {
			t.Fatalf("exit status %d on a healthy cluster, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r := validateReport(t, stdout)
		if !r.OK || len(r.Problems) != 0 || r.Interrupted {
			t.Errorf("verdict ok=%v problems=%v interrupted=%v", r.OK, r.Problems, r.Interrupted)
		}
		release, err := c.KubeVersion()
		if err != nil {
			t.Fatal(err)
		}
		server, err := kube.ParseServerVersion(version.Info{GitVersion: release})
		if err != nil {
			t.Fatal(err)
		}
		serves := server.WatchListByDefault()
		if r.ServerVersion != release {
			t.Errorf("server_version %q, want %s", r.ServerVersion, release)
		}
		want := map[string][]string{"configmaps": {"informer", "watch", "etcd"}, "leases": {"watch"}}
		if len(r.Probes) != len(want) {
			t.Fatalf("%d probes in the report, want %d", len(r.Probes), len(want))
		}
		for _, p := range r.Probes {
			var paths []string
			for _, path := range p.Paths {
				paths = append(paths, path.Path)
				// Each cycle writes create, updates and delete: every one
				// is owed on every path, and arrived.
				perCycle := int64(2 + 2)
				if p.Name == "leases" {
					perCycle = 2 + 1
				}
				if path.Observed < cycles*perCycle || path.Expected != path.Observed || path.Anomalies != 0 || path.Latency == nil || path.Ratio == nil || *path.Ratio != 1 {
					t.Errorf("%s/%s: %+v", p.Name, path.Path, path)
				}
				if l := path.Latency; l != nil && !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max) {
					t.Errorf("%s/%s: latencies out of order: %+v", p.Name, path.Path, l)
				}
				if path.Relists["initial"] != 1 {
					t.Errorf("%s/%s: %d initial relists, want 1", p.Name, path.Path, path.Relists["initial"])
				}
			}
			if strings.Join(paths, ",") != strings.Join(want[p.Name], ",") {
				t.Errorf("probe %s: paths %v in the report, want %v", p.Name, paths, want[p.Name])
			}
			// The leases probe's freshness checks: the first round, at the
			// start, through the load balancer, every check fresh and the
			// read of the (not yet written) markers clean.
			if p.Name == "leases" {
				if len(p.Freshness) != 2 || len(p.StaleReads) != 1 {
					t.Errorf("leases: freshness %+v, stale reads %+v, want pods and configmaps and one read target", p.Freshness, p.StaleReads)
				}
				for _, f := range p.Freshness {
					if f.APIServer != "" || f.Checks < 1 || f.Fresh != f.Checks || f.Stuck || !f.OK {
						t.Errorf("leases: freshness of %s: %+v", f.Resource, f)
					}
				}
				for _, sr := range p.StaleReads {
					for k, n := range sr.Kinds {
						if n != 0 {
							t.Errorf("leases: %d %s reads on a healthy cluster", n, k)
						}
					}
				}
				// Its WatchList syncs, the same first round: each reached
				// its end bookmark; on a release that refuses WatchList
				// by default (1.31, 1.33), each was refused, none timed,
				// and the report notes it, failing nothing.
				if len(p.WatchList) != 3 {
					t.Errorf("leases: watch_list %+v, want pods, configmaps and nodes", p.WatchList)
				}
				for _, w := range p.WatchList {
					switch {
					case !serves:
						if w.APIServer != "" || w.Syncs < 1 || w.Refused[metrics.WatchListRejected] != w.Syncs || w.Synced != 0 || w.MaxSeconds != nil || w.Stuck || !w.OK {
							t.Errorf("leases: WatchList syncs of %s on %s, which refuses WatchList by default: %+v, want each refused, ok", w.Resource, server, w)
						}
					case w.APIServer != "" || w.Syncs < 1 || w.Synced != w.Syncs || w.MaxSeconds == nil || w.Stuck || !w.OK:
						t.Errorf("leases: WatchList syncs of %s: %+v", w.Resource, w)
					}
				}
				if refusedNote := slices.ContainsFunc(r.Notes, func(n string) bool { return strings.HasPrefix(n, "WatchList refused: kube-apiserver "+r.ServerVersion) }); refusedNote == serves {
					t.Errorf("notes %q on %s: want a WatchList refused note exactly where it refuses WatchList by default", r.Notes, server)
				}
			} else if len(p.Freshness) != 0 || len(p.WatchList) != 0 {
				t.Errorf("%s: freshness %+v, watch_list %+v without the settings", p.Name, p.Freshness, p.WatchList)
			}
			if p.Cycles < cycles || p.SuccessfulCycles != p.Cycles || p.WriteErrors != 0 {
				t.Errorf("probe %s: %d cycles judged, %d successful, %d write errors", p.Name, p.Cycles, p.SuccessfulCycles, p.WriteErrors)
			}
		}
		if !strings.Contains(stderr, "configmaps cycle 1 ok") {
			t.Errorf("no progress line for each cycle on a non-terminal stderr:\n%s", stderr)
		}

		code, stdout, stderr = runInProcess(args...)
		if code != checkOK {
			t.Fatalf("text report: exit status %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, want := range []string{"probe configmaps (ConfigMap in check-healthy", "probe leases (Lease in check-healthy", "informer", "watch", "etcd", "latency p99", "missed silent", "freshness pods on the load balancer: ", "WatchList nodes on the load balancer: ", "verdict: the objective holds"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("the text report lacks %q:\n%s", want, stdout)
			}
		}
		t.Logf("text report:\n%s", stdout)
		assertNoMarkers(t, client, "check-healthy")
	})

	t.Run("duration", func(t *testing.T) {
		ns := "check-duration"
		localcluster.CreateNamespacesForTest(t, client, ns)
		code, stdout, stderr := runInProcess("check", "--kubeconfig", kubeconfig, "--output", "json",
			"--probe.namespace", ns, "--probe.interval", "500ms", "--duration", "3s", "--objective.latency", "5s")
		if code != checkOK {
			t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r := validateReport(t, stdout)
		// 3s at 500ms holds seven cycles at most, the first at once: a
		// slow machine can only make fewer. More would mean the check ran
		// past its duration.
		if p := r.Probes[0]; p.Cycles < 1 || p.Cycles > 7 || p.SuccessfulCycles != p.Cycles {
			t.Errorf("%d cycles judged in 3s at 500ms, %d successful; want 1 to 7, all", p.Cycles, p.SuccessfulCycles)
		}
		if r.DurationSeconds < 3 {
			t.Errorf("the report says the check ran %gs, less than its 3s", r.DurationSeconds)
		}
		assertNoMarkers(t, client, ns)
	})

	t.Run("dropped events", func(t *testing.T) {
		ns := "check-dropped"
		localcluster.CreateNamespacesForTest(t, client, ns)
		proxy := c.FaultProxyForTest(t)
		const dropped = 3
		proxy.Drop(dropped, func(ev faultproxy.Event) bool { return ev.Type == "MODIFIED" && ev.Namespace == ns })
		code, stdout, stderr := runInProcess("check", "--kubeconfig", writeKubeconfig(t, proxy.Config(admin)), "--output", "json",
			"--probe.namespace", ns, "--probe.interval", "300ms", "--probe.deadline", "1s", "--cycles", "6")
		if code != checkFailed {
			t.Fatalf("exit status %d with %d events dropped, want 1\nstdout:\n%s\nstderr:\n%s", code, dropped, stdout, stderr)
		}
		if got := proxy.Applied(faultproxy.Drop); got != dropped {
			t.Fatalf("the proxy dropped %d events, want %d", got, dropped)
		}
		r := validateReport(t, stdout)
		// On a loaded machine an event may also come after the 1s deadline:
		// missed, then late. The dropped ones are the misses that never came.
		var silent, late, other int64
		for _, path := range r.Probes[0].Paths {
			silent += path.Missed["silent"]
			late += path.Late
			other += path.Missed["relist"] + path.Missed["unavailable"] + path.Counts["duplicates"] + path.Counts["out_of_order"]
		}
		if silent-late != dropped || other != 0 {
			t.Errorf("the report shows %d silently missed events of which %d came late, and %d other anomalies; want %d never delivered and 0\n%s", silent, late, other, dropped, stdout)
		}
		if r.OK || len(r.Problems) == 0 || !strings.Contains(strings.Join(r.Problems, "\n"), "missed") {
			t.Errorf("ok=%v, problems %q: want the misses named", r.OK, r.Problems)
		}
		assertNoMarkers(t, client, ns)
	})

	t.Run("missing permissions", func(t *testing.T) {
		ns := "check-permissions"
		localcluster.CreateNamespacesForTest(t, client, ns)
		limited, err := c.ServiceAccountConfig(context.Background(), ns, "limited")
		if err != nil {
			t.Fatal(err)
		}
		grant := func(verbs ...string) {
			t.Helper()
			role := &rbacv1.Role{
				ObjectMeta: metav1.ObjectMeta{Name: "limited", Namespace: ns},
				Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}},
			}
			ctx := context.Background()
			// A Role's update creates it when it does not exist.
			if _, err := client.RbacV1().Roles(ns).Update(ctx, role, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			rb := &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "limited"},
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "limited"},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "limited", Namespace: ns}},
			}
			if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			// RBAC is read from a cache: wait until the grant is in force.
			self := kubernetes.NewForConfigOrDie(limited).AuthorizationV1().SelfSubjectAccessReviews()
			localcluster.Eventually(t, 30*time.Second, "the grant in force", func() bool {
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verbs[len(verbs)-1], Resource: "configmaps"},
				}}
				r, err := self.Create(context.Background(), review, metav1.CreateOptions{})
				return err == nil && r.Status.Allowed
			})
		}
		kubeconfig := writeKubeconfig(t, limited)

		// Markers it could create but never delete: refused before any
		// is written.
		grant("create", "patch", "list", "watch")
		code, stdout, stderr := runInProcess("check", "--kubeconfig", kubeconfig, "--probe.namespace", ns, "--probe.interval", "300ms", "--cycles", "1")
		if want := `probe "default" may not delete its ConfigMap markers in namespace "check-permissions": grant list, watch, create, patch and delete on configmaps there`; code != checkError || !strings.Contains(stderr, want) {
			t.Errorf("exit status %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, checkError, want, stdout, stderr)
		}
		assertNoMarkers(t, client, ns)

		// apiservers: discover without access to the EndpointSlices
		// would never start an apiserver path.
		grant("create", "patch", "list", "watch", "delete")
		config := filepath.Join(t.TempDir(), "probes.yml")
		writeFile(t, config, fmt.Sprintf("probes:\n  - name: discover\n    namespace: %s\n    interval: 300ms\n    paths: [watch]\n    apiservers: discover\n", ns))
		code, stdout, stderr = runInProcess("check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", "1")
		if want := `probe "discover": apiservers: discover may not list or watch endpointslices in namespace default`; code != checkError || !strings.Contains(stderr, want) {
			t.Errorf("exit status %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, checkError, want, stdout, stderr)
		}
		assertNoMarkers(t, client, ns)

		// A controller probe without the verbs on its marker's kind.
		writeFile(t, config, fmt.Sprintf("probes:\n  - name: ctrl\n    namespace: %s\n    interval: 300ms\n    controllers: [deployment]\n", ns))
		code, stdout, stderr = runInProcess("check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", "1")
		if want := `probe "ctrl" may not get or list or watch or create or update or delete deployments in namespace "check-permissions" for its deployment controller marker: grant get, list, watch, create, update and delete on deployments.apps there`; code != checkError || !strings.Contains(stderr, want) {
			t.Errorf("exit status %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, checkError, want, stdout, stderr)
		}
		assertNoMarkers(t, client, ns)

		// Freshness checks of a resource the identity may not list, in
		// the namespace and cluster-wide: every check would be forbidden.
		writeFile(t, config, fmt.Sprintf("probes:\n  - name: fresh\n    namespace: %s\n    interval: 300ms\n    freshness:\n      resources: [configmaps, pods]\n", ns))
		code, stdout, stderr = runInProcess("check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", "1")
		if want := `probe "fresh": freshness may not list pods in namespace check-permissions: grant list on pods in namespace check-permissions, or take it out of freshness`; code != checkError || !strings.Contains(stderr, want) {
			t.Errorf("exit status %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, checkError, want, stdout, stderr)
		}
		writeFile(t, config, fmt.Sprintf("probes:\n  - name: fresh\n    namespace: %s\n    interval: 300ms\n    freshness:\n      resources: [configmaps]\n      cluster_resources: [nodes]\n", ns))
		code, stdout, stderr = runInProcess("check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", "1")
		if want := `probe "fresh": freshness may not list nodes cluster-wide: grant list on nodes with a ClusterRole`; code != checkError || !strings.Contains(stderr, want) {
			t.Errorf("exit status %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, checkError, want, stdout, stderr)
		}
		assertNoMarkers(t, client, ns)

		// WatchList syncs of a resource the identity may not watch.
		writeFile(t, config, fmt.Sprintf("probes:\n  - name: syncs\n    namespace: %s\n    interval: 300ms\n    watch_list:\n      resources: [configmaps, pods]\n", ns))
		code, stdout, stderr = runInProcess("check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", "1")
		if want := `probe "syncs": watch_list may not watch pods in namespace check-permissions: grant watch on pods in namespace check-permissions, or take it out of watch_list`; code != checkError || !strings.Contains(stderr, want) {
			t.Errorf("exit status %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, checkError, want, stdout, stderr)
		}
		assertNoMarkers(t, client, ns)
	})

	t.Run("node agents", func(t *testing.T) {
		ns, agents := "check-agents", "check-agents-leases"
		localcluster.CreateNamespacesForTest(t, client, ns, agents)
		ctx := context.Background()
		leases := client.CoordinationV1().Leases(agents)
		// An agent's write: its Lease with its status, by its field
		// manager, so that the apiserver stamps the write's time.
		write := func(node string, status *agent.Status, seq int) time.Time {
			t.Helper()
			annotations := map[string]string{"watchprobe.io/seq": fmt.Sprint(seq)}
			if status != nil {
				annotations[agent.AnnotationStatus] = status.Encode()
			}
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: annotations,
				Labels: map[string]string{probe.LabelManagedBy: probe.ManagedByValue, agent.LabelComponent: agent.ComponentAgent}}}
			// A merge patch of its metadata, as the agent writes.
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": lease.Labels, "annotations": lease.Annotations}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := leases.Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: agent.FieldManager})
			if apierrors.IsNotFound(err) {
				got, err = leases.Create(ctx, lease, metav1.CreateOptions{FieldManager: agent.FieldManager})
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range got.ManagedFields {
				if f.Manager == agent.FieldManager && f.Time != nil {
					return f.Time.Time
				}
			}
			t.Fatalf("lease %s: no managedFields entry of %s: %+v", node, agent.FieldManager, got.ManagedFields)
			return time.Time{}
		}
		// Staleness is judged by the apiserver's stamps, to the second: the
		// stale agent's interval and deadline are a nanosecond each,
		// so that it is stale as soon as another agent's write is stamped a
		// second later; the others' interval of an hour keeps them fresh
		// however slowly they are written.
		hour := agent.Duration(time.Hour)
		ok := agent.Status{Healthy: true, Zone: "z1", Interval: hour, Writes: 40, P50: agent.Duration(2 * time.Millisecond), P90: agent.Duration(5 * time.Millisecond), Max: agent.Duration(8 * time.Millisecond)}
		degraded := agent.Status{Healthy: true, Zone: "z2", Interval: hour, Writes: 41, WriteErrors: 1, Missed: 3, Lost: 2, Stalls: 1, Recent: agent.Counts{Missed: 3, Lost: 2, Stalls: 1}, StreamEnds: 4, Relists: 5, Unmeasurable: 6, Max: agent.Duration(3 * time.Second)}
		// Stale, whatever its counts say.
		stale := agent.Status{Healthy: true, Zone: "z1", Interval: 1, Deadline: 1, Writes: 9}
		staleAt := write("node-stale", &stale, 1)
		for seq := 1; !write("node-ok", &ok, seq).After(staleAt); seq++ {
			// The apiserver's clock has not passed the stale write's
			// second yet: write again.
			time.Sleep(50 * time.Millisecond)
		}
		write("node-degraded", &degraded, 1)
		write("node-unreadable", nil, 1)
		// A Lease without the agents' label is no agent's.
		if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "not-an-agent"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}

		args := []string{"check", "--kubeconfig", kubeconfig, "--output", "json", "--probe.namespace", ns, "--probe.interval", "300ms", "--cycles", "1",
			"--agents.namespace", agents}
		code, stdout, stderr := runInProcess(args...)
		if code != checkOK {
			t.Fatalf("exit status %d with a degraded agent, want 0 (a note)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r := validateReport(t, stdout)
		if r.Agents == nil {
			t.Fatalf("no agents section; notes %q", r.Notes)
		}
		type nv struct{ node, verdict string }
		var got []nv
		for _, n := range r.Agents.Nodes {
			got = append(got, nv{n.Node, n.Verdict})
		}
		want := []nv{{"node-degraded", check.AgentDegraded}, {"node-stale", check.AgentStale}, {"node-unreadable", check.AgentUnreadable}, {"node-ok", check.AgentOK}}
		if !slices.Equal(got, want) {
			t.Errorf("agents' verdicts %v, want %v", got, want)
		}
		if want := (check.AgentTotals{Nodes: 4, OK: 1, Degraded: 1, Stale: 1, Unreadable: 1}); r.Agents.Namespace != agents || r.Agents.Totals != want {
			t.Errorf("agents in %q, totals %+v; want %s, %+v", r.Agents.Namespace, r.Agents.Totals, agents, want)
		}
		if d := r.Agents.Nodes[0]; d.Zone != "z2" || d.Writes != 41 || d.WriteErrors != 1 || d.Missed != 3 || d.Lost != 2 || d.Stalls != 1 || d.StreamEnds != 4 ||
			d.Relists != 5 || d.Unmeasurable != 6 || d.Latency == nil || *d.Latency != (check.AgentLatency{Max: 3}) || d.IntervalSeconds != 3600 {
			t.Errorf("node-degraded %+v, latency %+v: want the counts written", d, d.Latency)
		}
		if s := r.Agents.Nodes[1]; s.Written == nil || !s.Written.Equal(staleAt) || s.BehindSeconds == nil || *s.BehindSeconds < 1 {
			t.Errorf("node-stale: written %v, behind %v; want %s and at least 1s", s.Written, s.BehindSeconds, staleAt)
		}
		if o := r.Agents.Nodes[3]; o.Zone != "z1" || o.Latency == nil || *o.Latency != (check.AgentLatency{P50: 0.002, P90: 0.005, Max: 0.008}) || o.Missed != 0 {
			t.Errorf("node-ok %+v", o)
		}
		notes := strings.Join(r.Notes, "\n")
		for _, want := range []string{"node agents: 1 of 4 nodes degraded (node-degraded)", "node agents: 1 of 4 nodes stale (node-stale)", "node agents: 1 of 4 Leases unreadable (node-unreadable)"} {
			if !strings.Contains(notes, want) {
				t.Errorf("notes lack %q:\n%s", want, notes)
			}
		}
		if !r.OK || len(r.Problems) != 0 {
			t.Errorf("ok %v, problems %q: want agents only noted", r.OK, r.Problems)
		}
		assertNoMarkers(t, client, ns)

		// Told to, a degraded agent fails the check.
		code, stdout, stderr = runInProcess(append(args, "--agents.fail-on-degraded")...)
		if code != checkFailed {
			t.Fatalf("exit status %d with a degraded agent and --agents.fail-on-degraded, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r = validateReport(t, stdout)
		if want := "node agents: 1 of 4 nodes degraded (node-degraded)"; r.OK || len(r.Problems) != 1 || !strings.HasPrefix(r.Problems[0], want) {
			t.Errorf("ok %v, problems %q: want only %q...", r.OK, r.Problems, want)
		}
		assertNoMarkers(t, client, ns)

		// An identity that may write its markers but not list the agents'
		// Leases checks all the same, and the report says what to grant.
		limited, err := c.ServiceAccountConfig(ctx, ns, "no-agents")
		if err != nil {
			t.Fatal(err)
		}
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "no-agents", Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch", "create", "patch", "delete"}}},
		}
		if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "no-agents"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "no-agents"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "no-agents", Namespace: ns}},
		}
		if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		self := kubernetes.NewForConfigOrDie(limited).AuthorizationV1().SelfSubjectAccessReviews()
		localcluster.Eventually(t, 30*time.Second, "the grant in force", func() bool {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "delete", Resource: "configmaps"},
			}}
			r, err := self.Create(ctx, review, metav1.CreateOptions{})
			return err == nil && r.Status.Allowed
		})
		code, stdout, stderr = runInProcess("check", "--kubeconfig", writeKubeconfig(t, limited), "--output", "json", "--probe.namespace", ns,
			"--probe.interval", "300ms", "--cycles", "1", "--agents.namespace", agents, "--agents.fail-on-degraded")
		if code != checkOK {
			t.Fatalf("exit status %d without leave to list the agents, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r = validateReport(t, stdout)
		want2 := "node agents not read: this identity may not list the Leases in namespace check-agents-leases; grant list on leases.coordination.k8s.io in namespace check-agents-leases (a Role and RoleBinding there), or pass --agents.namespace= to skip the agents"
		if r.Agents != nil || !slices.Contains(r.Notes, want2) {
			t.Errorf("agents %+v, notes %q; want no section and the note %q", r.Agents, r.Notes, want2)
		}
		assertNoMarkers(t, client, ns)
	})

	t.Run("drained", func(t *testing.T) {
		// Every event arrives 1.5s after its write, so that when the
		// duration ends the latest writes are still on their way: each
		// acknowledged write must be judged all the same.
		ns := "check-drained"
		localcluster.CreateNamespacesForTest(t, client, ns)
		proxy := c.FaultProxyForTest(t)
		proxy.SetDelay(1500 * time.Millisecond)
		code, stdout, stderr := runInProcess("check", "--kubeconfig", writeKubeconfig(t, proxy.Config(admin)), "--output", "json",
			"--probe.namespace", ns, "--probe.interval", "300ms", "--probe.updates", "1", "--duration", "3s", "--objective.latency", "5s")
		if code != checkOK {
			t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r := validateReport(t, stdout)
		p := r.Probes[0]
		acked := p.Writes - p.WriteErrors
		for _, path := range p.Paths {
			if path.Expected != acked || path.Observed != acked {
				t.Errorf("path %s: %d events expected, %d observed; %d writes acknowledged, each owed on every path", path.Path, path.Expected, path.Observed, acked)
			}
		}
		if p.SuccessfulCycles != p.Cycles || p.Cycles == 0 || int64(p.Cycles)*3 != acked {
			t.Errorf("%d cycles judged, %d successful, %d writes acknowledged: every cycle written must be judged", p.Cycles, p.SuccessfulCycles, acked)
		}
		assertNoMarkers(t, client, ns)
	})

	t.Run("markers left", func(t *testing.T) {
		// An apiserver that refuses every delete keeps the check from
		// cleaning up: the report names what is left and how to delete it.
		ns := "check-left"
		localcluster.CreateNamespacesForTest(t, client, ns)
		proxy := c.FaultProxyForTest(t)
		proxy.Refuse(1<<30, func(r faultproxy.Request) bool { return r.Kind == "delete" && r.Namespace == ns }, 500)
		code, stdout, stderr := runInProcess("check", "--kubeconfig", writeKubeconfig(t, proxy.Config(admin)), "--output", "json",
			"--probe.namespace", ns, "--probe.interval", "300ms", "--probe.updates", "0", "--cycles", "2")
		if code != checkError {
			t.Errorf("exit status %d with markers left, want %d\nstdout:\n%s\nstderr:\n%s", code, checkError, stdout, stderr)
		}
		r := validateReport(t, stdout)
		left := allMarkers(t, client, ns)
		var reported []string
		for _, m := range r.MarkersLeft {
			if m.Kind != "ConfigMap" || m.Namespace != ns {
				t.Errorf("marker left %+v, want a ConfigMap in %s", m, ns)
			}
			reported = append(reported, m.Name)
		}
		slices.Sort(left)
		slices.Sort(reported)
		if len(left) == 0 || !slices.Equal(left, reported) {
			t.Errorf("markers left in the cluster %v, in the report %v", left, reported)
		}
		hint := fmt.Sprintf("kubectl delete configmaps -n %s -l watchprobe.io/replica=%s", ns, r.Replica)
		if r.OK || !strings.Contains(strings.Join(r.Problems, "\n"), hint) {
			t.Errorf("ok=%v, problems %q: want the markers left named with %q", r.OK, r.Problems, hint)
		}
		for _, name := range left {
			if err := client.CoreV1().ConfigMaps(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("markers held", func(t *testing.T) {
		// Another client puts a finalizer on the check's marker before
		// the probe's delete reaches the apiserver (the proxy holds the
		// delete until it has): the delete is unmeasurable on every path,
		// not lost, and the report names the marker left, its finalizer
		// and who set it.
		const manager, finalizer = "check-holder", "example.com/hold"
		ns := "check-held"
		localcluster.CreateNamespacesForTest(t, client, ns)
		proxy := c.FaultProxyForTest(t)
		proxy.Hold(1, func(r faultproxy.Request) bool { return r.Kind == "delete" && r.Namespace == ns })
		w, err := client.CoreV1().ConfigMaps(ns).Watch(context.Background(), metav1.ListOptions{LabelSelector: probe.LabelManagedBy + "=" + probe.ManagedByValue})
		if err != nil {
			t.Fatal(err)
		}
		held := make(chan string, 1)
		go func() {
			defer w.Stop()
			defer proxy.Release()
			for ev := range w.ResultChan() {
				if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Added {
					_, err := client.CoreV1().ConfigMaps(ns).Patch(context.Background(), cm.Name, types.MergePatchType,
						[]byte(`{"metadata":{"finalizers":["`+finalizer+`"]}}`), metav1.PatchOptions{FieldManager: manager})
					if err != nil {
						t.Errorf("the other client's patch of %s: %v", cm.Name, err)
					}
					held <- cm.Name
					return
				}
			}
		}()
		code, stdout, stderr := runInProcess("check", "--kubeconfig", writeKubeconfig(t, proxy.Config(admin)), "--output", "json",
			"--probe.namespace", ns, "--probe.interval", "300ms", "--probe.updates", "0", "--cycles", "1")
		if code != checkError {
			t.Errorf("exit status %d with a marker held, want %d\nstdout:\n%s\nstderr:\n%s", code, checkError, stdout, stderr)
		}
		r := validateReport(t, stdout)
		name := <-held
		want := []check.Marker{{Kind: "ConfigMap", Namespace: ns, Name: name, Finalizers: []string{finalizer}, HeldBy: []string{manager}}}
		if !slices.EqualFunc(r.MarkersLeft, want, func(a, b check.Marker) bool { return reflect.DeepEqual(a, b) }) {
			t.Errorf("markers left %+v, want %+v", r.MarkersLeft, want)
		}
		if hint := "held by another client's finalizers (" + finalizer + " of " + manager + ")"; !strings.Contains(strings.Join(r.Problems, "\n"), hint) {
			t.Errorf("problems %q: want the held marker named with %q", r.Problems, hint)
		}
		for _, path := range r.Probes[0].Paths {
			missed, lost := int64(0), int64(0)
			for _, n := range path.Missed {
				missed += n
			}
			for _, n := range path.Lost {
				lost += n
			}
			if path.Counts["unmeasurable"] != 1 || path.Counts["foreign_changes"] != 1 || missed != 0 || lost != 0 {
				t.Errorf("path %s: unmeasurable %d, foreign changes %d, missed %d, lost %d; want the held delete unmeasurable once, the finalizer a foreign change, nothing missed",
					path.Path, path.Counts["unmeasurable"], path.Counts["foreign_changes"], missed, lost)
			}
		}
		if _, err := client.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{FieldManager: manager}); err != nil {
			t.Fatal(err)
		}
		localcluster.Eventually(t, 30*time.Second, "the held marker gone", func() bool { return len(allMarkers(t, client, ns)) == 0 })
	})

	t.Run("interrupted", func(t *testing.T) {
		ns := "check-interrupted"
		localcluster.CreateNamespacesForTest(t, client, ns)
		var stdout, stderr bytes.Buffer
		// Many updates make a cycle long, so that the interrupt finds a
		// live marker.
		cmd := exec.Command(exporterBin, "check", "--kubeconfig", kubeconfig, "--probe.namespace", ns,
			"--probe.interval", "100ms", "--probe.updates", "100", "--cycles", "1000")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		localcluster.Eventually(t, 60*time.Second, "a live marker", func() bool { return len(allMarkers(t, client, ns)) > 0 })
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("check did not exit within 30s of SIGINT\nstderr:\n%s", &stderr)
		}
		if code := cmd.ProcessState.ExitCode(); code != checkError {
			t.Errorf("exit status %d after SIGINT, want %d", code, checkError)
		}
		if left := allMarkers(t, client, ns); len(left) != 0 {
			t.Errorf("markers left after SIGINT: %v\nstderr:\n%s", left, &stderr)
		}
		if !strings.Contains(stdout.String(), "interrupted before the check completed") {
			t.Errorf("the report does not say it was interrupted:\n%s", &stdout)
		}
	})
}

// newCheckProxy starts a fault-injecting proxy in front of c's apiserver.
// `watchprobe check` with controller probes against a real
// kube-controller-manager: the report has a line per controller with the
// changes it answered, and no marker object is left; with the manager
// frozen, the check fails and its problem names the controller.
func TestCheckControllers(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	kubeconfig := writeKubeconfig(t, admin)
	kcm := localcluster.StartControllerManagerForTest(t, c, localcluster.ControllerManagerOptions{
		LeaseDuration: time.Minute, RenewDeadline: 45 * time.Second, // a freeze is not a lost lease
	})
	localcluster.CreateNamespacesForTest(t, client, "check-controllers")
	config := filepath.Join(t.TempDir(), "probes.yml")
	writeFile(t, config, `probes:
  - name: controllers
    namespace: check-controllers
    interval: 500ms
    deadline: 20s
    controllers: [deployment, replicaset]
`)
	// Anomalies are allowed and the objective's latency is long: this is
	// about what the report holds of the controllers, not about a loaded
	// machine's slowest event or reaction.
	args := []string{"check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", "6", "--objective.latency", "20s", "--objective.allowed-anomalies", "1000"}
	noMarkerObjects := func(t *testing.T) {
		t.Helper()
		ctx := context.Background()
		d, err := client.AppsV1().Deployments("check-controllers").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := client.AppsV1().ReplicaSets("check-controllers").List(ctx, metav1.ListOptions{LabelSelector: probe.LabelManagedBy + "=" + probe.ManagedByValue})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Items)+len(r.Items) != 0 {
			t.Errorf("%d deployments and %d replicaset markers left after the check", len(d.Items), len(r.Items))
		}
	}

	t.Run("answering", func(t *testing.T) {
		code, stdout, stderr := runInProcess(append(args, "--output", "json")...)
		if code != checkOK {
			t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		r := validateReport(t, stdout)
		ctls := r.Probes[0].Controllers
		if len(ctls) != 2 || ctls[0].Controller != "deployment" || ctls[1].Controller != "replicaset" {
			t.Fatalf("controllers in the report: %+v", ctls)
		}
		for _, ctl := range ctls {
			// How many changes fit in the cycles depends on when the
			// marker's watch synced: at least one.
			if ctl.Changes == 0 || ctl.Reacted == 0 || ctl.Reacted > ctl.Changes || ctl.Lost != 0 || ctl.ChangeErrors != 0 || ctl.Latency == nil || !ctl.OK {
				t.Errorf("%s: %+v", ctl.Controller, ctl)
			}
		}
		noMarkerObjects(t)

		code, stdout, _ = runInProcess(args...)
		if code != checkOK || !strings.Contains(stdout, "  controller deployment: ") || !strings.Contains(stdout, "  controller replicaset: ") {
			t.Errorf("exit status %d, text report without a line per controller:\n%s", code, stdout)
		}
		t.Logf("the text report:\n%s", stdout)
		noMarkerObjects(t)
	})

	t.Run("frozen", func(t *testing.T) {
		if err := kcm.Pause(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := kcm.Continue(); err != nil {
				t.Error(err)
			}
		}()
		code, stdout, stderr := runInProcess(append(args, "--output", "json")...)
		if code != checkFailed {
			t.Fatalf("exit status %d with the controller-manager frozen, want %d\nstdout:\n%s\nstderr:\n%s", code, checkFailed, stdout, stderr)
		}
		r := validateReport(t, stdout)
		for _, name := range []string{"deployment", "replicaset"} {
			want := "probe controllers, controller " + name + ": answered none of "
			if !slices.ContainsFunc(r.Problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
				t.Errorf("no problem starting %q in %q", want, r.Problems)
			}
		}
		for _, p := range r.Probes[0].Paths {
			if !p.OK {
				t.Errorf("path %s fails with only the controller-manager frozen: %v", p.Path, p.Problems)
			}
		}
		noMarkerObjects(t)
	})
}

// allMarkers lists every watchprobe marker in ns, whoever wrote it.
func allMarkers(t *testing.T, client kubernetes.Interface, ns string) []string {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: probe.LabelManagedBy + "=" + probe.ManagedByValue}
	names := configMapNames(t, client, ns, sel.LabelSelector)
	leases, err := client.CoordinationV1().Leases(ns).List(context.Background(), sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		names = append(names, l.Name)
	}
	return names
}

func assertNoMarkers(t *testing.T, client kubernetes.Interface, ns string) {
	t.Helper()
	if left := allMarkers(t, client, ns); len(left) != 0 {
		t.Errorf("markers left in %s after the check: %v", ns, left)
	}
}
