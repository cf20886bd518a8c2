package localcluster

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/tcpproxy"
)

// NetNode is one node's network path to the apiserver, for processes run
// as if on that node (a node agent): a network namespace of its own,
// joined to the root namespace by a veth pair, whose only way to the
// apiserver is a TCP proxy listening on the veth's root end. A test delays
// that node's path through its proxy (Proxy().Delay), or drops its packets
// inside the namespace (Exec with iptables), while other nodes' paths stay
// clean. No kubelet runs: the processes a test starts are the node's.
type NetNode struct {
	Name  string
	c     *Cluster
	link  *netLink
	proxy *tcpproxy.Proxy
	procs []*process
}

// AddNetNode makes a network path for the node name (which need not exist
// as a Node object). Close removes it; the cluster's Stop does not.
func (c *Cluster) AddNetNode(name string) (*NetNode, error) {
	if err := checkNetnsSupport(); err != nil {
		return nil, err
	}
	link, err := allocateLink()
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(c.APIServerURL[len("https://"):])
	if err != nil {
		return nil, errors.Join(err, link.delete())
	}
	proxy, err := tcpproxy.NewOn(net.JoinHostPort(link.hostAddr.String(), "0"), net.JoinHostPort(c.serving.addr, port))
	if err != nil {
		return nil, errors.Join(err, link.delete())
	}
	return &NetNode{Name: name, c: c, link: link, proxy: proxy}, nil
}

// Proxy is the node's path to the apiserver.
func (n *NetNode) Proxy() *tcpproxy.Proxy { return n.proxy }

// IP is the node's own address, inside its namespace: a process there
// serves on it, and the root namespace reaches it.
func (n *NetNode) IP() string { return n.link.nsAddr.String() }

// Namespace is the node's network namespace (ip netns).
func (n *NetNode) Namespace() string { return n.link.ns }

// RESTConfig reaches the apiserver from inside the node's namespace, as
// the cluster's admin, through the node's proxy.
func (n *NetNode) RESTConfig() *rest.Config {
	rc := n.c.AdminConfig()
	rc.Host = "https://" + n.proxy.Addr()
	// The serving certificate names localhost, not the proxy's address.
	rc.ServerName = "localhost"
	return rc
}

// WriteKubeconfig writes RESTConfig as a kubeconfig file.
func (n *NetNode) WriteKubeconfig(path string) error { return WriteKubeconfig(n.RESTConfig(), path) }

// Exec runs a command inside the node's namespace and returns its output,
// or an error quoting it.
func (n *NetNode) Exec(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.link.ns}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("in %s: %v: %w: %s", n.Name, args, err, out)
	}
	return string(out), nil
}

// NodeProcess is a process a test runs on a NetNode.
type NodeProcess struct{ p *process }

// Start runs bin with args inside the node's namespace, env added to this
// process's environment, its output in the cluster's directory. It dies
// with the test binary.
func (n *NetNode) Start(name, bin string, env []string, args ...string) (*NodeProcess, error) {
	p := &process{
		name: name + "@" + n.Name, path: "ip", env: env,
		args:    append([]string{"netns", "exec", n.link.ns, bin}, args...),
		logPath: filepath.Join(n.c.dir, name+"-"+n.Name+".log"),
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return &NodeProcess{p}, nil
}

// Stop sends SIGTERM and waits up to grace for the process to exit,
// killing it after that (and saying so).
func (np *NodeProcess) Stop(grace time.Duration) error { return np.p.stop(syscall.SIGTERM, grace) }

// Exited reports whether the process has ended on its own.
func (np *NodeProcess) Exited() bool { return np.p.exited() }

// LogTail is the process's last lines of output.
func (np *NodeProcess) LogTail(lines int) string { return np.p.logTail(lines) }

// PID is the process's id, 0 once stopped.
func (np *NodeProcess) PID() int { return np.p.pid() }

// Close stops the node's processes, its proxy and removes its namespace
// and veth.
func (n *NetNode) Close() error {
	var errs []error
	for _, p := range n.procs {
		if err := p.stop(syscall.SIGTERM, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	n.procs = nil
	errs = append(errs, n.proxy.Close(), n.link.delete())
	return errors.Join(errs...)
}

// String names the node and its addresses, for a test's messages.
func (n *NetNode) String() string {
	return n.Name + " (" + n.IP() + ", through " + n.proxy.Addr() + ", slot " + strconv.Itoa(n.link.slot) + ")"
}
