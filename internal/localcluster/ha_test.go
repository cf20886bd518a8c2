package localcluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// One HA cluster (A) carries most subtests, one after another, since each
// apiserver start costs seconds on this machine; a second one (B) starts at
// the same time to show that clusters side by side get separate namespaces
// and addresses. A serves etcd over TLS, B plain http, so both etcd paths
// and the re-signing of etcd's certificate for a new apiserver are used.
func TestHA(t *testing.T) {
	ctx := context.Background()
	began := time.Now()
	var a, b *HACluster
	var errA, errB error
	var wg sync.WaitGroup
	wg.Go(func() { a, errA = StartHA(ctx, HAOptions{Options: Options{EtcdTLS: true}}) })
	wg.Go(func() { b, errB = StartHA(ctx, HAOptions{APIServers: 2}) })
	wg.Wait()
	for _, h := range []*HACluster{a, b} {
		if h != nil {
			t.Cleanup(func() {
				if err := h.Stop(); err != nil {
					t.Errorf("stopping an HA cluster: %v", err)
				}
			})
		}
	}
	if errA != nil || errB != nil {
		t.Fatalf("starting two HA clusters at once: %v; %v", errA, errB)
	}
	t.Logf("two HA clusters (3 + 2 apiservers) ready after %s", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster A logs:\n%s", a.LogTail(30))
		}
	})
	if got := len(a.APIServers()); got != 3 {
		t.Fatalf("HAOptions{} started %d apiservers, want the default 3", got)
	}

	step := func(name string, f func(t *testing.T)) {
		start := time.Now()
		ok := t.Run(name, f)
		t.Logf("%s: %s", name, time.Since(start).Round(time.Millisecond))
		if !ok {
			t.FailNow()
		}
	}

	step("two clusters side by side", func(t *testing.T) {
		seenNS, seenAddr := map[string]bool{}, map[string]bool{}
		for _, s := range append(a.APIServers(), b.APIServers()...) {
			if seenNS[s.Namespace()] || seenAddr[s.IP()] {
				t.Fatalf("namespace %s or address %s handed out twice", s.Namespace(), s.IP())
			}
			seenNS[s.Namespace()], seenAddr[s.IP()] = true, true
			if !strings.HasPrefix(s.Namespace(), "wp-") {
				t.Errorf("namespace %q lacks the wp- prefix", s.Namespace())
			}
		}
		waitEndpoints(t, b, b.APIServers())
		gone := resources(t, b)
		if err := b.Stop(); err != nil {
			t.Fatal(err)
		}
		checkGone(t, gone)
		for _, s := range a.APIServers() {
			if _, err := os.Stat("/run/netns/" + s.Namespace()); err != nil {
				t.Errorf("stopping cluster B removed A's namespace %s: %v", s.Namespace(), err)
			}
		}
	})

	step("one kube-apiserver process per namespace, each its own host", func(t *testing.T) {
		for _, s := range a.APIServers() {
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", s.PID()))
			if err != nil || strings.TrimSpace(string(comm)) != "kube-apiserver" {
				t.Errorf("pid %d of apiserver %d is %q (%v), want kube-apiserver itself so that signals reach it", s.PID(), s.Index(), comm, err)
			}
			if got, want := inode(t, fmt.Sprintf("/proc/%d/ns/net", s.PID())), inode(t, "/run/netns/"+s.Namespace()); got != want {
				t.Errorf("apiserver %d is not in network namespace %s", s.Index(), s.Namespace())
			}
		}
		// The identity Lease is named after the hostname: one per
		// apiserver, as one per control-plane node.
		client := kubernetes.NewForConfigOrDie(a.RESTConfig())
		Eventually(t, 60*time.Second, "an identity Lease for each of the 3 apiservers", func() bool {
			leases, err := client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "apiserver.kubernetes.io/identity=kube-apiserver"})
			return err == nil && len(leases.Items) == 3
		})
	})

	step("the kubernetes EndpointSlice lists every apiserver", func(t *testing.T) {
		waitEndpoints(t, a, a.APIServers())
	})

	step("TLS to each address verifies as kubernetes.default.svc", func(t *testing.T) {
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(a.CAData())
		for _, s := range a.APIServers() {
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Address(), &tls.Config{RootCAs: roots, ServerName: a.ServerName()})
			if err != nil {
				t.Fatalf("TLS to %s as %s: %v", s.Address(), a.ServerName(), err)
			}
			leaf := conn.ConnectionState().PeerCertificates[0]
			conn.Close()
			for _, name := range []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"} {
				if !slices.Contains(leaf.DNSNames, name) {
					t.Errorf("%s's certificate lacks %s: %v", s.Address(), name, leaf.DNSNames)
				}
			}
			for _, ip := range []string{s.IP(), "10.0.0.1", "127.0.0.1"} {
				if err := leaf.VerifyHostname(ip); err != nil {
					t.Errorf("%s's certificate: %v", s.Address(), err)
				}
			}
			if _, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.Address(), &tls.Config{RootCAs: roots, ServerName: "kubernetes.example"}); err == nil {
				t.Errorf("TLS to %s verified as kubernetes.example", s.Address())
			}
			if _, err := kubernetes.NewForConfigOrDie(s.RESTConfig()).Discovery().ServerVersion(); err != nil {
				t.Errorf("apiserver %d's own config: %v", s.Index(), err)
			}
		}
		if _, err := kubernetes.NewForConfigOrDie(a.RESTConfig()).Discovery().ServerVersion(); err != nil {
			t.Errorf("through the load balancer: %v", err)
		}
	})

	step("a stalled etcd link holds back one apiserver's watch alone", func(t *testing.T) {
		s0, s1 := a.APIServers()[0], a.APIServers()[1]
		c0, c1 := kubernetes.NewForConfigOrDie(s0.RESTConfig()), kubernetes.NewForConfigOrDie(s1.RESTConfig())
		const name = "stall-marker"
		opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: "0"}
		w0, err := c0.CoreV1().ConfigMaps("default").Watch(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w0.Stop()
		w1, err := c1.CoreV1().ConfigMaps("default").Watch(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer w1.Stop()

		s0.EtcdLink().Stall()
		defer s0.EtcdLink().Resume()
		writeCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if _, err := c1.CoreV1().ConfigMaps("default").Create(writeCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a write through apiserver 1 while apiserver 0's etcd link stalls: %v", err)
		}
		if !sawAdded(w1, name, 15*time.Second) {
			t.Fatal("apiserver 1's watch did not deliver the write")
		}
		if sawAdded(w0, name, 3*time.Second) {
			t.Fatal("apiserver 0's watch delivered a write its etcd link never carried")
		}
		resumed := time.Now()
		s0.EtcdLink().Resume()
		if !sawAdded(w0, name, 30*time.Second) {
			// A watch may end instead; a list then must see the write.
			Eventually(t, 30*time.Second, "apiserver 0 lists the write after its etcd link resumed", func() bool {
				_, err := c0.CoreV1().ConfigMaps("default").Get(ctx, name, metav1.GetOptions{})
				return err == nil
			})
		}
		t.Logf("apiserver 0 caught up %s after its etcd link resumed", time.Since(resumed).Round(time.Millisecond))
	})

	step("a frozen apiserver times out, the balancer avoids it, Thaw revives it", func(t *testing.T) {
		s2 := a.APIServers()[2]
		if err := s2.Freeze(); err != nil {
			t.Fatal(err)
		}
		thawed := false
		defer func() {
			if !thawed {
				s2.Thaw()
			}
		}()
		rc := s2.RESTConfig()
		rc.Timeout = 2 * time.Second
		start := time.Now()
		if _, err := kubernetes.NewForConfigOrDie(rc).Discovery().ServerVersion(); err == nil {
			t.Fatal("a frozen apiserver answered")
		} else if took := time.Since(start); took < 1500*time.Millisecond {
			t.Fatalf("a request to the frozen apiserver failed after %s (%v), want a timeout, not a refusal", took, err)
		}
		lb := freshClient(a)
		for i := range 6 {
			resp, err := lb.Get("https://" + a.LoadBalancerAddr() + "/version")
			if err != nil {
				t.Fatalf("connection %d through the balancer with apiserver 2 frozen: %v", i, err)
			}
			resp.Body.Close()
		}
		if err := s2.Thaw(); err != nil {
			t.Fatal(err)
		}
		thawed = true
		if _, err := kubernetes.NewForConfigOrDie(rc).Discovery().ServerVersion(); err != nil {
			t.Fatalf("apiserver 2 after Thaw: %v", err)
		}
	})

	step("Stop withdraws an endpoint, Start restores it, AddAPIServer adds one", func(t *testing.T) {
		s := a.APIServers()
		addr := s[1].Address()
		start := time.Now()
		if err := s[1].Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("Stop took %s", time.Since(start).Round(time.Millisecond))
		waitEndpoints(t, a, []*APIServer{s[0], s[2]})
		t.Logf("endpoint withdrawn %s after Stop began", time.Since(start).Round(time.Millisecond))

		s3, err := a.AddAPIServer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s3.Index() != 3 || len(a.APIServers()) != 4 {
			t.Fatalf("the added apiserver has index %d among %d, want 3 among 4", s3.Index(), len(a.APIServers()))
		}
		waitEndpoints(t, a, []*APIServer{s[0], s[2], s3})

		if err := s[1].Start(ctx); err != nil {
			t.Fatal(err)
		}
		if s[1].Address() != addr {
			t.Fatalf("restarted at %s, want %s", s[1].Address(), addr)
		}
		waitEndpoints(t, a, a.APIServers())
	})

	step("a killed apiserver's endpoint goes when its lease expires", func(t *testing.T) {
		s := a.APIServers()
		start := time.Now()
		if err := s[3].Kill(); err != nil {
			t.Fatal(err)
		}
		// The lease expires 5 to 15 s after the kill (15 s TTL, renewed
		// every 10 s), then the next reconcile of a live apiserver (every
		// 10 s) drops the endpoint: 25 s at worst on an idle machine.
		waitEndpoints(t, a, s[:3])
		t.Logf("a killed apiserver's endpoint went after %s", time.Since(start).Round(time.Millisecond))
	})

	step("Stop leaves no namespace, veth or process", func(t *testing.T) {
		gone := resources(t, a)
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
		checkGone(t, gone)
		if _, err := os.Stat(a.Dir()); err == nil {
			t.Errorf("the cluster directory %s is still there", a.Dir())
		}
	})
}

// waitEndpoints waits until the kubernetes EndpointSlice in default lists
// exactly the addresses of want, on APIServerPort.
func waitEndpoints(t *testing.T, h *HACluster, want []*APIServer) {
	t.Helper()
	var wantAddrs []string
	for _, s := range want {
		wantAddrs = append(wantAddrs, s.Address())
	}
	slices.Sort(wantAddrs)
	client := kubernetes.NewForConfigOrDie(h.RESTConfig())
	var last []string
	var lastErr error
	deadline := time.Now().Add(60 * time.Second)
	for {
		last, lastErr = endpointAddresses(client)
		if lastErr == nil && slices.Equal(last, wantAddrs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kubernetes EndpointSlice lists %v (%v), want %v", last, lastErr, wantAddrs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func endpointAddresses(client kubernetes.Interface) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := client.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, s := range list.Items {
		for _, p := range s.Ports {
			for _, e := range s.Endpoints {
				for _, addr := range e.Addresses {
					addrs = append(addrs, net.JoinHostPort(addr, strconv.Itoa(int(*p.Port))))
				}
			}
		}
	}
	slices.Sort(addrs)
	return addrs, nil
}

// sawAdded reports whether w delivers an ADDED event for name within d.
func sawAdded(w watch.Interface, name string, d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false
			}
			if cm, isCM := ev.Object.(*corev1.ConfigMap); isCM && ev.Type == watch.Added && cm.Name == name {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// freshClient opens a new connection for every request, so each one is
// balanced anew.
func freshClient(h *HACluster) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(h.CAData())
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: h.ServerName()},
			DisableKeepAlives: true,
		},
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// leftovers are what an HA cluster or a link made on the machine, each
// known by what no other owner can share: a namespace by its name, which
// carries its owner's pid and start time; a veth by its ifindex, since its
// name is its slot's and a freed slot goes to the next allocation on the
// machine, another test binary's as likely as this one's; a process by its
// pid and start time, since pids are reused.
type leftovers struct {
	namespaces []string
	veths      []veth
	procs      []proc
}

type veth struct {
	name  string
	index int
}

type proc struct {
	pid   int
	start uint64
}

// linkLeftovers are the namespace and root-end veth of links that are
// held: while a link holds its slot, the veth of its slot's name is its own.
func linkLeftovers(t *testing.T, links ...*netLink) leftovers {
	t.Helper()
	var l leftovers
	for _, link := range links {
		iface, err := net.InterfaceByName(link.hostIf)
		if err != nil {
			t.Fatalf("the veth %s of held link %s: %v", link.hostIf, link.ns, err)
		}
		l.namespaces = append(l.namespaces, link.ns)
		l.veths = append(l.veths, veth{name: link.hostIf, index: iface.Index})
	}
	return l
}

// procLeftover is a running process, known by its pid and start time.
func procLeftover(t *testing.T, pid int) proc {
	t.Helper()
	start, err := processStartTime(pid)
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	return proc{pid: pid, start: start}
}

func resources(t *testing.T, h *HACluster) leftovers {
	t.Helper()
	var links []*netLink
	for _, s := range h.APIServers() {
		links = append(links, s.link)
	}
	l := linkLeftovers(t, links...)
	for _, s := range h.APIServers() {
		if pid := s.PID(); pid != 0 {
			l.procs = append(l.procs, procLeftover(t, pid))
		}
	}
	if pid := h.base.etcd.pid(); pid != 0 {
		l.procs = append(l.procs, procLeftover(t, pid))
	}
	return l
}

// remaining says which of l are still there.
func remaining(t *testing.T, l leftovers) []string {
	t.Helper()
	out, err := ip("netns", "list")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed = append(listed, f[0])
		}
	}
	var left []string
	for _, ns := range l.namespaces {
		if slices.Contains(listed, ns) {
			left = append(left, "namespace "+ns)
		}
	}
	for _, v := range l.veths {
		// ifindexes are handed out in increasing order and not reused
		// until they wrap at 2^31: one still there is this veth.
		if iface, err := net.InterfaceByIndex(v.index); err == nil {
			left = append(left, fmt.Sprintf("veth %s (ifindex %d, now named %s)", v.name, v.index, iface.Name))
		}
	}
	for _, p := range l.procs {
		if start, err := processStartTime(p.pid); err == nil && start == p.start {
			left = append(left, fmt.Sprintf("process %d", p.pid))
		}
	}
	return left
}

func checkGone(t *testing.T, l leftovers) {
	t.Helper()
	for _, what := range remaining(t, l) {
		t.Errorf("%s is still there", what)
	}
}

// A slot freed by one link can go to another process's link at once, under
// the same veth name: whether a link is gone is a question about that link,
// never about whatever bears its slot's names by then.
func TestHANetnsGoneCheckFollowsTheLinkNotItsSlot(t *testing.T) {
	mine := allocateForTest(t)
	gone := linkLeftovers(t, mine)
	// The next owner is the parent, alive throughout, so that no
	// allocation elsewhere sweeps its namespace meanwhile.
	start, err := processStartTime(os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	next := newNetLink(fmt.Sprintf("%d-%d", os.Getppid(), start), mine.slot)
	handOver(t, mine, next)
	if left := remaining(t, gone); len(left) != 0 {
		t.Errorf("a deleted link whose slot went to another owner at once counts as left over: %v", left)
	}
	held := linkLeftovers(t, next)
	if left := remaining(t, held); len(left) != 2 {
		t.Errorf("a held link shows %v as still there, want its namespace %s and veth %s", left, next.ns, next.hostIf)
	}
	if err := next.delete(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, held)
}

// A namespace whose owner is gone is removed, with the processes in it, by
// the next allocation on the machine.
func TestHANetnsLeftoversSwept(t *testing.T) {
	mine := allocateForTest(t)
	// The same slot, named for an owner that never existed: this process's
	// pid with another start time, as after a crash and pid reuse. Any
	// allocation on the machine sweeps it, so the lock is held until the
	// stray process is inside and the veth is known by its ifindex.
	crashed := newNetLink(fmt.Sprintf("%d-1", os.Getpid()), mine.slot)
	var stray *exec.Cmd
	var swept leftovers
	err := withNetnsLock(func() error {
		if err := mine.deleteLocked(); err != nil {
			return err
		}
		if err := crashed.create(); err != nil {
			return err
		}
		iface, err := net.InterfaceByName(crashed.hostIf)
		if err != nil {
			return err
		}
		swept = leftovers{namespaces: []string{crashed.ns}, veths: []veth{{crashed.hostIf, iface.Index}}}
		stray = exec.Command("ip", "netns", "exec", crashed.ns, "sleep", "300")
		if err := stray.Start(); err != nil {
			return err
		}
		// `ip netns exec` enters the namespace after it started: until then
		// a sweep cannot see the process there, and on a loaded machine
		// that takes a while.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			out, _ := ip("netns", "pids", crashed.ns)
			if slices.Contains(strings.Fields(out), strconv.Itoa(stray.Process.Pid)) {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the stray process is not inside %s after 10s", crashed.ns)
			}
		}
	})
	t.Cleanup(func() { crashed.delete() })
	exited := make(chan error, 1)
	if stray != nil && stray.Process != nil {
		go func() { exited <- stray.Wait() }()
		t.Cleanup(func() { stray.Process.Kill() })
	}
	if err != nil {
		t.Fatal(err)
	}

	next, err := allocateLink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { next.delete() })
	held := linkLeftovers(t, next)
	checkGone(t, swept)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the process left in the crashed owner's namespace still runs")
	}
	if err := next.delete(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, held)
}

// A link deleted again (HACluster.Stop is safe to call twice) after its
// slot went to another owner leaves that owner's veth alone: veth names are
// the slot's, and removing another test's veth cuts its apiserver off and
// sends its traffic out of the default route.
func TestHANetnsSecondDeleteSparesTheNextOwner(t *testing.T) {
	mine := allocateForTest(t)
	// The next owner is a process that is alive throughout (the parent,
	// go test), so that no allocation sweeps its namespace meanwhile.
	start, err := processStartTime(os.Getppid())
	if err != nil {
		t.Fatal(err)
	}
	next := newNetLink(fmt.Sprintf("%d-%d", os.Getppid(), start), mine.slot)
	handOver(t, mine, next)
	held := linkLeftovers(t, next)
	if err := mine.delete(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/sys/class/net/" + next.hostIf, netnsDir + "/" + next.ns} {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the next owner's %s is gone after the first owner's second delete: %v", path, err)
		}
	}
	if err := next.delete(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, held)
}

// handOver frees mine's slot and makes next in it, under the lock so that
// no other process takes the slot between, and removes next when t ends.
func handOver(t *testing.T, mine, next *netLink) {
	t.Helper()
	err := withNetnsLock(func() error {
		if err := mine.deleteLocked(); err != nil {
			return err
		}
		return next.create()
	})
	t.Cleanup(func() { next.delete() })
	if err != nil {
		t.Fatal(err)
	}
}

// Test binaries run side by side: two processes allocating at once get
// different namespaces and disjoint subnets. Other processes on the
// machine allocate meanwhile too, and take the slots these free as soon as
// they are free: what is checked gone is these links, by identity.
func TestHANetnsAllocatorAcrossProcesses(t *testing.T) {
	if err := checkNetnsSupport(); err != nil {
		t.Fatal(err)
	}
	const perProcess = 4
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		lines chan string // its stdout, closed when it ends
		out   []string    // what it printed but its links
		done  bool
	}
	// finish ends a child and keeps what it printed last: its test's
	// failures go to its stdout, and only then.
	finish := func(c *child) error {
		if c.done {
			return nil
		}
		c.done = true
		c.stdin.Close()
		for line := range c.lines {
			c.out = append(c.out, line)
		}
		return c.cmd.Wait()
	}
	children := make([]*child, 2)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHANetnsAllocatorHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "WATCHPROBE_NETNS_HELPER="+strconv.Itoa(perProcess))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{cmd: cmd, stdin: stdin, lines: make(chan string)}
		go func() {
			defer close(c.lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				c.lines <- sc.Text()
			}
		}()
		children[i] = c
		t.Cleanup(func() {
			err := finish(c)
			if t.Failed() {
				t.Logf("helper process %d (%v) printed:\n%s", cmd.Process.Pid, err, strings.Join(c.out, "\n"))
			}
		})
	}
	var got leftovers
	var nets []netip.Prefix
	for _, c := range children {
		// Read until the child says it holds its links; it keeps them
		// until its stdin closes.
		n := 0
		for line := range c.lines {
			if line == "holding" {
				break
			}
			f := strings.Fields(line)
			if len(f) != 5 || f[0] != "link" {
				c.out = append(c.out, line)
				continue
			}
			n++
			name, p, hostIf := f[1], netip.MustParsePrefix(f[2]), f[3]
			index, err := strconv.Atoi(f[4])
			if err != nil {
				t.Fatalf("helper line %q: %v", line, err)
			}
			for _, other := range nets {
				if other.Overlaps(p) {
					t.Errorf("subnet %s handed out twice", p)
				}
			}
			if slices.Contains(got.namespaces, name) {
				t.Errorf("namespace %s handed out twice", name)
			}
			if _, err := os.Stat("/run/netns/" + name); err != nil {
				t.Errorf("namespace %s reported but missing: %v", name, err)
			}
			got.namespaces, got.veths, nets = append(got.namespaces, name), append(got.veths, veth{hostIf, index}), append(nets, p)
		}
		if n != perProcess {
			t.Fatalf("a helper process reported %d links, want %d", n, perProcess)
		}
	}
	for _, c := range children {
		if err := finish(c); err != nil {
			t.Errorf("helper process: %v", err)
		}
	}
	checkGone(t, got)
}

// TestHANetnsAllocatorHelper is the child of TestHANetnsAllocatorAcrossProcesses.
func TestHANetnsAllocatorHelper(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("WATCHPROBE_NETNS_HELPER"))
	if err != nil {
		return // run directly: nothing to do
	}
	links := make([]*netLink, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { links[i], errs[i] = allocateLink() })
	}
	wg.Wait()
	for i, l := range links {
		if errs[i] != nil {
			t.Error(errs[i])
			continue
		}
		// Held, the veth of the slot's name is this link's.
		iface, err := net.InterfaceByName(l.hostIf)
		if err != nil {
			t.Error(err)
			continue
		}
		fmt.Printf("link %s %s %s %d\n", l.ns, slotPrefix(l.slot), l.hostIf, iface.Index)
	}
	fmt.Println("holding")
	io.Copy(io.Discard, os.Stdin) //nolint:errcheck // until the parent closes it
	for _, l := range links {
		if l != nil {
			if err := l.delete(); err != nil {
				t.Error(err)
			}
		}
	}
}

// A start that fails (here every apiserver refuses a flag) removes what it
// made: no namespace of this process, no child process.
func TestHAFailedStartLeavesNothing(t *testing.T) {
	if _, err := StartHA(context.Background(), HAOptions{APIServers: -1}); err == nil || !strings.Contains(err.Error(), "HAOptions.APIServers") {
		t.Errorf("APIServers: -1 gave %v, want an error naming HAOptions.APIServers", err)
	}
	before := ownNamespaces(t)
	_, err := StartHA(context.Background(), HAOptions{APIServers: 2, Options: Options{APIServerFlags: []string{"--no-such-flag"}}})
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("StartHA with a bad apiserver flag gave %v, want an error quoting the apiserver's complaint", err)
	}
	if after := ownNamespaces(t); len(after) != len(before) {
		t.Errorf("namespaces of this process before the failed start %v, after %v", before, after)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Field 4, the parent pid, follows the parenthesised command name.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			t.Errorf("child process %d (%s) outlived the failed start", pid, stat[:strings.IndexByte(string(stat), ')')+1])
		}
	}
}

func ownNamespaces(t *testing.T) []string {
	t.Helper()
	names, err := ourNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	var own []string
	for _, n := range names {
		if strings.HasPrefix(n, netnsPrefix+ownerTag+"-") {
			own = append(own, n)
		}
	}
	return own
}
