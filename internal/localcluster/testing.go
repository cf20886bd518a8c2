package localcluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
)

// StartForTest starts a cluster for t and stops it when t ends. It fails the
// test, with the log tails, if the cluster cannot start: a missing control
// plane is a broken test environment, never a reason to skip.
func StartForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), opts)
	return stopWhenDone(t, "the local control plane", c, err)
}

// KubeVersionForTest is the k8s.io/kubernetes release ("v1.33.13") of the
// kube-apiserver StartForTest would start with opts, read from the
// binary's build information without starting it: for a test that starts
// it with flags only some releases need.
func KubeVersionForTest(t testing.TB, opts Options) string {
	t.Helper()
	binDir, err := findBinDir(opts.BinDir)
	if err == nil {
		var v string
		if v, err = moduleVersion(binariesFor(binDir, opts).apiserver, "k8s.io/kubernetes"); err == nil {
			return v
		}
	}
	t.Fatalf("the kube-apiserver's release: %v", err)
	return ""
}

// StartHAForTest starts an HA cluster for t and stops it when t ends,
// failing the test if it cannot start, as StartForTest does.
func StartHAForTest(t testing.TB, opts HAOptions) *HACluster {
	t.Helper()
	h, err := StartHA(context.Background(), opts)
	return stopWhenDone(t, "the local HA control plane", h, err)
}

// StartNodeForTest starts a cluster with a node for t and stops it when t
// ends, failing the test if it cannot start or does not stop cleanly. Nodes
// run one at a time on a machine: it waits while another test's node runs.
func StartNodeForTest(t testing.TB, opts Options) *Node {
	t.Helper()
	n, err := StartNode(context.Background(), opts)
	return stopWhenDone(t, "the local node", n, err)
}

// running is a part of the control plane a test started.
type running interface {
	Stop() error
	LogTail(lines int) string
}

// stopWhenDone fails t if starting what (r, err) failed, and otherwise
// stops it when t ends, showing the last lines of its log if t failed: the
// failure of a test is often in what the control plane logged.
func stopWhenDone[R running](t testing.TB, what string, r R, err error) R {
	t.Helper()
	if err != nil {
		t.Fatalf("starting %s: %v", what, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's last log lines:\n%s", what, r.LogTail(40))
		}
		if err := r.Stop(); err != nil {
			t.Errorf("stopping %s: %v", what, err)
		}
	})
	return r
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

// HostAddressForTest is an address of this machine that is not loopback,
// for a server the apiserver must reach through an EndpointSlice, whose
// validation refuses loopback: the root end of a veth pair into a network
// namespace the test makes and removes when it ends. Traffic to it stays
// on this machine. It needs root, as the HA clusters do.
func HostAddressForTest(t testing.TB) netip.Addr {
	t.Helper()
	l := allocateForTest(t)
	t.Cleanup(func() {
		if err := l.delete(); err != nil {
			t.Errorf("removing the test's network namespace: %v", err)
		}
	})
	return l.hostAddr
}

// allocateForTest takes a slot for t, or fails it where network
// namespaces cannot be made; the caller removes it.
func allocateForTest(t testing.TB) *netLink {
	t.Helper()
	if err := checkNetnsSupport(); err != nil {
		t.Fatal(err)
	}
	l, err := allocateLink()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// CertificateForTest issues, from a CA of its own, a certificate for
// commonName and the loopback addresses, good for serving and as a client,
// for a test with no cluster to issue one; it returns the CA's certificate
// to trust with it. All three are PEM.
func CertificateForTest(t testing.TB, commonName string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	p, err := newPKI()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err = p.issueFor(commonName, nil, true, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		t.Fatal(err)
	}
	return p.caPEM, certPEM, keyPEM
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

// CreatePods creates n pods, load-00000 and on, in namespace, 32 at a
// time: objects for the apiserver to hold and count that no node runs
// (their image is none). client's QPS limits how fast.
func CreatePods(ctx context.Context, client kubernetes.Interface, namespace string, n int) error {
	errs := make([]error, n)
	workqueue.ParallelizeUntil(ctx, 32, n, func(i int) {
		_, errs[i] = client.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%05d", i)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}},
		}, metav1.CreateOptions{})
	})
	return errors.Join(errs...)
}

// CreateNamespacesForTest is CreateNamespaces for a test: an error fails it.
func CreateNamespacesForTest(t testing.TB, client kubernetes.Interface, names ...string) {
	t.Helper()
	if err := CreateNamespaces(context.Background(), client, names...); err != nil {
		t.Fatal(err)
	}
}

// FaultProxyForTest starts a fault proxy in front of apiserver a alone,
// serving HTTP/2 as the apiserver does, with a certificate for ServerName
// and loopback signed by the cluster's CA: behind a load balancer a client
// of the cluster cannot tell it from the apiserver. It forwards the
// client's bearer token (the admin config's), not a client certificate.
func (a *APIServer) FaultProxyForTest(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	names := loopbackNames()
	names.dns = append(names.dns, ServerName)
	cert, key, err := a.h.base.pki.issueNamed("faultproxy", nil, names, x509.ExtKeyUsageServerAuth)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.NewHTTP2("https://"+a.Address(), a.h.base.pki.caPEM, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
