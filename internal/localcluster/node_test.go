package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// hostState is what of the machine a node could change, as this test can
// see it. Other tests on the machine make network namespaces and veths of
// their own (wp-*, wpr*): those are left out.
type hostState struct {
	links, routes, netns, nftTables, mounts, cgroups, fixedPaths []string
	sysctls                                                      map[string]string
	// ruleset is `nft list ruleset`: the iptables-nft chains and rules.
	ruleset string
}

// watchedSysctls are nodeSysctls and those kube-proxy would set with
// other settings than the node's (conntrack limits and timeouts,
// route_localnet), or a bridge with netfilter on would need.
var watchedSysctls = append(slices.Clone(nodeSysctls),
	"net/netfilter/nf_conntrack_max",
	"net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"net/ipv4/conf/all/route_localnet",
	"net/bridge/bridge-nf-call-iptables",
)

func readHostState(t *testing.T) hostState {
	t.Helper()
	var s hostState
	out, err := ip("-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if !strings.HasPrefix(name, "wpr") {
				s.links = append(s.links, name)
			}
		}
	}
	for _, family := range []string{"-4", "-6"} {
		out, err := ip(family, "route", "show", "table", "all")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			if line != "" && !strings.Contains(line, " dev wpr") {
				s.routes = append(s.routes, line)
			}
		}
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), netnsPrefix) {
			s.netns = append(s.netns, e.Name())
		}
	}
	if s.nftTables, err = nftTables(); err != nil {
		t.Fatal(err)
	}
	rules, err := execOutput("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	s.ruleset = rules
	all, err := mountsUnder("")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		// Other tests' namespaces, and the mount ip netns makes for
		// the first of them.
		if m != netnsDir && !strings.HasPrefix(m, netnsDir+"/"+netnsPrefix) {
			s.mounts = append(s.mounts, m)
		}
	}
	slices.Sort(s.mounts)
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hierarchies {
		matches, _ := filepath.Glob(filepath.Join(h, "watchprobe-node-*"))
		s.cgroups = append(s.cgroups, matches...)
	}
	for _, p := range nodeFixedPaths {
		if _, err := os.Lstat(p); err == nil {
			s.fixedPaths = append(s.fixedPaths, p)
		}
	}
	s.sysctls = map[string]string{}
	for _, k := range watchedSysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err == nil {
			s.sysctls[k] = strings.TrimSpace(string(v))
		}
	}
	return s
}

func execOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// diffHostState says how after differs from before, or "" if it does not.
func diffHostState(before, after hostState) string {
	var b strings.Builder
	list := func(what string, x, y []string) {
		for _, v := range y {
			if !slices.Contains(x, v) {
				fmt.Fprintf(&b, "%s added: %s\n", what, v)
			}
		}
		for _, v := range x {
			if !slices.Contains(y, v) {
				fmt.Fprintf(&b, "%s removed: %s\n", what, v)
			}
		}
	}
	list("link", before.links, after.links)
	list("route", before.routes, after.routes)
	list("network namespace", before.netns, after.netns)
	list("nftables table", before.nftTables, after.nftTables)
	list("mount", before.mounts, after.mounts)
	list("cgroup", before.cgroups, after.cgroups)
	list("path", before.fixedPaths, after.fixedPaths)
	for k, v := range before.sysctls {
		if after.sysctls[k] != v {
			fmt.Fprintf(&b, "sysctl %s: %q, was %q\n", k, after.sysctls[k], v)
		}
	}
	if before.ruleset != after.ruleset {
		fmt.Fprintf(&b, "nft ruleset:\n%s\nwas:\n%s\n", after.ruleset, before.ruleset)
	}
	return b.String()
}

// runPodWithService runs a pod of the sandbox image with the volumes a
// chart's pod has (a ConfigMap, a projected ServiceAccount token, an
// emptyDir), and a Service in front of it, so that the node makes every
// kind of state it can: mounts, a network namespace, cgroups, iptables
// rules. It returns the pod once Running.
func runPodWithService(t *testing.T, n *Node) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	client := kubernetes.NewForConfigOrDie(n.AdminConfig())
	if _, err := client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "teardown"}, Data: map[string]string{"a": "b"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "teardown"}
	if _, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "teardown"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "teardown", Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "pause", Image: pauseImage, ImagePullPolicy: corev1.PullNever,
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/config"}, {Name: "scratch", MountPath: "/scratch"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "teardown"}}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	// The ServiceAccount admission plugin refuses the pod until
	// kube-controller-manager has made the namespace's default
	// ServiceAccount.
	var err error
	Eventually(t, time.Minute, "the pod is admitted", func() bool {
		_, err = client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err)
	})
	var got *corev1.Pod
	EventuallyShows(t, 2*time.Minute, "the pod is Running", func() bool {
		got, err = client.CoreV1().Pods("default").Get(ctx, "teardown", metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning
	}, func() string { return fmt.Sprintf("%v %+v", err, got.Status) })
	return got
}

// A node leaves the machine as it found it: no process, mount, network
// namespace, link, cgroup, iptables table or rule, sysctl or fixed path of
// its own stays after Stop, with a pod and a Service running until then.
func TestNodeTeardownLeavesNothing(t *testing.T) {
	n, before := startNodeAfterReading(t)
	dir, socket := n.Dir(), n.socket()
	pod := runPodWithService(t, n)
	if ip, err := netip.ParseAddr(pod.Status.PodIP); err != nil || !n.PodCIDR().Contains(ip) {
		t.Errorf("pod IP %q, want one in the node's %s", pod.Status.PodIP, n.PodCIDR())
	}
	// What the node made, so that its absence afterwards means something.
	during := readHostState(t)
	if len(during.mounts) <= len(before.mounts) || len(during.cgroups) == 0 || len(shimsOf(socket)) == 0 {
		t.Fatalf("a running node shows no mounts, cgroups or shims of its own:\n%s", diffHostState(before, during))
	}
	t.Logf("what the running node changed:\n%s", diffHostState(before, during))

	if err := n.tearDown(); err != nil {
		t.Fatalf("stopping the node: %v\n%s", err, n.LogTail(20))
	}
	checkNothingLeft(t, before, dir, socket)
}

// startNodeAfterReading starts a node and returns it with the machine's
// state from before it, read holding the node lock, after any dead node's
// leftovers were swept: another test's node cannot be running then. The
// node stops when t ends; the test tears it down first, keeping the lock
// while it looks.
func startNodeAfterReading(t *testing.T) (*Node, hostState) {
	t.Helper()
	binDir, err := findBinDir("")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkNodeSupport(binDir); err != nil {
		t.Fatal(err)
	}
	lock, err := lockNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := sweepNode(); err != nil {
		lock.Close()
		t.Fatal(err)
	}
	before := readHostState(t)
	n, err := startNode(context.Background(), Options{}, binDir, lock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
	})
	return n, before
}

// The leftovers of a node whose process died without its teardown (its
// children killed as Pdeathsig kills them, the containers and shims, which
// outlive it, still running) are removed by the next node's start.
func TestNodeLeftoversAreSwept(t *testing.T) {
	n, before := startNodeAfterReading(t)
	dir, socket := n.Dir(), n.socket()
	runPodWithService(t, n)
	for _, p := range []*process{n.scheduler, n.controllerManager, n.kubeProxy, n.kubelet, n.containerd, n.apiserver, n.etcd} {
		if err := p.stop(syscall.SIGKILL, 0); err != nil && !errors.Is(err, errKilled) {
			t.Fatal(err)
		}
	}
	if len(shimsOf(socket)) == 0 {
		t.Fatal("no shim outlived containerd: the sweep would have nothing to do")
	}
	// The node's own teardown must not run: the sweep works from the
	// record alone, as StartNode's does, under the lock this test still holds.
	n.host, n.Cluster = nil, nil
	if err := sweepNode(); err != nil {
		t.Fatalf("sweeping the dead node: %v", err)
	}
	checkNothingLeft(t, before, dir, socket)
}

func checkNothingLeft(t *testing.T, before hostState, dir, socket string) {
	t.Helper()
	if d := diffHostState(before, readHostState(t)); d != "" {
		t.Errorf("the machine differs from before the node:\n%s", d)
	}
	if mounts, _ := mountsUnder(dir); len(mounts) > 0 {
		t.Errorf("still mounted under the node's directory: %v", mounts)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the node's directory %s is still there (%v)", dir, err)
	}
	if _, err := os.Stat(nodeRecordPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the node record %s is still there (%v)", nodeRecordPath, err)
	}
	if pids := shimsOf(socket); len(pids) > 0 {
		t.Errorf("containerd shims still running: %v", pids)
	}
	if pids := processesUnder(dir); len(pids) > 0 {
		t.Errorf("processes still running from the node's directory: %v", pids)
	}
}

// processesUnder lists processes whose command line names dir: every
// process of a node does (configs, sockets, state).
func processesUnder(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	return out
}
