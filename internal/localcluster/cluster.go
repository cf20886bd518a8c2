// Package localcluster runs a real etcd and kube-apiserver on loopback, for
// the tests and for `make demo`; (StartHA) a highly available control
// plane of several kube-apiservers sharing one etcd, each in a network
// namespace of its own; and (StartNode) a cluster with a node that runs
// pods, for the chart's install test. Behaviour of List-Watch is only ever
// claimed against this real control plane, never against a fake clientset.
package localcluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/watchprobe/watchprobe/internal/tcpproxy"
)

// Options shape one cluster. The zero value is a sensible default.
type Options struct {
	// BinDir holds the kube-apiserver and etcd binaries. Empty means
	// $WATCHPROBE_BIN_DIR, else bin/ at the root of this repository.
	BinDir string
	// KubeVersion picks another kube-apiserver than the default one in
	// BinDir: "1.34" means BinDir/1.34/kube-apiserver, with the etcd that
	// release pins beside it (`make controlplane-1.34` builds both). Empty
	// means $WATCHPROBE_KUBE_VERSION, else the default. `make compat` runs
	// the same tests once per version this way.
	KubeVersion string
	// EtcdVersion picks etcd apart from the apiserver: "3.6" means
	// BinDir/etcd-3.6/etcd. Empty means $WATCHPROBE_ETCD_VERSION, else
	// the etcd that goes with KubeVersion.
	EtcdVersion string
	// Dir receives data, certificates and logs. Empty means a new temporary
	// directory that Stop removes.
	Dir string
	// APIServerFlags are appended to the defaults, so a test can add or
	// override a flag such as --min-request-timeout.
	APIServerFlags []string
	// ReadyTimeout bounds each start; the machine is shared and noisy.
	ReadyTimeout time.Duration
	// EtcdTLS serves etcd's client URL over https and requires a client
	// certificate from the cluster CA, as every production etcd does, so
	// that a client watching etcd directly is tested with the TLS it will
	// meet. kube-apiserver gets a client certificate of its own;
	// EtcdClientFiles names one for other clients. False keeps plain http.
	EtcdTLS bool
	// EncryptConfigMaps has kube-apiserver encrypt ConfigMaps at rest
	// (aescbc), so their values in etcd are opaque to a direct etcd reader,
	// as Secrets are on a hardened cluster.
	EncryptConfigMaps bool
	// EtcdOverrides are resources (group/resource, "/pods" for the core
	// group) that kube-apiserver stores through an etcd client of their
	// own (--etcd-servers-overrides), pointed at a TCP proxy in front of
	// the same etcd: EtcdOverride(resource) delays or stalls that one
	// resource's storage and watch cache while every other resource's is
	// untouched. On an HACluster each apiserver has links of its own
	// (APIServer.EtcdOverride). Plain-http etcd only.
	EtcdOverrides []string
}

// Cluster is a running etcd + kube-apiserver pair.
type Cluster struct {
	dir        string
	removeDir  bool
	etcd       *process
	apiserver  *process
	pki        *pki
	adminToken string

	// etcdTLS is the client side of etcd's mutual TLS, nil for plain http.
	etcdTLS *tls.Config
	// etcdHTTP checks etcd's /health and writes through its HTTP gateway.
	etcdHTTP *http.Client

	// serving is where the apiserver listens and what it admits.
	serving serving

	// EtcdURL is the client URL of etcd, for reference clients that watch
	// etcd directly: http://127.0.0.1:<port>, or https:// with EtcdTLS
	// (then a client needs EtcdClientFiles).
	EtcdURL string
	// APIServerURL is https://127.0.0.1:<port> (a node's cluster: its
	// bridge address).
	APIServerURL string
	readyTimeout time.Duration
	// overrides are the proxies of Options.EtcdOverrides, by resource.
	overrides map[string]*tcpproxy.Proxy
}

// EtcdOverride is the proxy the resource's own etcd client goes through
// (Options.EtcdOverrides), nil for a resource not listed.
func (c *Cluster) EtcdOverride(resource string) *tcpproxy.Proxy { return c.overrides[resource] }

// overrideFlags starts a proxy in front of etcd for each resource of
// opts.EtcdOverrides and returns the apiserver flag that sends the
// resource's storage through it.
func (c *Cluster) overrideFlags(opts Options) ([]string, error) {
	if len(opts.EtcdOverrides) == 0 {
		return nil, nil
	}
	if opts.EtcdTLS {
		return nil, errors.New("EtcdOverrides: plain-http etcd only")
	}
	c.overrides = map[string]*tcpproxy.Proxy{}
	var parts []string
	for _, r := range opts.EtcdOverrides {
		p, err := tcpproxy.New(strings.TrimPrefix(c.EtcdURL, "http://"))
		if err != nil {
			return nil, err
		}
		c.overrides[r] = p
		parts = append(parts, r+"#http://"+p.Addr())
	}
	return []string{"--etcd-servers-overrides", strings.Join(parts, ",")}, nil
}

const adminUser = "watchprobe-admin"

// Start brings up etcd, then kube-apiserver, and waits until /readyz is ok.
// On failure it stops whatever it started and returns an error that carries
// the log tail of the process that failed.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	return start(ctx, opts, serving{addr: "127.0.0.1", names: loopbackNames()})
}

// serving is where a cluster's one apiserver listens, the names its serving
// certificate holds, and whether it admits pods as a kubelet needs them.
type serving struct {
	addr  string
	names subjectAltNames
	// pods: the ServiceAccount admission plugin mounts each pod's token.
	// Without a node no pod runs, and the plugin would only refuse the
	// pods of a namespace whose default ServiceAccount no controller made.
	pods bool
}

func start(ctx context.Context, opts Options, srv serving) (*Cluster, error) {
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	bins := binariesFor(binDir, opts)
	c, err := newCluster(opts, "watchprobe-cluster-")
	if err != nil {
		return nil, err
	}
	c.serving = srv
	if err := c.prepare(bins, opts); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.StartEtcd(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.StartAPIServer(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// newCluster is a Cluster in opts.Dir, or in a new temporary directory
// named after prefix that Stop removes, with its ready timeout defaulted.
func newCluster(opts Options, prefix string) (*Cluster, error) {
	c := &Cluster{dir: opts.Dir, readyTimeout: opts.ReadyTimeout}
	if c.readyTimeout == 0 {
		c.readyTimeout = 90 * time.Second
	}
	if c.dir == "" {
		dir, err := os.MkdirTemp("", prefix)
		if err != nil {
			return nil, err
		}
		c.dir, c.removeDir = dir, true
	}
	return c, nil
}

func (c *Cluster) prepare(bins binaries, opts Options) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdPort, peerPort, securePort := ports[0], ports[1], ports[2]
	extraArgs, err := c.prepareShared(bins, opts, etcdPort, peerPort)
	if err != nil {
		return err
	}
	overrideArgs, err := c.overrideFlags(opts)
	if err != nil {
		return err
	}
	extraArgs = append(extraArgs, overrideArgs...)
	c.APIServerURL = "https://" + net.JoinHostPort(c.serving.addr, strconv.Itoa(securePort))
	servingCert, servingKey, err := c.pki.issueNamed("localhost", nil, c.serving.names, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	path := func(name string) string { return filepath.Join(c.dir, name) }
	if err := writeFiles(map[string][]byte{
		path("serving.crt"): servingCert,
		path("serving.key"): servingKey,
	}); err != nil {
		return err
	}
	c.apiserver = &process{
		name:    "kube-apiserver",
		path:    bins.apiserver,
		logPath: path("kube-apiserver.log"),
		args: append(append([]string{
			"--etcd-servers", c.EtcdURL,
			"--bind-address", c.serving.addr,
			"--secure-port", strconv.Itoa(securePort),
			"--cert-dir", path("certs"),
			"--tls-cert-file", path("serving.crt"),
			"--tls-private-key-file", path("serving.key"),
		}, c.apiserverSharedArgs()...), append(extraArgs, opts.APIServerFlags...)...),
	}
	return checkBinary(c.apiserver)
}

// prepareShared readies what every apiserver of the cluster shares: the CA,
// the admin token, the ServiceAccount keys, etcd and its TLS, and the
// encryption config. It returns the apiserver flags that etcd TLS and
// encryption call for.
func (c *Cluster) prepareShared(bins binaries, opts Options, etcdPort, peerPort int) (apiserverArgs []string, err error) {
	etcdScheme := "http"
	if opts.EtcdTLS {
		etcdScheme = "https"
	}
	c.EtcdURL = etcdScheme + "://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)

	if c.pki, err = newPKI(); err != nil {
		return nil, err
	}
	c.adminToken = randomToken()
	path := func(name string) string { return filepath.Join(c.dir, name) }
	if err := writeFiles(map[string][]byte{
		path("ca.crt"): c.pki.caPEM,
		// Static tokens are the simplest admin identity; system:masters
		// bypasses RBAC, as a cluster admin's kubeconfig does.
		path("tokens.csv"): fmt.Appendf(nil, "%s,%s,%s-uid,\"system:masters\"\n", c.adminToken, adminUser, adminUser),
	}); err != nil {
		return nil, err
	}
	if err := writeServiceAccountKey(path("sa.pub"), path("sa.key")); err != nil {
		return nil, err
	}
	etcdArgs, apiserverArgs, err := c.prepareEtcdTLS(opts.EtcdTLS)
	if err != nil {
		return nil, err
	}
	if opts.EncryptConfigMaps {
		if err := writeEncryptionConfig(path(encryptionConfigYML)); err != nil {
			return nil, err
		}
		apiserverArgs = append(apiserverArgs, "--encryption-provider-config", path(encryptionConfigYML))
	}

	c.etcd = &process{
		name:    "etcd",
		path:    bins.etcd,
		logPath: path("etcd.log"),
		args: append([]string{
			"--name", "default",
			"--data-dir", path("etcd-data"),
			"--listen-client-urls", c.EtcdURL,
			"--advertise-client-urls", c.EtcdURL,
			"--listen-peer-urls", peerURL,
			"--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "default=" + peerURL,
			"--log-level", "warn",
		}, etcdArgs...),
	}
	return apiserverArgs, checkBinary(c.etcd)
}

// defaultServiceCIDR is the --service-cluster-ip-range every apiserver here
// gets; its first address is the ClusterIP of the kubernetes Service.
const defaultServiceCIDR = "10.0.0.0/24"

// apiserverSharedArgs are the flags every apiserver of the cluster gets,
// beside its own addresses and serving certificate.
func (c *Cluster) apiserverSharedArgs() []string {
	path := func(name string) string { return filepath.Join(c.dir, name) }
	args := []string{
		"--client-ca-file", path("ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", path("sa.pub"),
		"--service-account-signing-key-file", path("sa.key"),
		"--token-auth-file", path("tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-cluster-ip-range", defaultServiceCIDR,
	}
	if !c.serving.pods {
		args = append(args, "--disable-admission-plugins", "ServiceAccount")
	}
	return args
}

func checkBinary(p *process) error {
	if _, err := os.Stat(p.path); err != nil {
		return fmt.Errorf("%s binary missing at %s: run `make controlplane`, or `make compat-controlplanes` for the versions WATCHPROBE_KUBE_VERSION and WATCHPROBE_ETCD_VERSION name (the first build takes about 8 minutes): %w", p.name, p.path, err)
	}
	return nil
}

// StartEtcd starts etcd on its fixed port and data directory and waits until
// it answers /health.
func (c *Cluster) StartEtcd(ctx context.Context) error {
	if err := c.etcd.start(); err != nil {
		return err
	}
	return c.waitReady(ctx, c.etcd, c.etcdHTTP, c.EtcdURL+"/health")
}

// StartAPIServer starts kube-apiserver on its fixed port and waits for /readyz.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if err := c.apiserver.start(); err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(c.AdminConfig())
	if err != nil {
		return err
	}
	return c.waitReady(ctx, c.apiserver, client, c.APIServerURL+"/readyz")
}

// StopAPIServer stops kube-apiserver as a rolling restart does: SIGTERM,
// then SIGKILL after a grace period. On SIGTERM kube-apiserver stops
// accepting connections at once but keeps serving the watches it has, since
// its HTTP server waits for connections to go idle and a watch never does;
// it is killed after 5 s rather than the 60 s it would linger.
func (c *Cluster) StopAPIServer() error {
	return ignoreKilled(c.apiserver.stop(syscall.SIGTERM, 5*time.Second))
}

func ignoreKilled(err error) error {
	if errors.Is(err, errKilled) {
		return nil
	}
	return err
}

// KillAPIServer stops kube-apiserver abruptly (SIGKILL): connections drop
// without a goodbye, as when a control-plane node dies.
func (c *Cluster) KillAPIServer() error { return c.apiserver.stop(syscall.SIGKILL, 0) }

// StopEtcd stops etcd; the apiserver stays up and loses its storage.
func (c *Cluster) StopEtcd() error { return c.etcd.stop(syscall.SIGTERM, 30*time.Second) }

// Stop ends both processes and removes the directory if Start created it.
// It is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	if c.apiserver != nil {
		errs = append(errs, c.StopAPIServer())
	}
	for _, p := range c.overrides {
		// Stalled or delayed by a test, they must not hold the apiserver's
		// shutdown: closed after it, before etcd.
		errs = append(errs, p.Close())
	}
	if c.etcd != nil {
		errs = append(errs, c.etcd.stop(syscall.SIGTERM, 15*time.Second))
	}
	if c.removeDir {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}

// KubeVersion is the k8s.io/kubernetes release the running kube-apiserver
// was built from, e.g. "v1.34.4", read from the binary's build information:
// built without the Makefile's version ldflags, the binary's own --version
// and /version say v0.0.0-master whatever the release. Tests whose
// expectation differs by release read it.
func (c *Cluster) KubeVersion() (string, error) {
	return moduleVersion(c.apiserver.path, "k8s.io/kubernetes")
}

// EtcdVersion is the etcd server release the running etcd was built from.
func (c *Cluster) EtcdVersion() (string, error) {
	return moduleVersion(c.etcd.path, "go.etcd.io/etcd/server/v3")
}

func moduleVersion(bin, module string) (string, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", err
	}
	if info.Main.Path == module {
		return info.Main.Version, nil
	}
	for _, dep := range info.Deps {
		if dep.Path == module {
			return dep.Version, nil
		}
	}
	return "", fmt.Errorf("%s was not built from %s", bin, module)
}

// Dir is where data, certificates and logs live.
func (c *Cluster) Dir() string { return c.dir }

// CAPEM is the certificate of the CA that signed the apiserver's serving
// certificate and that the apiserver trusts for client certificates.
func (c *Cluster) CAPEM() []byte { return c.pki.caPEM }

// LogTail returns the last lines of both logs, to explain a failure.
func (c *Cluster) LogTail(lines int) string {
	return "--- etcd log tail:\n" + c.etcd.logTail(lines) +
		"\n--- kube-apiserver log tail:\n" + c.apiserver.logTail(lines)
}

// AdminConfig is a config for a system:masters identity.
func (c *Cluster) AdminConfig() *rest.Config {
	return &rest.Config{
		Host:            c.APIServerURL,
		BearerToken:     c.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		QPS:             -1, // tests measure the apiserver, not client-side throttling
	}
}

// ClientCertConfig is a config that authenticates with a client certificate
// for user in groups, e.g. system:monitoring.
func (c *Cluster) ClientCertConfig(user string, groups ...string) (*rest.Config, error) {
	cert, key, err := c.pki.issue(user, groups, false)
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            c.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM, CertData: cert, KeyData: key},
		QPS:             -1,
	}, nil
}

// ServiceAccountConfig creates the ServiceAccount if needed and returns a
// config that authenticates with a freshly minted token for it, as a pod
// running under that ServiceAccount would.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return nil, err
	}
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	expiry := int64(3600)
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("minting a token for %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            c.APIServerURL,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
		QPS:             -1,
	}, nil
}

// WriteKubeconfig writes the admin identity as a kubeconfig file, for kubectl
// and for the exporter binary.
func (c *Cluster) WriteKubeconfig(path string) error {
	return WriteKubeconfig(c.AdminConfig(), path)
}

// WriteKubeconfig writes any identity from this package (admin,
// ServiceAccount token, client certificate) as a kubeconfig file.
func WriteKubeconfig(rc *rest.Config, path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, TLSServerName: rc.ServerName}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken, ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "user"}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}

func (c *Cluster) waitReady(ctx context.Context, p *process, client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, c.readyTimeout)
	defer cancel()
	var lastErr error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s", url, resp.Status)
		}
		lastErr = err
		if p.exited() {
			return fmt.Errorf("%s exited before it was ready (%v)\n%s", p.name, lastErr, p.logTail(40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (%v)\n%s", p.name, c.readyTimeout, lastErr, p.logTail(40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts asks the kernel for n distinct free loopback ports. They are
// held until all are chosen so that the same port is not handed out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// binaries are the paths of the control plane's two programs.
type binaries struct{ apiserver, etcd string }

// binariesFor resolves opts' versions (or the environment's) to binaries
// under binDir; see Options.KubeVersion and Options.EtcdVersion.
func binariesFor(binDir string, opts Options) binaries {
	kube, etcd := opts.KubeVersion, opts.EtcdVersion
	if kube == "" {
		kube = os.Getenv("WATCHPROBE_KUBE_VERSION")
	}
	if etcd == "" {
		etcd = os.Getenv("WATCHPROBE_ETCD_VERSION")
	}
	dir := binDir
	if kube != "" {
		dir = filepath.Join(binDir, kube)
	}
	b := binaries{apiserver: filepath.Join(dir, "kube-apiserver"), etcd: filepath.Join(dir, "etcd")}
	if etcd != "" {
		b.etcd = filepath.Join(binDir, "etcd-"+etcd, "etcd")
	}
	return b
}

func findBinDir(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	if dir = os.Getenv("WATCHPROBE_BIN_DIR"); dir != "" {
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "hack", "tools", "controlplane", "go.mod")); err == nil {
			return filepath.Join(d, "bin"), nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("cannot find the repository root above %s: set WATCHPROBE_BIN_DIR to the directory holding kube-apiserver and etcd", wd)
		}
	}
}

// BumpEtcdRevision writes one key straight into etcd, outside the
// apiserver's prefix. Done while the apiserver is stopped, it makes every
// resourceVersion a client holds older than the revision a restarted
// apiserver's watch cache starts at, so resuming a watch from it is answered
// 410 Gone ("too old resource version"), as after any real restart that
// other writers outpaced.
func (c *Cluster) BumpEtcdRevision(ctx context.Context) error {
	body := strings.NewReader(fmt.Sprintf(`{"key":%q,"value":%q}`,
		base64.StdEncoding.EncodeToString([]byte("/watchprobe-test/bump")),
		base64.StdEncoding.EncodeToString([]byte(time.Now().String()))))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.EtcdURL+"/v3/kv/put", body)
	if err != nil {
		return err
	}
	resp, err := c.etcdHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("etcd put answered %s: %s", resp.Status, msg)
	}
	return nil
}

// Tool returns the absolute path of a binary that `make test` builds into
// bin/ (or $WATCHPROBE_BIN_DIR): kube-apiserver, etcd, helm, prometheus,
// promtool. A missing one is an error that says how to get it.
func Tool(name string) (string, error) {
	dir, err := findBinDir("")
	if err != nil {
		return "", err
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s is missing at %s: run `make test`, which builds it", name, path)
	}
	return path, nil
}

// APIServerPID is the kube-apiserver's process id, 0 while it is not
// running: for benchmarks that read its CPU time.
func (c *Cluster) APIServerPID() int { return c.apiserver.pid() }

// EtcdPID is the running etcd's process ID, 0 when it is not running.
func (c *Cluster) EtcdPID() int { return c.etcd.pid() }
