package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/tcpproxy"
)

// With EtcdTLS, etcd speaks only mutual TLS: kube-apiserver works through
// its own client certificate, a client holding EtcdClientFiles reads etcd,
// a client without a certificate is turned away, and a tcpproxy in front of
// etcd can fault one client while the others carry on.
func TestEtcdTLS(t *testing.T) {
	ctx := context.Background()
	c := StartForTest(t, Options{EtcdTLS: true})
	if !strings.HasPrefix(c.EtcdURL, "https://127.0.0.1:") {
		t.Fatalf("EtcdURL = %q, want https on 127.0.0.1", c.EtcdURL)
	}
	const key = "/registry/configmaps/default/over-tls"

	t.Run("apiserver", func(t *testing.T) {
		admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "over-tls"}, Data: map[string]string{"k": "v"}}
		if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("kube-apiserver cannot write through etcd's TLS: %v", err)
		}
		got, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "over-tls", metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v" {
			t.Fatalf("reading the ConfigMap back: %v, %v", got, err)
		}
		// etcd's HTTP gateway is a TLS client of etcd itself.
		if err := c.BumpEtcdRevision(ctx); err != nil {
			t.Fatalf("writing through etcd's HTTP gateway: %v", err)
		}
	})

	// The files, not the cluster's in-memory config, are what another
	// client gets: build its TLS from them alone.
	certFile, keyFile, caFile := c.EtcdClientFiles()
	for _, f := range []string{certFile, keyFile, caFile} {
		if filepath.Dir(f) != c.Dir() {
			t.Fatalf("EtcdClientFiles gave %q, outside the cluster directory %s", f, c.Dir())
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", caFile)
	}
	withCert := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots}

	t.Run("client files", func(t *testing.T) {
		client := newEtcdClient(t, c.EtcdURL, withCert)
		getCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := client.Get(getCtx, key)
		if err != nil {
			t.Fatalf("etcd refused a client holding EtcdClientFiles: %v", err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("etcd has %d keys at %s, want 1", len(resp.Kvs), key)
		}
	})

	t.Run("no client certificate", func(t *testing.T) {
		// clientv3 waits for a usable connection (gRPC WaitForReady) and
		// then reports only the context's deadline: the TLS refusal never
		// reaches the caller of Get. Bounded failure is all it can show.
		client := newEtcdClient(t, c.EtcdURL, &tls.Config{RootCAs: roots})
		getCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if _, err := client.Get(getCtx, key); err == nil {
			t.Fatal("etcd answered a client without a certificate")
		}

		// The cause, as etcd states it for that very client.
		Eventually(t, 5*time.Second, "etcd logs the rejected certificate-less client", func() bool {
			log, _ := os.ReadFile(filepath.Join(c.Dir(), "etcd.log"))
			return strings.Contains(string(log), "client didn't provide a certificate")
		})

		// And as a client sees it when it looks at the connection itself:
		// with TLS 1.3 the handshake completes and the refusal is the alert
		// that arrives next.
		u, err := url.Parse(c.EtcdURL)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots})
		if err == nil {
			defer conn.Close()
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
		}
		if err == nil || !strings.Contains(err.Error(), "tls: certificate required") {
			t.Fatalf("a TLS client without a certificate saw %v, want the certificate-required alert", err)
		}
	})

	t.Run("through tcpproxy", func(t *testing.T) {
		u, err := url.Parse(c.EtcdURL)
		if err != nil {
			t.Fatal(err)
		}
		proxy, err := tcpproxy.New(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer proxy.Close()
		// The proxy listens on 127.0.0.1 too, so etcd's certificate still
		// matches the address the client dials.
		proxied := newEtcdClient(t, "https://"+proxy.Addr(), withCert)
		direct := c.etcdClientForTest(t)
		get := func(client *clientv3.Client, within time.Duration) error {
			getCtx, cancel := context.WithTimeout(ctx, within)
			defer cancel()
			_, err := client.Get(getCtx, key)
			return err
		}
		if err := get(proxied, 10*time.Second); err != nil {
			t.Fatalf("Get through the proxy: %v", err)
		}

		proxy.Stall()
		if err := get(proxied, time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get through a stalled proxy: %v, want the deadline", err)
		}
		if err := get(direct, 5*time.Second); err != nil {
			t.Fatalf("a direct client suffered from the stalled proxy: %v", err)
		}
		proxy.Resume()
		if err := get(proxied, 10*time.Second); err != nil {
			t.Fatalf("Get after Resume: %v", err)
		}

		proxy.Refuse(true)
		proxy.Cut()
		if err := get(proxied, time.Second); err == nil {
			t.Fatal("Get succeeded through a cut and refusing proxy")
		}
		if err := get(direct, 5*time.Second); err != nil {
			t.Fatalf("a direct client suffered from the cut: %v", err)
		}
		proxy.Refuse(false)
		// gRPC redials with backoff; a reconnect must come well within this.
		if err := get(proxied, 15*time.Second); err != nil {
			t.Fatalf("Get after the proxy accepted again: %v", err)
		}
	})
}

// With EncryptConfigMaps, a ConfigMap reads back through the apiserver but
// is opaque in etcd, while other resources stay in the clear.
func TestEncryptConfigMaps(t *testing.T) {
	ctx := context.Background()
	c := StartForTest(t, Options{EncryptConfigMaps: true})
	if cert, key, ca := c.EtcdClientFiles(); cert != "" || key != "" || ca != "" {
		t.Errorf("EtcdClientFiles without EtcdTLS = %q, %q, %q, want empty", cert, key, ca)
	}
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	const marker = "plaintext-marker-7f3a"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sealed"}, Data: map[string]string{"k": marker}}
	if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "sealed", metav1.GetOptions{})
	if err != nil || got.Data["k"] != marker {
		t.Fatalf("the apiserver does not read its own encrypted ConfigMap back: %v, %v", got, err)
	}

	client := c.etcdClientForTest(t)
	raw := func(key string) []byte {
		t.Helper()
		getCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := client.Get(getCtx, key)
		if err != nil {
			t.Fatalf("etcd get %s: %v", key, err)
		}
		if len(resp.Kvs) != 1 {
			t.Fatalf("etcd has %d keys at %s, want 1", len(resp.Kvs), key)
		}
		return resp.Kvs[0].Value
	}
	value := raw("/registry/configmaps/default/sealed")
	if !strings.HasPrefix(string(value), "k8s:enc:aescbc:v1:") {
		t.Errorf("the ConfigMap in etcd starts %q, want k8s:enc:aescbc:v1:", head(value))
	}
	if strings.Contains(string(value), marker) {
		t.Error("the ConfigMap's value is in etcd in the clear")
	}
	// Only ConfigMaps are encrypted: a Namespace is plain protobuf.
	if ns := raw("/registry/namespaces/default"); !strings.HasPrefix(string(ns), "k8s\x00") {
		t.Errorf("a Namespace in etcd starts %q, want unencrypted protobuf (k8s\\x00)", head(ns))
	}
}

// etcdClientForTest is EtcdClient, closed when t ends.
func (c *Cluster) etcdClientForTest(t *testing.T) *clientv3.Client {
	t.Helper()
	client, err := c.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// newEtcdClient is a clientv3 client for endpoint, closed when t ends.
func newEtcdClient(t *testing.T, endpoint string, tlsConfig *tls.Config) *clientv3.Client {
	t.Helper()
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("etcd client for %s: %v", endpoint, err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

func head(b []byte) []byte { return b[:min(len(b), 24)] }
