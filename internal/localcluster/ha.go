package localcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/tcpproxy"
)

// HAOptions shape an HA cluster: the single-cluster Options, and how many
// apiservers share its etcd.
type HAOptions struct {
	Options
	// APIServers is how many kube-apiservers StartHA starts; zero means 3.
	APIServers int
}

// APIServerPort is the port every apiserver of an HA cluster serves on, each
// at its own address. The endpoint reconciler publishes a single port for
// all of them in the kubernetes Service, so they must agree, as kubeadm's
// control-plane nodes do.
const APIServerPort = 6443

// ServerName is the name every apiserver's serving certificate carries and
// that clients here verify: the in-cluster name of the kubernetes Service.
const ServerName = "kubernetes.default.svc"

// HACluster is one etcd and several kube-apiservers sharing it, as a kubeadm
// HA control plane is. Each apiserver runs in a network namespace of its own
// with its own address, which it advertises, so the kubernetes EndpointSlice
// in default lists every apiserver as on a real cluster; each reaches etcd
// through a TCP proxy of its own (EtcdLink) that a test can cut or stall.
// Clients reach the apiservers through a TCP load balancer on loopback
// (RESTConfig), or one apiserver directly (APIServer.RESTConfig).
//
// It needs root, for the namespaces. Traffic stays on this machine: loopback,
// and veth pairs into namespaces the cluster made.
type HACluster struct {
	base       *Cluster // etcd, CA, admin token, directory; no apiserver of its own
	bins       binaries
	opts       HAOptions
	extraArgs  []string // apiserver flags for etcd TLS and encryption
	serviceIPs []net.IP
	lb         *tcpproxy.Proxy
	// etcdKey is etcd's serving key when etcd serves TLS: each new
	// apiserver's etcd link is a new address etcd's certificate must name.
	etcdKey *ecdsa.PrivateKey

	addMu      sync.Mutex // one AddAPIServer at a time, so indices stay in order
	mu         sync.Mutex
	apiservers []*APIServer
}

// APIServer is one kube-apiserver of an HACluster.
type APIServer struct {
	h        *HACluster
	index    int
	link     *netLink
	etcdLink *tcpproxy.Proxy
	// overrides are this apiserver's own links for Options.EtcdOverrides,
	// by resource.
	overrides map[string]*tcpproxy.Proxy
	proc      *process

	mu     sync.Mutex
	up     bool // started and ready, not stopped or killed since
	frozen bool
}

// StartHA starts etcd and opts.APIServers kube-apiservers (3 by default),
// each in its own network namespace, and waits until every one answers
// /readyz. On failure it removes everything it made and returns an error
// that carries the log tail of the process that failed.
func StartHA(ctx context.Context, opts HAOptions) (_ *HACluster, err error) {
	if opts.APIServers == 0 {
		opts.APIServers = 3
	}
	if opts.APIServers < 0 {
		return nil, fmt.Errorf("HAOptions.APIServers is %d: give a positive number of apiservers, or 0 for 3", opts.APIServers)
	}
	if len(opts.EtcdOverrides) > 0 && opts.EtcdTLS {
		return nil, errors.New("EtcdOverrides: plain-http etcd only")
	}
	if err := checkNetnsSupport(); err != nil {
		return nil, err
	}
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	serviceIPs, err := serviceIPs(opts.APIServerFlags)
	if err != nil {
		return nil, err
	}
	base, err := newCluster(opts.Options, "watchprobe-ha-")
	if err != nil {
		return nil, err
	}
	h := &HACluster{base: base, bins: binariesFor(binDir, opts.Options), opts: opts, serviceIPs: serviceIPs}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.Stop())
		}
	}()

	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	if h.extraArgs, err = base.prepareShared(h.bins, opts.Options, ports[0], ports[1]); err != nil {
		return nil, err
	}
	if err := checkBinary(&process{name: "kube-apiserver", path: h.apiserverBinary()}); err != nil {
		return nil, err
	}
	if opts.EtcdTLS {
		if h.etcdKey, err = readECKey(filepath.Join(base.dir, etcdServingKey)); err != nil {
			return nil, fmt.Errorf("reading etcd's serving key: %w", err)
		}
	}
	if h.lb, err = tcpproxy.NewBalancer("127.0.0.1:0", h.balancerTargets); err != nil {
		return nil, err
	}
	// The admin, client-certificate and ServiceAccount configs of the base
	// cluster then go through the balancer.
	base.APIServerURL = "https://" + h.lb.Addr()

	for range opts.APIServers {
		a, err := h.newAPIServer()
		if a != nil {
			h.mu.Lock()
			h.apiservers = append(h.apiservers, a)
			h.mu.Unlock()
		}
		if err != nil {
			return nil, err
		}
	}
	if err := h.writeEtcdServingCert(); err != nil {
		return nil, err
	}
	if err := base.StartEtcd(ctx); err != nil {
		return nil, err
	}
	// Started together, as after a control-plane outage: they race to
	// bootstrap the same objects, which the apiserver tolerates.
	errs := make([]error, len(h.apiservers))
	var wg sync.WaitGroup
	for i, a := range h.apiservers {
		wg.Go(func() { errs[i] = a.Start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return h, nil
}

// serviceIPs are the first addresses of --service-cluster-ip-range (the last
// one given wins, as with any flag): the ClusterIPs of the kubernetes
// Service, which serving certificates must name.
func serviceIPs(flags []string) ([]net.IP, error) {
	ranges, err := serviceRanges(flags)
	if err != nil {
		return nil, err
	}
	var ips []net.IP
	for _, p := range ranges {
		ips = append(ips, net.IP(p.Addr().Next().AsSlice()))
	}
	return ips, nil
}

// serviceRanges are the networks of --service-cluster-ip-range in flags.
func serviceRanges(flags []string) ([]netip.Prefix, error) {
	ranges := defaultServiceCIDR
	for i, f := range flags {
		if v, ok := strings.CutPrefix(f, "--service-cluster-ip-range="); ok {
			ranges = v
		} else if f == "--service-cluster-ip-range" && i+1 < len(flags) {
			ranges = flags[i+1]
		}
	}
	var out []netip.Prefix
	for _, r := range strings.Split(ranges, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(r))
		if err != nil {
			return nil, fmt.Errorf("APIServerFlags: --service-cluster-ip-range %q: %w; give CIDRs such as 10.0.0.0/24", ranges, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (h *HACluster) apiserverBinary() string { return h.bins.apiserver }

// newAPIServer gives the next apiserver its namespace, etcd link, serving
// certificate and command line; it does not start it. A non-nil result
// holds whatever was made, for Stop to remove, even with an error.
func (h *HACluster) newAPIServer() (*APIServer, error) {
	h.mu.Lock()
	index := len(h.apiservers)
	h.mu.Unlock()
	link, err := allocateLink()
	if err != nil {
		return nil, err
	}
	a := &APIServer{h: h, index: index, link: link}
	etcdURL, err := url.Parse(h.base.EtcdURL)
	if err != nil {
		return a, err
	}
	if a.etcdLink, err = tcpproxy.NewOn(net.JoinHostPort(link.hostAddr.String(), "0"), etcdURL.Host); err != nil {
		return a, err
	}
	// Each apiserver's override links are its own, so that one resource's
	// storage can be stalled on one apiserver while the others read on.
	var overrides []string
	a.overrides = map[string]*tcpproxy.Proxy{}
	for _, r := range h.opts.EtcdOverrides {
		p, err := tcpproxy.NewOn(net.JoinHostPort(link.hostAddr.String(), "0"), etcdURL.Host)
		if err != nil {
			return a, err
		}
		a.overrides[r] = p
		overrides = append(overrides, r+"#"+etcdURL.Scheme+"://"+p.Addr())
	}

	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	ips := append(append([]net.IP{}, h.serviceIPs...), net.IP(link.nsAddr.AsSlice()), net.ParseIP("127.0.0.1"))
	cert, key, err := h.base.pki.issueNamed("kube-apiserver", nil, subjectAltNames{dns: dns, ips: ips}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return a, err
	}
	dir := filepath.Join(h.base.dir, fmt.Sprintf("apiserver-%d", index))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return a, err
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	if err := writeFiles(map[string][]byte{path("serving.crt"): cert, path("serving.key"): key}); err != nil {
		return a, err
	}

	addr := link.nsAddr.String()
	args := append(append([]string{
		"--etcd-servers", etcdURL.Scheme + "://" + a.etcdLink.Addr(),
		"--bind-address", addr,
		"--advertise-address", addr,
		"--secure-port", strconv.Itoa(APIServerPort),
		"--cert-dir", path("certs"),
		"--tls-cert-file", path("serving.crt"),
		"--tls-private-key-file", path("serving.key"),
	}, h.base.apiserverSharedArgs()...), append(h.extraArgs, h.opts.APIServerFlags...)...)
	if len(overrides) > 0 {
		args = append(args, "--etcd-servers-overrides", strings.Join(overrides, ","))
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		return a, err
	}
	// The shell gives the apiserver a hostname of its own in a new UTS
	// namespace (its identity Lease in kube-system is named after the
	// hostname, one per control-plane node on a real cluster), then execs
	// `ip netns exec`, which execs kube-apiserver: one process throughout,
	// so signals reach the apiserver itself.
	const script = `printf %s "$0" > /proc/sys/kernel/hostname && ns=$1 && ip=$2 && shift 2 && exec "$ip" netns exec "$ns" "$@"`
	a.proc = &process{
		name:       fmt.Sprintf("kube-apiserver %d (%s)", index, addr),
		path:       "/bin/sh",
		args:       append([]string{"-c", script, link.ns, link.ns, ipPath, h.apiserverBinary()}, args...),
		logPath:    filepath.Join(h.base.dir, fmt.Sprintf("kube-apiserver-%d.log", index)),
		cloneflags: syscall.CLONE_NEWUTS,
	}
	return a, nil
}

// AddAPIServer starts one more apiserver in a namespace of its own, as when
// a control-plane node joins, and waits for /readyz.
func (h *HACluster) AddAPIServer(ctx context.Context) (*APIServer, error) {
	h.addMu.Lock()
	defer h.addMu.Unlock()
	a, err := h.newAPIServer()
	if err == nil {
		h.mu.Lock()
		h.apiservers = append(h.apiservers, a)
		h.mu.Unlock()
		if err = h.writeEtcdServingCert(); err == nil {
			err = a.Start(ctx)
		}
		if err != nil {
			h.mu.Lock()
			h.apiservers = h.apiservers[:len(h.apiservers)-1]
			h.mu.Unlock()
		}
	}
	if err != nil {
		if a != nil {
			err = errors.Join(err, a.teardown())
		}
		return nil, err
	}
	return a, nil
}

// writeEtcdServingCert re-signs etcd's serving certificate, for the same
// key, so that it names the root end of every apiserver's etcd link. etcd
// reads its certificate files at each handshake; the key never changes and
// the certificate is replaced by a rename, so no handshake sees a mismatch.
func (h *HACluster) writeEtcdServingCert() error {
	if h.etcdKey == nil {
		return nil
	}
	names := loopbackNames()
	h.mu.Lock()
	for _, a := range h.apiservers {
		names.ips = append(names.ips, net.IP(a.link.hostAddr.AsSlice()))
	}
	h.mu.Unlock()
	cert, err := h.base.pki.sign(h.etcdKey, "localhost", nil, names, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	path := filepath.Join(h.base.dir, etcdServingCert)
	if err := os.WriteFile(path+".new", cert, 0o600); err != nil {
		return err
	}
	return os.Rename(path+".new", path)
}

func readECKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block", path)
	}
	return x509.ParseECPrivateKey(block.Bytes)
}

// balancerTargets are the apiservers a new connection to the load balancer
// may go to: those started and ready, not stopped, killed or frozen. A real
// load balancer learns this from health checks; here the cluster knows.
func (h *HACluster) balancerTargets() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var targets []string
	for _, a := range h.apiservers {
		a.mu.Lock()
		if a.up && !a.frozen {
			targets = append(targets, a.Address())
		}
		a.mu.Unlock()
	}
	return targets
}

// APIServers returns every apiserver in start order, stopped ones included.
func (h *HACluster) APIServers() []*APIServer {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*APIServer(nil), h.apiservers...)
}

// RESTConfig is an admin (system:masters) config through the load
// balancer on loopback, the way an ordinary client reaches an HA control
// plane: each new connection goes to an apiserver that is up and not
// frozen; a connection already open stays with its apiserver, whatever
// becomes of it.
func (h *HACluster) RESTConfig() *rest.Config {
	rc := h.base.AdminConfig()
	rc.ServerName = ServerName
	return rc
}

// ServerName is the TLS name every apiserver's serving certificate has.
func (h *HACluster) ServerName() string { return ServerName }

// CAData is the PEM certificate of the CA that signed every certificate of
// the cluster and that the apiservers trust for client certificates.
func (h *HACluster) CAData() []byte { return h.base.pki.caPEM }

// LoadBalancerAddr is the load balancer's host:port on loopback.
func (h *HACluster) LoadBalancerAddr() string { return h.lb.Addr() }

// ClientCertConfig is Cluster.ClientCertConfig through the load balancer.
func (h *HACluster) ClientCertConfig(user string, groups ...string) (*rest.Config, error) {
	rc, err := h.base.ClientCertConfig(user, groups...)
	if rc != nil {
		rc.ServerName = ServerName
	}
	return rc, err
}

// ServiceAccountConfig is Cluster.ServiceAccountConfig through the load
// balancer.
func (h *HACluster) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	rc, err := h.base.ServiceAccountConfig(ctx, namespace, name)
	if rc != nil {
		rc.ServerName = ServerName
	}
	return rc, err
}

// WriteKubeconfig writes the admin identity, through the load balancer, as
// a kubeconfig file for kubectl and the exporter binary.
func (h *HACluster) WriteKubeconfig(path string) error { return WriteKubeconfig(h.RESTConfig(), path) }

// EtcdURL is the client URL of the shared etcd on loopback, for clients that
// watch etcd directly (EtcdClientFiles when EtcdTLS).
func (h *HACluster) EtcdURL() string { return h.base.EtcdURL }

// EtcdClientFiles is Cluster.EtcdClientFiles for the shared etcd.
func (h *HACluster) EtcdClientFiles() (certFile, keyFile, caFile string) {
	return h.base.EtcdClientFiles()
}

// EtcdClient is Cluster.EtcdClient for the shared etcd.
func (h *HACluster) EtcdClient() (*clientv3.Client, error) { return h.base.EtcdClient() }

// Dir is where data, certificates and logs live.
func (h *HACluster) Dir() string { return h.base.dir }

// LogTail returns the last lines of etcd's and every apiserver's log.
func (h *HACluster) LogTail(lines int) string {
	var b strings.Builder
	b.WriteString("--- etcd log tail:\n" + h.base.etcd.logTail(lines))
	for _, a := range h.APIServers() {
		fmt.Fprintf(&b, "\n--- %s log tail:\n%s", a.proc.name, a.proc.logTail(lines))
	}
	return b.String()
}

// Stop kills every apiserver, stops etcd, removes the namespaces and veth
// pairs, and removes the directory if StartHA made it. It is safe to call
// more than once, and after a failed start.
func (h *HACluster) Stop() error {
	var errs []error
	if h.lb != nil {
		errs = append(errs, h.lb.Close())
	}
	apiservers := h.APIServers()
	errc := make(chan error, len(apiservers))
	for _, a := range apiservers {
		go func() { errc <- a.teardown() }()
	}
	for range apiservers {
		errs = append(errs, <-errc)
	}
	errs = append(errs, h.base.Stop())
	return errors.Join(errs...)
}

// teardown kills the apiserver and removes its link and namespace. Nothing
// is left to shut down gracefully for: the cluster is going away.
func (a *APIServer) teardown() error {
	var errs []error
	if a.proc != nil {
		errs = append(errs, a.Kill())
	}
	if a.etcdLink != nil {
		errs = append(errs, a.etcdLink.Close())
	}
	for _, p := range a.overrides {
		errs = append(errs, p.Close())
	}
	errs = append(errs, a.link.delete())
	return errors.Join(errs...)
}

// Index is the apiserver's place in start order, from 0.
func (a *APIServer) Index() int { return a.index }

// Address is host:port of this apiserver, as the kubernetes EndpointSlice
// lists it: its namespace's address and APIServerPort.
func (a *APIServer) Address() string {
	return net.JoinHostPort(a.link.nsAddr.String(), strconv.Itoa(APIServerPort))
}

// IP is the apiserver's address without the port.
func (a *APIServer) IP() string { return a.link.nsAddr.String() }

// Namespace is the name of the apiserver's network namespace (ip netns).
func (a *APIServer) Namespace() string { return a.link.ns }

// PID is the kube-apiserver's process id, 0 while it is not running.
func (a *APIServer) PID() int { return a.proc.pid() }

// RESTConfig is an admin config pinned to this apiserver alone.
func (a *APIServer) RESTConfig() *rest.Config {
	rc := a.h.base.AdminConfig()
	rc.Host = "https://" + a.Address()
	rc.ServerName = ServerName
	return rc
}

// EtcdLink is this apiserver's own path to etcd: Cut, Refuse and Stall on it
// break this apiserver's storage (and so its watch cache) alone, while the
// others keep reading and writing.
func (a *APIServer) EtcdLink() *tcpproxy.Proxy { return a.etcdLink }

// EtcdOverride is this apiserver's own link to etcd for the resource's
// storage (Options.EtcdOverrides), nil for a resource not listed: as
// EtcdLink, for that resource alone.
func (a *APIServer) EtcdOverride(resource string) *tcpproxy.Proxy { return a.overrides[resource] }

// Start starts the apiserver (again, at the same address after Stop or
// Kill) and waits for /readyz; only then does the load balancer send it
// connections. On failure the process is killed and the error carries its
// log tail.
func (a *APIServer) Start(ctx context.Context) error {
	if err := a.proc.start(); err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(a.RESTConfig())
	if err == nil {
		err = a.h.base.waitReady(ctx, a.proc, client, "https://"+a.Address()+"/readyz")
		client.CloseIdleConnections()
	}
	if err != nil {
		return errors.Join(err, ignoreKilled(a.proc.stop(syscall.SIGKILL, 0)))
	}
	a.mu.Lock()
	a.up, a.frozen = true, false
	a.mu.Unlock()
	return nil
}

// Stop stops the apiserver as a rolling restart does: the load balancer
// stops sending it connections, then SIGTERM, then SIGKILL after 5 s (its
// open watches would keep it up for 60 s). On SIGTERM it removes its own
// endpoint from the kubernetes Service before it stops serving, so the
// EndpointSlice drops it within a second or two.
func (a *APIServer) Stop() error {
	if a.markDown() {
		// A stopped process would hold SIGTERM pending. Thaw first: a
		// second SIGTERM makes kube-apiserver exit at once, without
		// removing its endpoint.
		_ = a.proc.signal(syscall.SIGCONT)
	}
	return ignoreKilled(a.proc.stop(syscall.SIGTERM, 5*time.Second))
}

// Kill ends the apiserver with SIGKILL, as when its node dies. Its endpoint
// stays in the kubernetes Service until its lease in etcd expires (a 15 s
// TTL, renewed every 10 s, so 5 to 15 s after the kill) and the next
// reconcile of another apiserver (every 10 s) drops it: 5 to 25 s, allow
// more on a loaded machine. With no other apiserver up it stays for good.
func (a *APIServer) Kill() error {
	a.markDown()
	return ignoreKilled(a.proc.stop(syscall.SIGKILL, 0))
}

// markDown takes the apiserver out of the load balancer and says whether it
// was frozen.
func (a *APIServer) markDown() (wasFrozen bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	wasFrozen = a.frozen
	a.up, a.frozen = false, false
	return wasFrozen
}

// Freeze stops the apiserver with SIGSTOP: its connections stay open but
// nothing answers, as with a hung process or a node cut off mid-stream. The
// load balancer sends it no new connections. Its lease is not renewed, so
// frozen for long it leaves the kubernetes EndpointSlice as a killed one
// does (5 to 25 s), and comes back at its first reconcile after Thaw
// (within 10 s).
func (a *APIServer) Freeze() error {
	if err := a.signalFrozen(syscall.SIGSTOP, true); err != nil {
		return err
	}
	return waitStopped(a.proc.pid(), 5*time.Second)
}

// Thaw resumes a frozen apiserver (SIGCONT).
func (a *APIServer) Thaw() error { return a.signalFrozen(syscall.SIGCONT, false) }

// signalFrozen sends sig and, once it is sent, records whether the
// apiserver is now frozen.
func (a *APIServer) signalFrozen(sig syscall.Signal, frozen bool) error {
	if err := a.proc.signal(sig); err != nil {
		return err
	}
	a.mu.Lock()
	a.frozen = frozen
	a.mu.Unlock()
	return nil
}
