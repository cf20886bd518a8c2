package agent

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// runAgent runs an agent for node as cfg until the test ends, writing
// every second.
func runAgent(t *testing.T, cfg *rest.Config, node, ns string) (*Agent, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	a, err := New(Options{Config: cfg, Node: node, Namespace: ns, WriteBudget: 50, MinInterval: time.Second,
		Deadline: 3 * time.Second, StallAfter: 10 * time.Second, WatchTimeout: 5 * time.Minute, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("the agent: %v", err)
		}
	})
	return a, reg
}

func counter(t *testing.T, reg *prometheus.Registry, f *metrics.Family) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() == f.FullName() && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", f.FullName())
	return 0
}

// On the real apiserver: an agent whose Role lacks watch is refused, and
// counts its writes unmeasurable, never the node's misses; an agent whose
// Lease is deleted makes it again and goes on measuring.
func TestAgentOnTheAPIServer(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{})
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	const ns = "watchprobe-agents"

	t.Run("refused", func(t *testing.T) {
		// A Role without watch, as a chart's RBAC gone wrong.
		cfg, err := c.ServiceAccountConfig(ctx, ns, "no-watch")
		if err != nil {
			t.Fatal(err)
		}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "no-watch", Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "patch"}}}}
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "no-watch", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "no-watch"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "no-watch", Namespace: ns}}}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		a, reg := runAgent(t, cfg, "node-refused", ns)
		localcluster.Eventually(t, time.Minute, "the agent refused, and writes judged since", func() bool {
			return testutil.ToFloat64(a.sink.m.Refused) == 1 && counter(t, reg, metrics.AgentUnmeasurable) >= 2
		})
		if got := counter(t, reg, metrics.AgentEventsMissed); got != 0 {
			t.Errorf("a refused agent counted %g missed events, want none", got)
		}
		if st := a.Status(); !st.Refused || st.Degraded() {
			t.Errorf("status %+v: want refused and not degraded", st)
		}
	})

	t.Run("lease deleted", func(t *testing.T) {
		a, reg := runAgent(t, c.AdminConfig(), "node-lease", ns)
		localcluster.Eventually(t, time.Minute, "two writes delivered", func() bool {
			return counter(t, reg, metrics.AgentWrites) >= 2 && a.Synced()
		})
		if err := admin.CoordinationV1().Leases(ns).Delete(ctx, "node-lease", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		before := counter(t, reg, metrics.AgentWrites)
		localcluster.Eventually(t, time.Minute, "the Lease made again and written", func() bool {
			_, err := admin.CoordinationV1().Leases(ns).Get(ctx, "node-lease", metav1.GetOptions{})
			return err == nil && counter(t, reg, metrics.AgentWrites) >= before+2
		})
		localcluster.Eventually(t, time.Minute, "healthy again", func() bool { return testutil.ToFloat64(a.sink.m.Healthy) == 1 })
		if got := counter(t, reg, metrics.AgentEventsLost); got != 0 {
			t.Errorf("lost %g events around the Lease's deletion, want none", got)
		}
	})
}
