package localcluster

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Files of etcd's mutual TLS, inside the cluster directory. The CA is the
// cluster's own ca.crt: one CA signs every certificate here.
const (
	etcdServingCert     = "etcd-serving.crt"
	etcdServingKey      = "etcd-serving.key"
	etcdClientCert      = "etcd-client.crt"
	etcdClientKey       = "etcd-client.key"
	apiserverEtcdCert   = "apiserver-etcd-client.crt"
	apiserverEtcdKey    = "apiserver-etcd-client.key"
	encryptionConfigYML = "encryption-config.yaml"
)

// prepareEtcdTLS writes the certificates etcd and its clients need when
// enabled, and returns the flags that make etcd demand them and
// kube-apiserver present them. Disabled, etcd stays on plain http.
func (c *Cluster) prepareEtcdTLS(enabled bool) (etcdArgs, apiserverArgs []string, err error) {
	if !enabled {
		c.etcdHTTP = http.DefaultClient
		return nil, nil, nil
	}
	path := func(name string) string { return filepath.Join(c.dir, name) }
	// etcd's HTTP gateway (/v3/kv/put, which BumpEtcdRevision uses) is a
	// gRPC client of etcd itself, and presents the serving certificate as
	// its client certificate: without the client-auth usage etcd rejects
	// its own gateway ("incompatible key usage") and answers 503.
	servingCert, servingKey, err := c.pki.issueFor("localhost", nil, true, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, nil, err
	}
	clientCert, clientKey, err := c.pki.issue("watchprobe-etcd-client", nil, false)
	if err != nil {
		return nil, nil, err
	}
	// kube-apiserver gets an identity of its own, as kubeadm's
	// apiserver-etcd-client, so a test can tell its connections apart.
	apiCert, apiKey, err := c.pki.issue("kube-apiserver-etcd-client", nil, false)
	if err != nil {
		return nil, nil, err
	}
	if err := writeFiles(map[string][]byte{
		path(etcdServingCert):   servingCert,
		path(etcdServingKey):    servingKey,
		path(etcdClientCert):    clientCert,
		path(etcdClientKey):     clientKey,
		path(apiserverEtcdCert): apiCert,
		path(apiserverEtcdKey):  apiKey,
	}); err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		return nil, nil, fmt.Errorf("loading the etcd client certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.pki.caCert)
	c.etcdTLS = &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}
	// No keep-alives: a readiness poll or a revision bump leaves no idle
	// connection (and its goroutines) behind for a leak check to find.
	c.etcdHTTP = &http.Client{Transport: &http.Transport{TLSClientConfig: c.etcdTLS.Clone(), DisableKeepAlives: true}}

	etcdArgs = []string{
		"--client-cert-auth",
		"--trusted-ca-file", path("ca.crt"),
		"--cert-file", path(etcdServingCert),
		"--key-file", path(etcdServingKey),
	}
	apiserverArgs = []string{
		"--etcd-cafile", path("ca.crt"),
		"--etcd-certfile", path(apiserverEtcdCert),
		"--etcd-keyfile", path(apiserverEtcdKey),
	}
	return etcdArgs, apiserverArgs, nil
}

// EtcdClientFiles names a client certificate, its key and the CA, in PEM,
// that etcd accepts when the cluster runs with EtcdTLS; any etcd client
// (etcdctl, clientv3, the exporter) can use them. Without EtcdTLS all three
// are empty: etcd then takes plain http from anyone.
func (c *Cluster) EtcdClientFiles() (certFile, keyFile, caFile string) {
	if c.etcdTLS == nil {
		return "", "", ""
	}
	return filepath.Join(c.dir, etcdClientCert), filepath.Join(c.dir, etcdClientKey), filepath.Join(c.dir, "ca.crt")
}

// EtcdClient returns a client for the cluster's etcd, with the client
// certificate of EtcdClientFiles when EtcdTLS is on, for tests that read or
// compact etcd behind the apiserver's back. The caller closes it.
func (c *Cluster) EtcdClient() (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: []string{c.EtcdURL}, DialTimeout: 5 * time.Second}
	if c.etcdTLS != nil {
		cfg.TLS = c.etcdTLS.Clone()
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", c.EtcdURL, err)
	}
	return client, nil
}

// writeEncryptionConfig writes an EncryptionConfiguration that encrypts
// ConfigMaps with a fresh aescbc key. identity comes second so that
// ConfigMaps written before encryption was turned on still read back.
func writeEncryptionConfig(path string) error {
	key := make([]byte, 32) // aescbc takes a 16, 24 or 32 byte key; 32 is AES-256
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("generating the aescbc key: %w", err)
	}
	config := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - configmaps
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: %s
      - identity: {}
`, base64.StdEncoding.EncodeToString(key))
	return writeFiles(map[string][]byte{path: []byte(config)})
}
