package localcluster

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
)

// StartForTest starts a cluster for t and stops it when t ends. It fails the
// test, with the log tails, if the cluster cannot start: a missing control
// plane is a broken test environment, never a reason to skip.
func StartForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the local control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the local control plane: %v", err)
		}
	})
	return c
}

// StartHAForTest starts an HA cluster for t and stops it when t ends,
// failing the test if it cannot start, as StartForTest does.
func StartHAForTest(t testing.TB, opts HAOptions) *HACluster {
	t.Helper()
	h, err := StartHA(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the local HA control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the HA control plane's last log lines:\n%s", h.LogTail(40))
		}
		if err := h.Stop(); err != nil {
			t.Errorf("stopping the local HA control plane: %v", err)
		}
	})
	return h
}

// StartNodeForTest starts a cluster with a node for t and stops it when t
// ends, failing the test if it cannot start or does not stop cleanly. Nodes
// run one at a time on a machine: it waits while another test's node runs.
func StartNodeForTest(t testing.TB, opts Options) *Node {
	t.Helper()
	n, err := StartNode(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the local node: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's last log lines:\n%s", n.LogTail(30))
		}
		if err := n.Stop(); err != nil {
			t.Errorf("stopping the local node: %v", err)
		}
	})
	return n
}

// FaultProxyForTest starts a fault proxy in front of c's apiserver, serving
// a certificate of c's CA so that c's clients trust it, and closes it when
// t ends.
func (c *Cluster) FaultProxyForTest(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	cert, key, err := c.IssueServing()
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(c.APIServerURL, c.CAPEM(), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// Eventually polls cond every 20 ms until it holds, and fails the test,
// saying what was awaited, if it does not within the bound. Bounds are
// generous: the machine is shared and noisy.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyShows(t, within, what, cond, nil)
}

// EventuallyShows is Eventually that, on failure, also quotes show (if not
// nil): what stood at the deadline, read only then.
func EventuallyShows(t testing.TB, within time.Duration, what string, cond func() bool, show func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			if show != nil {
				what += "; at the deadline: " + show()
			}
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ToolForTest is Tool for a test: a missing binary fails it, saying how to
// build it.
func ToolForTest(t testing.TB, name string) string {
	t.Helper()
	path, err := Tool(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// CreateNamespaces creates the namespaces names, in which a test or a
// bench phase writes alone.
func CreateNamespaces(ctx context.Context, client kubernetes.Interface, names ...string) error {
	for _, name := range names {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// CreateNamespacesForTest is CreateNamespaces for a test: an error fails it.
func CreateNamespacesForTest(t testing.TB, client kubernetes.Interface, names ...string) {
	t.Helper()
	if err := CreateNamespaces(context.Background(), client, names...); err != nil {
		t.Fatal(err)
	}
}
