package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// A Node is a Cluster with one node that runs pods, as a kubeadm
// single-node cluster does: kube-controller-manager and kube-scheduler beside
// the apiserver; containerd with runc, the CRI plugin and the bridge,
// host-local and loopback CNI plugins; kubelet; and kube-proxy in iptables
// mode, so pods reach the kubernetes Service.
//
// Pod addresses live on a bridge the node makes (NodeBridge), which carries
// the node's own address too: the apiserver listens and advertises there,
// since Endpoints refuse loopback and any other address would be a route off
// this machine. Images are imported, never pulled (ImportImage); the sandbox
// image is bin/pause.
//
// A node changes the machine (sysctls, iptables tables, mounts, cgroups, a
// few fixed paths kubelet and containerd insist on), so only one runs at a
// time, under a lock every process on the machine shares, and what it will
// change is written down before it changes anything: Stop undoes it, and the
// next StartNode undoes what a node whose process died left behind.
type Node struct {
	*Cluster
	dir       string
	removeDir bool
	binDir    string
	lock      *os.File
	host      *hostRecord
	bridgeIP  netip.Addr
	podCIDR   netip.Prefix
	// serviceCIDRs are the Services' networks, the only ones a pod has a
	// route to beside its own.
	serviceCIDRs []netip.Prefix

	containerd, kubelet, kubeProxy, controllerManager, scheduler *process
	proxyHealthz                                                 string
}

// NodeName is the name the node registers as.
const NodeName = "watchprobe-node"

// NodeBridge is the bridge that carries the node's address and its pods'.
const NodeBridge = "wpnode0"

// pauseImage is the sandbox image, imported from bin/pause.
const pauseImage = "localhost/watchprobe/pause:node"

// nodeNet holds the /24 candidates for the bridge; the first that no address
// or route of this machine overlaps is used.
var nodeNet = netip.MustParsePrefix("10.198.0.0/16")

// StartNode starts a cluster with a node and waits until the node is Ready
// and kube-proxy has programmed the Services. It needs root and the packages
// `make node-packages` installs. On failure it undoes everything it did and
// returns an error that carries the log tail of the part that failed.
func StartNode(ctx context.Context, opts Options) (*Node, error) {
	binDir, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	if err := checkNodeSupport(binDir); err != nil {
		return nil, err
	}
	lock, err := lockNode(ctx)
	if err != nil {
		return nil, err
	}
	// Holding the lock, any record left is a dead node's.
	if err := sweepNode(); err != nil {
		lock.Close()
		return nil, err
	}
	return startNode(ctx, opts, binDir, lock)
}

// startNode is StartNode for a caller that holds the node lock and has swept.
func startNode(ctx context.Context, opts Options, binDir string, lock *os.File) (_ *Node, err error) {
	n := &Node{lock: lock, binDir: binDir, dir: opts.Dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Stop())
		}
	}()
	if n.dir == "" {
		if n.dir, err = os.MkdirTemp("", "watchprobe-node-"); err != nil {
			return nil, err
		}
		n.removeDir = true
	}
	if n.serviceCIDRs, err = serviceRanges(opts.APIServerFlags); err != nil {
		return nil, err
	}
	if n.podCIDR, err = pickNodeNet(n.serviceCIDRs); err != nil {
		return nil, err
	}
	n.bridgeIP = n.podCIDR.Addr().Next()
	if n.host, err = newHostRecord(n.dir, n.removeDir); err != nil {
		return nil, err
	}
	if err := n.host.setUp(n.bridgeIP, n.podCIDR, n.serviceCIDRs); err != nil {
		return nil, err
	}

	opts.Dir = n.dir
	opts.BinDir = binDir
	opts.APIServerFlags = append([]string{
		"--advertise-address", n.bridgeIP.String(),
		// Without it, the apiserver reaches a kubelet (logs, exec) by the
		// node's hostname, looked up in this machine's resolver: traffic
		// that would leave the machine.
		"--kubelet-preferred-address-types=InternalIP",
	}, opts.APIServerFlags...)
	serviceIPs, err := serviceIPs(opts.APIServerFlags)
	if err != nil {
		return nil, err
	}
	names := loopbackNames()
	names.dns = append(names.dns, "kubernetes", "kubernetes.default", ServerName)
	names.ips = append(append(names.ips, net.IP(n.bridgeIP.AsSlice())), serviceIPs...)
	if n.Cluster, err = start(ctx, opts, serving{addr: n.bridgeIP.String(), names: names, pods: true}); err != nil {
		return nil, err
	}
	if err := n.Cluster.WriteKubeconfig(n.path("admin.kubeconfig")); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	pause, err := BinaryImage(filepath.Join(binDir, "pause"))
	if err != nil {
		return nil, fmt.Errorf("the sandbox image from %s: %w", filepath.Join(binDir, "pause"), err)
	}
	if err := n.ImportImage(ctx, pauseImage, pause); err != nil {
		return nil, err
	}
	if err := n.startNodeProcesses(); err != nil {
		return nil, err
	}
	if err := n.waitNodeReady(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// checkNodeSupport says what this machine lacks for a node, if anything.
func checkNodeSupport(binDir string) error {
	if os.Geteuid() != 0 {
		return errors.New("a node needs root (containerd, kubelet, iptables, cgroups): run the tests as root")
	}
	var missing []string
	for _, c := range []string{"ip", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "iptables", "conntrack", "nft", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a node needs %s: run `make node-packages` (Debian's containerd, runc, containernetworking-plugins, iptables, conntrack, nftables) and iproute2", strings.Join(missing, ", "))
	}
	for _, b := range []string{"kube-apiserver", "etcd", "kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler", "pause"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("%s is missing in %s: run `make controlplane %s`", b, binDir, filepath.Join(binDir, "pause"))
		}
	}
	return nil
}

// pickNodeNet is the first /24 of nodeNet that neither this machine nor the
// Services' networks use; the Services' networks must not overlap the
// machine's either, since the node routes them to its bridge.
func pickNodeNet(serviceCIDRs []netip.Prefix) (netip.Prefix, error) {
	used, err := usedPrefixes()
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, s := range serviceCIDRs {
		for _, u := range used {
			if u.Overlaps(s) {
				return netip.Prefix{}, fmt.Errorf("APIServerFlags: --service-cluster-ip-range %s overlaps %s, which this machine has an address or route in; give another", s, u)
			}
		}
	}
	used = append(used, serviceCIDRs...)
next:
	for i := range 256 {
		b := nodeNet.Addr().As4()
		b[2] = byte(i)
		p := netip.PrefixFrom(netip.AddrFrom4(b), 24)
		for _, u := range used {
			if u.Overlaps(p) {
				continue next
			}
		}
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("every /24 of %s overlaps an address or route of this machine", nodeNet)
}

func (n *Node) path(name string) string { return filepath.Join(n.dir, name) }

// Dir is where the node's state, configs and logs live.
func (n *Node) Dir() string { return n.dir }

// BridgeIP is the node's address, on NodeBridge.
func (n *Node) BridgeIP() netip.Addr { return n.bridgeIP }

// PodCIDR is the network of the pods' addresses.
func (n *Node) PodCIDR() netip.Prefix { return n.podCIDR }

func (n *Node) startContainerd(ctx context.Context) error {
	if err := writeFiles(map[string][]byte{
		n.path("containerd.toml"):            n.containerdConfig(),
		n.path("cni/10-watchprobe.conflist"): n.cniConfig(),
	}); err != nil {
		return err
	}
	n.containerd = &process{
		name: "containerd", path: "containerd", logPath: n.path("containerd.log"),
		args: []string{"--config", n.path("containerd.toml")},
	}
	if err := n.containerd.start(); err != nil {
		return err
	}
	deadline := time.Now().Add(n.readyTimeout)
	for {
		if _, err := n.ctr(ctx, "version"); err == nil {
			return nil
		} else if n.containerd.exited() || time.Now().After(deadline) {
			return fmt.Errorf("containerd not answering on %s (%v)\n%s", n.socket(), err, n.containerd.logTail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *Node) socket() string { return n.path("containerd/containerd.sock") }

// ctr runs containerd's client in the namespace of the CRI plugin.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.socket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (n *Node) startNodeProcesses() error {
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	n.proxyHealthz = "127.0.0.1:" + strconv.Itoa(ports[0])
	if err := writeFiles(map[string][]byte{
		n.path("kubelet.yaml"):    n.kubeletConfig(ports[1]),
		n.path("kube-proxy.yaml"): n.kubeProxyConfig(n.proxyHealthz, ports[2]),
	}); err != nil {
		return err
	}
	kubeconfig := n.path("admin.kubeconfig")
	bin := func(name string) string { return filepath.Join(n.binDir, name) }
	n.kubelet = &process{
		name: "kubelet", path: bin("kubelet"), logPath: n.path("kubelet.log"),
		args: []string{
			"--config", n.path("kubelet.yaml"),
			"--kubeconfig", kubeconfig,
			"--root-dir", n.path("kubelet"),
			"--cert-dir", n.path("kubelet-pki"),
			"--node-ip", n.bridgeIP.String(),
			"--hostname-override", NodeName,
			"--v", "1",
		},
	}
	n.kubeProxy = &process{
		name: "kube-proxy", path: bin("kube-proxy"), logPath: n.path("kube-proxy.log"),
		args: []string{"--config", n.path("kube-proxy.yaml"), "--v", "1"},
	}
	// Both serve only their own metrics and health, on loopback, which
	// nothing here reads; the admin identity keeps RBAC out of their way.
	controller := func(name string, port int, args ...string) *process {
		return &process{
			name: name, path: bin(name), logPath: n.path(name + ".log"),
			args: append([]string{
				"--kubeconfig", kubeconfig,
				"--bind-address", "127.0.0.1",
				"--secure-port", strconv.Itoa(port),
				"--cert-dir", n.path(name + "-certs"),
				"--leader-elect=false",
			}, args...),
		}
	}
	n.controllerManager = controller("kube-controller-manager", ports[3],
		"--root-ca-file", n.path("ca.crt"),
		"--service-account-private-key-file", n.path("sa.key"),
		"--use-service-account-credentials=false")
	n.scheduler = controller("kube-scheduler", ports[4])
	for _, p := range []*process{n.kubelet, n.kubeProxy, n.controllerManager, n.scheduler} {
		if err := p.start(); err != nil {
			return err
		}
	}
	return nil
}

// waitNodeReady waits for the node's Ready condition and kube-proxy's first
// sync of the Services.
func (n *Node) waitNodeReady(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(n.AdminConfig())
	if err != nil {
		return err
	}
	// kubelet's first status comes after it has set up its cgroups and
	// the runtime: slower than an apiserver on a busy machine.
	within := 2 * n.readyTimeout
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var lastErr error
	for {
		lastErr = n.nodeReady(ctx, client)
		if lastErr == nil {
			return nil
		}
		for _, p := range []*process{n.containerd, n.kubelet, n.kubeProxy, n.controllerManager, n.scheduler} {
			if p.exited() {
				return fmt.Errorf("%s exited before the node was ready (%v)\n%s", p.name, lastErr, p.logTail(40))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the node is not ready after %s: %v\n--- kubelet log tail:\n%s\n--- kube-proxy log tail:\n%s",
				within, lastErr, n.kubelet.logTail(30), n.kubeProxy.logTail(20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *Node) nodeReady(ctx context.Context, client kubernetes.Interface) error {
	node, err := client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status != corev1.ConditionTrue {
				return fmt.Errorf("node %s: Ready is %s: %s", NodeName, c.Status, c.Message)
			}
			ready = true
		}
	}
	if !ready {
		return fmt.Errorf("node %s has no Ready condition yet", NodeName)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.proxyHealthz+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("kube-proxy's healthz: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-proxy's healthz answered %s: its rules are not synced yet", resp.Status)
	}
	return nil
}

// Stop removes every pod, stops every process and undoes every change the
// node made to the machine, in the order that leaves nothing behind; then
// removes the directory if StartNode made it, and lets the next node start.
// It is safe to call more than once.
func (n *Node) Stop() error {
	err := n.tearDown()
	if n.lock != nil {
		err = errors.Join(err, n.lock.Close())
		n.lock = nil
	}
	return err
}

// tearDown is Stop but for the lock.
func (n *Node) tearDown() error {
	var errs []error
	stop := func(p *process, grace time.Duration) {
		if p != nil {
			errs = append(errs, ignoreKilled(p.stop(syscall.SIGTERM, grace)))
		}
	}
	// Nothing may recreate or reschedule the pods being removed.
	stop(n.controllerManager, 10*time.Second)
	stop(n.scheduler, 10*time.Second)
	if n.kubelet != nil && !n.kubelet.exited() {
		errs = append(errs, n.removePods())
	}
	stop(n.kubeProxy, 10*time.Second)
	if n.kubeProxy != nil {
		// kube-proxy leaves its chains in place when it stops.
		out, err := exec.Command(filepath.Join(n.binDir, "kube-proxy"), "--cleanup", "--v", "0").CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("kube-proxy --cleanup: %w: %s", err, out))
		}
	}
	stop(n.kubelet, 15*time.Second)
	stop(n.containerd, 15*time.Second)
	stopCluster := func() error {
		if n.Cluster == nil {
			return nil
		}
		return n.Cluster.Stop()
	}
	if n.host != nil {
		errs = append(errs, n.host.tearDown(stopCluster))
	} else {
		errs = append(errs, stopCluster())
		if n.removeDir {
			errs = append(errs, os.RemoveAll(n.dir))
		}
	}
	n.Cluster, n.host = nil, nil
	n.containerd, n.kubelet, n.kubeProxy, n.controllerManager, n.scheduler = nil, nil, nil, nil, nil
	n.removeDir = false
	return errors.Join(errs...)
}

// removePods deletes every pod at once and waits until kubelet has stopped
// their containers and removed their sandboxes (and with them their network
// namespaces and addresses), which is when no shim of this containerd is
// left.
func (n *Node) removePods() error {
	client, err := kubernetes.NewForConfig(n.AdminConfig())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the pods to remove: %w", err)
	}
	zero := int64(0)
	for _, p := range pods.Items {
		if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return fmt.Errorf("removing pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	for {
		shims := shimsOf(n.socket())
		if len(shims) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("containerd shims %v still running 2 minutes after their pods were deleted\n%s", shims, n.kubelet.logTail(20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// LogTail returns the last lines of every process's log, to explain a failure.
func (n *Node) LogTail(lines int) string {
	var b strings.Builder
	if n.Cluster != nil {
		b.WriteString(n.Cluster.LogTail(lines))
	}
	for _, p := range []*process{n.containerd, n.kubelet, n.kubeProxy, n.controllerManager, n.scheduler} {
		if p != nil {
			fmt.Fprintf(&b, "\n--- %s log tail:\n%s", p.name, p.logTail(lines))
		}
	}
	return b.String()
}
