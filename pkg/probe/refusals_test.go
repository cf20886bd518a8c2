package probe

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// The probe's own environment refusing its writes (an admission policy, a
// quota, RBAC, its namespace gone) is not List-Watch: each refusal is
// counted by its cause, never as a write error, and owes no event on any
// path, so that nothing of it enters the SLI. Each test takes the real
// kube-apiserver's answer.

// refusedRun starts a probe of cfg with opts (its Config), a log of its
// own that the test reads, and waits until n of its creates were refused.
func refusedRun(t *testing.T, cfg config.Config, opts Options, cause string, n float64) (*testProbe, *logTail) {
	t.Helper()
	tp, log := loggedProbe(t, cfg, opts)
	localcluster.Eventually(t, 90*time.Second, "refused creates", func() bool {
		return tp.value(metrics.WritesRefused, cfg.Name, metrics.VerbCreate, cause) >= n
	})
	return tp, log
}

// loggedProbe starts a probe of cfg with opts (its Config) and a log of
// its own that the test reads.
func loggedProbe(t *testing.T, cfg config.Config, opts Options) (*testProbe, *logTail) {
	t.Helper()
	log := &logTail{}
	opts.Replica, opts.OrphanAge = "r1", time.Hour
	opts.Sinks = []judge.Sink{&judge.LogSink{Logger: slog.New(slog.NewTextHandler(log, nil))}}
	return startProbeWith(t, cfg, opts), log
}

// expectOnlyRefused checks, once the probe has drained, that every write
// sent and not acknowledged was refused for cause (creates only: a refused
// create ends its cycle), none counted a write error, and that each path
// observed every acknowledged write and missed none: the refused ones owe
// nothing.
func expectOnlyRefused(t *testing.T, tp *testProbe, cause string) {
	t.Helper()
	tp.drained(t)
	snap := tp.at()
	name := tp.cfg.Name
	for _, verb := range []string{metrics.VerbCreate, metrics.VerbUpdate, metrics.VerbDelete} {
		sent, acked := snap.value(metrics.Writes, name, verb), float64(snap.acked(t, verb))
		want := 0.0
		if verb == metrics.VerbCreate {
			want = sent - acked
		}
		if got := snap.value(metrics.WritesRefused, name, verb, cause); got != want {
			t.Errorf("%s refused (%s) = %g, want %g (%g sent, %g acknowledged)", verb, cause, got, want, sent, acked)
		}
		if want != sent-acked {
			t.Errorf("%s: %g sent, %g acknowledged: a %s failed", verb, sent, acked, verb)
		}
	}
	if got, want := snap.sum(metrics.WritesRefused), snap.value(metrics.WritesRefused, name, metrics.VerbCreate, cause); got != want {
		t.Errorf("writes refused = %g, want only the %g creates refused for %s", got, want, cause)
	}
	if got := snap.sum(metrics.WriteErrors); got != 0 {
		t.Errorf("write errors = %g, want 0: a refusal is not the control plane's failure", got)
	}
	for _, path := range tp.cfg.Paths {
		ps := snap.path(path)
		for event, verb := range verbOf {
			if got, want := ps.value(metrics.EventsObserved, event), float64(snap.acked(t, verb)); got != want {
				t.Errorf("%s: observed %s = %g, want the %g acknowledged", path, event, got, want)
			}
		}
		if got := ps.missed(); got != 0 {
			t.Errorf("%s: missed %g: a refused write owes no event", path, got)
		}
		if got := ps.overUnmeasurable(); got != 0 {
			t.Errorf("%s: unmeasurable %g, want 0", path, got)
		}
	}
}

// overUnmeasurable sums the path's unmeasurable writes over their reasons.
func (p exposedPath) overUnmeasurable() float64 {
	var n float64
	for _, reason := range metrics.UnmeasurableReasons {
		n += p.value(metrics.EventsUnmeasurable, reason)
	}
	return n
}

// wantLogged fails unless the probe's log has a line with every one of
// want.
func wantLogged(t *testing.T, log *logTail, want ...string) {
	t.Helper()
	for _, line := range strings.Split(log.String(), "\n") {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			return
		}
	}
	t.Errorf("no log line says all of %q; the log:\n%s", want, log.String())
}

// refusedBy waits until a dry-run create of a marker in ns is refused with
// an answer that says want: the apiserver's admission has caught up with
// the policy or quota the test made.
func refusedBy(t *testing.T, client kubernetes.Interface, ns, want string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "dry-run-", Labels: map[string]string{LabelManagedBy: ManagedByValue}}}
	var last error
	localcluster.EventuallyShows(t, 60*time.Second, "admission refuses a marker", func() bool {
		_, last = client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), want)
	}, func() string { return "the latest dry run: " + errString(last) })
}

func errString(err error) string {
	if err == nil {
		return "admitted"
	}
	return err.Error()
}

// A ValidatingAdmissionPolicy that denies the markers (built into
// kube-apiserver: no webhook server): every create refused as
// admission_denied, the policy and its binding named in the log.
func TestAdmissionPolicyRefusal(t *testing.T) {
	ctx := context.Background()
	ns := "refused-policy"
	client := inNamespace(t, ns)
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "watchprobe-test-deny-markers"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `!has(object.metadata.labels) || !('` + LabelManagedBy + `' in object.metadata.labels) || object.metadata.labels['` + LabelManagedBy + `'] != '` + ManagedByValue + `'`,
				Message:    "watchprobe's markers are not welcome here",
			}},
		},
	}
	if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "watchprobe-test-deny-markers-here"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			// Cluster-wide objects: this test's namespace only.
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			}},
		},
	}
	if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
		_ = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{})
	})
	refusedBy(t, client, ns, policy.Name)

	tp, log := refusedRun(t, fastConfig("policy", ns), Options{Config: cluster.AdminConfig()}, metrics.RefusedAdmission, 5)
	expectOnlyRefused(t, tp, metrics.RefusedAdmission)
	if got := tp.success(); got != 0 {
		t.Errorf("probe_success = %g with every create refused, want 0", got)
	}
	wantLogged(t, log, "marker write refused", "cause=admission_denied",
		`by="ValidatingAdmissionPolicy 'watchprobe-test-deny-markers' with binding 'watchprobe-test-deny-markers-here'"`, "fix=")
	tp.stopLeavingNoMarkers(t, client)
}

// A ResourceQuota of one ConfigMap, held by a ConfigMap already there (as
// kube-root-ca.crt holds it in every namespace of a real cluster): every
// create refused as quota_exceeded.
func TestQuotaRefusal(t *testing.T) {
	ctx := context.Background()
	ns := "refused-quota"
	client := inNamespace(t, ns)
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "occupant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := corev1.ResourceList{"count/configmaps": resource.MustParse("1")}
	quota, err := client.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "one-configmap"},
		Spec:       corev1.ResourceQuotaSpec{Hard: one},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The usage kube-controller-manager's quota controller would record; no
	// controller-manager runs beside this control plane.
	quota.Status = corev1.ResourceQuotaStatus{Hard: one, Used: one}
	if _, err := client.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, quota, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	refusedBy(t, client, ns, "exceeded quota: one-configmap")

	tp, log := refusedRun(t, fastConfig("quota", ns), Options{Config: cluster.AdminConfig()}, metrics.RefusedQuota, 5)
	expectOnlyRefused(t, tp, metrics.RefusedQuota)
	wantLogged(t, log, "marker write refused", "cause=quota_exceeded", "exceeded quota: one-configmap")
	tp.stopLeavingNoMarkers(t, client)
}

// The probe's client bound to a Role without create: every create refused
// as forbidden, while its paths list and watch.
func TestForbiddenRefusal(t *testing.T) {
	ns := "refused-rbac"
	client := inNamespace(t, ns)
	config := grant(t, client, ns, "no-create", "get", "list", "watch", "update", "patch", "delete")
	tp, log := refusedRun(t, fastConfig("rbac", ns), Options{Config: config}, metrics.RefusedForbidden, 5)
	expectOnlyRefused(t, tp, metrics.RefusedForbidden)
	for _, path := range tp.cfg.Paths {
		for _, reason := range metrics.PathRefusals {
			if got := tp.path(path).value(metrics.PathRefused, reason); got != 0 {
				t.Errorf("%s: path_refused{%s} = %g, want 0: it may list and watch", path, reason, got)
			}
		}
	}
	wantLogged(t, log, "marker write refused", "cause=forbidden", `cannot create resource \"configmaps\"`)
	tp.stopLeavingNoMarkers(t, client)
}

// The marker namespace deleted under a running probe: while it terminates
// and once it is gone, every create is refused as namespace_missing, and
// the cycles before it were observed in full.
func TestNamespaceDeletedRefusal(t *testing.T) {
	ctx := context.Background()
	ns := "refused-namespace"
	client := inNamespace(t, ns)
	cfg := fastConfig("nsgone", ns)
	tp, log := loggedProbe(t, cfg, Options{Config: cluster.AdminConfig()})
	tp.settled(t, 2)
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := func() float64 {
		return tp.value(metrics.WritesRefused, cfg.Name, metrics.VerbCreate, metrics.RefusedNamespaceMissing)
	}
	localcluster.Eventually(t, 60*time.Second, "creates refused while the namespace terminates", func() bool { return refused() >= 3 })
	wantLogged(t, log, "marker write refused", "cause=namespace_missing", "because it is being terminated")
	// No namespace controller runs beside this control plane: the test
	// finalizes the namespace, as that controller does once it is empty,
	// and the namespace is gone.
	nsObj, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nsObj.Spec.Finalizers = nil
	if _, err := client.CoreV1().Namespaces().Finalize(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	localcluster.Eventually(t, 60*time.Second, "the namespace gone", func() bool {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	before := refused()
	localcluster.Eventually(t, 60*time.Second, "creates refused once the namespace is gone", func() bool { return refused() >= before+3 })
	expectOnlyRefused(t, tp, metrics.RefusedNamespaceMissing)
	wantLogged(t, log, "marker write refused", "cause=namespace_missing", `namespaces \"`+ns+`\" not found`)
	tp.stopLeavingNoMarkers(t, client)
}

// A path that may not list or watch is a configuration verdict, not the
// cluster's: path_refused says forbidden, its requests are counted failed
// with their code, the writes due while it is refused are unmeasurable
// there, never missed or lost, and readiness names the probe, the path
// and the error.
func TestPathRefusedUnmeasurable(t *testing.T) {
	t.Parallel() // most of its time is the paths giving up on syncing
	ns := "no-watch"
	client := inNamespace(t, ns)
	cfg := fastConfig("nowatch", ns)
	cfg.Deadline = model.Duration(time.Second)
	tp := startProbe(t, grant(t, client, ns, "no-watch", "get", "create", "update", "patch", "delete"), cfg, "r1", time.Hour)
	localcluster.Eventually(t, 90*time.Second, "unmeasurable writes", func() bool {
		return tp.path(metrics.PathWatch).value(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused) >= 3
	})
	err := tp.Synced()
	if err == nil {
		t.Fatal("ready although the paths cannot list")
	}
	for _, want := range []string{`probe "nowatch"`, "forbidden"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("readiness error %q does not say %s", err, want)
		}
	}
	if !apierrors.IsForbidden(errors.Unwrap(err)) {
		t.Errorf("readiness error %q does not wrap the apiserver's 403", err)
	}
	tp.drained(t)
	snap := tp.at()
	var acked float64
	for _, verb := range verbOf {
		acked += float64(snap.acked(t, verb))
	}
	if acked == 0 {
		t.Fatal("no write acknowledged")
	}
	for _, path := range cfg.Paths {
		ps := snap.path(path)
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"unmeasurable (path_refused)", ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused), acked},
			{"missed", ps.missed(), 0},
			{"lost", ps.lost(), 0},
			{"observed", ps.value(metrics.EventsObserved, metrics.EventAdded) + ps.value(metrics.EventsObserved, metrics.EventModified) + ps.value(metrics.EventsObserved, metrics.EventDeleted), 0},
			{"path_refused{forbidden}", ps.value(metrics.PathRefused, metrics.PathForbidden), 1},
			{"path_refused{not_found}", ps.value(metrics.PathRefused, metrics.PathNotFound), 0},
			{"path_up", ps.value(metrics.PathUp), 0},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s = %g, want %g", path, c.what, c.got, c.want)
			}
		}
		if got := ps.value(metrics.RequestsFailed, metrics.RequestList, "403"); got < 1 {
			t.Errorf("%s: failed lists (403) = %g, want at least 1", path, got)
		}
		expectEnds(t, path, ps, nil)
		if got := ps.histogram(metrics.WatchDuration).GetSampleCount(); got != 0 {
			t.Errorf("%s: %d watch lifetimes recorded with no stream ever open", path, got)
		}
	}
	if got := snap.sum(metrics.WritesRefused) + snap.sum(metrics.WriteErrors); got != 0 {
		t.Errorf("%g writes refused or failed, want 0: only the paths are refused", got)
	}
	for _, down := range tp.PathsDown() {
		if !strings.Contains(down, ": refused (forbidden): ") {
			t.Errorf("paths down %q does not say refused (forbidden)", down)
		}
	}
}

// A delete answered, after the apiserver committed it, with a 500 and
// Retry-After, as kube-apiserver answers when etcd does not answer in
// time: client-go sends it again and gets a 404. The marker is gone by the
// probe's own delete, not another client's: no refusal, and the paths'
// DELETED events are timed, not counted after a failed write.
func TestRetriedDeleteIsNoRefusal(t *testing.T) {
	ns := "retried-delete"
	inNamespace(t, ns)
	proxy := newProxy(t, cluster)
	proxy.CommitThenRetry(1, requestIn(ns, "delete"))
	cfg := fastConfig("retried", ns)
	tp := startProbe(t, proxy.Config(cluster.AdminConfig()), cfg, "r1", time.Hour)
	localcluster.Eventually(t, 60*time.Second, "the delete answered 500 after its commit", func() bool {
		return proxy.Applied(faultproxy.CommitThenRetry) == 1
	})
	tp.settled(t, 3)
	tp.drained(t)
	snap := tp.at()
	if got := snap.value(metrics.WritesRefused, cfg.Name, metrics.VerbDelete, metrics.RefusedNotFound); got != 0 {
		t.Errorf("deletes refused as not_found = %g, want 0", got)
	}
	acked := snap.acked(t, metrics.VerbDelete)
	for _, path := range config.DefaultPaths {
		ps := snap.path(path)
		if got := ps.histogram(metrics.EventLatency, metrics.EventDeleted).GetSampleCount(); got != acked {
			t.Errorf("%s: deleted latency samples = %d, acknowledged deletes %d", path, got, acked)
		}
		expectAnomalies(t, path, ps, nil)
	}
}

// A path refused by the apiserver whose checks over fresh connections
// fail otherwise (a 503) is neither the exporter's own refusal nor known
// to be the control plane's: the refusal is unconfirmed, and says so in
// the log and on the paths down, with the check's error. Each check
// answers the writes held for it: they are missed there, never
// unmeasurable.
func TestPathRefusalUnconfirmed(t *testing.T) {
	t.Parallel()
	ns := "refusal-unconfirmed"
	localcluster.CreateNamespacesForTest(t, adminClient(t), ns)
	proxy := newProxy(t, cluster)
	listOrWatch := requestIn(ns, "list", "watch")
	check := func(r faultproxy.Request) bool { return strings.HasSuffix(r.UserAgent, refusalCheckSuffix) }
	proxy.Refuse(1<<30, func(r faultproxy.Request) bool { return listOrWatch(r) && check(r) }, http.StatusServiceUnavailable)
	proxy.Refuse(1<<30, func(r faultproxy.Request) bool { return listOrWatch(r) && !check(r) }, http.StatusForbidden)
	cfg := fastConfig("unconfirmed", ns)
	cfg.Deadline = model.Duration(time.Second)
	log := &logTail{}
	logger := slog.New(slog.NewTextHandler(log, nil))
	tp := startProbeWith(t, cfg, Options{Config: proxy.Config(cluster.AdminConfig()), Replica: "r1", OrphanAge: time.Hour,
		Logger: logger, Sinks: []judge.Sink{&judge.LogSink{Logger: logger}}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the probe's last log lines:\n%s", log.String())
		}
	})
	unconfirmed := func() bool {
		down := tp.PathsDown()
		for _, d := range down {
			if !strings.Contains(d, "refusal unconfirmed: the check failed: ") {
				return false
			}
		}
		return len(down) == len(cfg.Paths)
	}
	localcluster.EventuallyShows(t, 2*time.Minute, "both paths' refusals unconfirmed", unconfirmed, func() string {
		return strings.Join(tp.PathsDown(), "; ")
	})
	before := map[string]float64{}
	for _, path := range cfg.Paths {
		before[path] = tp.path(path).missed()
	}
	localcluster.Eventually(t, 2*time.Minute, "writes missed on both paths since", func() bool {
		for _, path := range cfg.Paths {
			if tp.path(path).missed() < before[path]+2 {
				return false
			}
		}
		return true
	})
	for _, path := range cfg.Paths {
		ps := tp.path(path)
		if got := ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused); got != 0 {
			t.Errorf("%s: unmeasurable (path_refused) = %g, want 0: no check confirmed the refusal", path, got)
		}
		if got := ps.value(metrics.PathRefused, metrics.PathForbidden); got != 0 {
			t.Errorf("%s: path_refused{forbidden} = %g, want 0", path, got)
		}
	}
	if got := proxy.Applied(faultproxy.Refuse); got < 1 {
		t.Errorf("the proxy refused %d requests", got)
	}
	wantLogged(t, log, "level=WARN", "refusal unconfirmed", "refused by faultproxy")
}
