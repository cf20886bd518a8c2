// Command agentfoot measures what the node agent itself costs a node: the
// watchprobe-agent binary, built by hack/build.sh as a release builds it,
// run as a pod on a real node (internal/localcluster's Node: containerd,
// runc, kubelet, kube-proxy; in-cluster configuration through the
// kubernetes Service) at its default settings, scraped as Prometheus would,
// over a window. It reports, per build, the binary's size and modules, its
// package inits (GODEBUG=inittrace=1), and from /proc the process's peak
// RSS (VmHWM), its anonymous and file-backed RSS at the end (and how much
// of that is the binary's code and read-only data) and its CPU (utime +
// stime) over the window, beside its container's cgroup accounting and the
// writes it made, against the aim of 15 MiB and 1 millicore per node.
//
// Beside the release build it runs, unless -variant=false, the agent built
// without client-go's fake clients, to say what they cost: client-go's
// generic typed clients (gentype) link them (k8s.io/client-go/testing), and
// with them managed fields, strategic merge patch, kube-openapi and
// gnostic's OpenAPI models. The build replaces k8s.io/client-go by a copy
// whose gentype/fake.go is empty (GOFLAGS=-modfile, the repository
// untouched). Its pod runs with --node set to a name of its own (the Lease
// is named after it) and --no-read-node; everything else is the
// default.
//
// It needs root and the node's packages (`make node-packages`); -process
// runs the binaries as processes on loopback against a bare control plane
// instead, without a kubelet or a container. `make bench-agent-footprint`
// runs it; it prints Markdown and writes it to -o.
//
//	go run ./hack/bench/agentfoot -bin-dir bin -window 5m -o out/agentfoot.md
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/procstat"
)

// The agents' namespace and service account, as the chart names them.
const (
	namespace      = "watchprobe-agents"
	serviceAccount = "watchprobe-agent"
	metricsPort    = 9918
)

// aims are the agent's budget per node (issue 52).
const (
	aimRSS       = 15 << 20
	aimMillicore = 1.0
)

func main() {
	var o options
	flag.StringVar(&o.binDir, "bin-dir", "bin", "where kube-apiserver, etcd, kubelet, ... and pause are")
	flag.DurationVar(&o.window, "window", 5*time.Minute, "how long each agent is measured, after -settle")
	flag.DurationVar(&o.settle, "settle", 30*time.Second, "how long each agent runs before the window opens")
	flag.DurationVar(&o.scrapeEvery, "scrape-every", 30*time.Second, "scrape each agent's /metrics this often, as Prometheus would")
	flag.BoolVar(&o.variant, "variant", true, "also run the agent built without client-go's fake clients, beside the release build")
	flag.BoolVar(&o.process, "process", false, "run the agents as processes on loopback against a bare control plane, not as pods on a node")
	flag.StringVar(&o.out, "o", "", "also write the Markdown to this file")
	flag.Parse()
	if o.window <= 0 || o.scrapeEvery <= 0 || o.settle < 0 {
		fmt.Fprintln(os.Stderr, "agentfoot: -window and -scrape-every must be positive, -settle not negative")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "agentfoot:", err)
		os.Exit(1)
	}
}

type options struct {
	binDir           string
	window, settle   time.Duration
	scrapeEvery      time.Duration
	variant, process bool
	out              string
}

// build is one way of building the agent, and what it measured.
type build struct {
	name    string
	modfile string // a go.mod of its own, for go build -modfile
	// extraArgs are the agent's flags beyond the defaults.
	extraArgs []string

	bin     string
	size    int64
	modules int
	grpc    bool // gRPC linked in (the etcd client's)
	inits   initTrace

	first, last procSample
	cg0, cg1    cgroupSample
	writes      [2]float64 // watchprobe_agent_writes_total at the window's start and end
	anomalies   string     // the agent's other counters at the end
	interval    string
}

func run(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	work, err := os.MkdirTemp("", "agentfoot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	repo, err := os.Getwd()
	if err != nil {
		return err
	}
	builds := []*build{{name: "release build"}}
	if o.variant {
		modfile, err := withoutFakes(ctx, repo, work)
		if err != nil {
			return err
		}
		builds = append(builds, &build{
			name:      "without client-go's fakes",
			modfile:   modfile,
			extraArgs: []string{"--node=" + localcluster.NodeName + "-variant", "--no-read-node"},
		})
	}
	for i, b := range builds {
		fmt.Fprintf(os.Stderr, ">> building the agent: %s\n", b.name)
		if err := b.compile(ctx, repo, filepath.Join(work, strconv.Itoa(i))); err != nil {
			return err
		}
	}
	startLoad := loadAverage()
	var runErr error
	if o.process {
		runErr = runProcesses(ctx, o, builds)
	} else {
		runErr = runPods(ctx, o, builds)
	}
	if runErr != nil {
		return runErr
	}
	var md strings.Builder
	report(&md, o, builds, startLoad)
	fmt.Print(md.String())
	if o.out != "" {
		if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(o.out, []byte(md.String()), 0o644)
	}
	return nil
}

// withoutFakes makes a go.mod that replaces k8s.io/client-go by a copy
// whose gentype/fake.go is empty: client-go's typed clients (gentype) link
// its fake clients' package (client-go/testing), and with it managed
// fields, strategic merge patch, kube-openapi and gnostic's OpenAPI models,
// which no real client runs.
func withoutFakes(ctx context.Context, repo, work string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/client-go").Output()
	if err != nil {
		return "", fmt.Errorf("finding k8s.io/client-go: %w", err)
	}
	cg := filepath.Join(work, "client-go")
	if out, err := exec.CommandContext(ctx, "cp", "-r", strings.TrimSpace(string(out)), cg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copying k8s.io/client-go: %w: %s", err, out)
	}
	if out, err := exec.CommandContext(ctx, "chmod", "-R", "u+w", cg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(cg, "gentype", "fake.go"), []byte("package gentype\n"), 0o644); err != nil {
		return "", err
	}
	mod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		return "", err
	}
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		return "", err
	}
	modfile := filepath.Join(work, "go.mod")
	mod = append(mod, []byte("\nreplace k8s.io/client-go => "+cg+"\n")...)
	if err := os.WriteFile(modfile, mod, 0o644); err != nil {
		return "", err
	}
	return modfile, os.WriteFile(filepath.Join(work, "go.sum"), sum, 0o644)
}

// compile builds the agent into dir/watchprobe-agent with hack/build.sh,
// and reads its size, modules and inits.
func (b *build) compile(ctx context.Context, repo, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b.bin = filepath.Join(dir, "watchprobe-agent")
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack/build.sh"), b.bin, "bench", "bench", "./cmd/agent")
	cmd.Env = os.Environ()
	if b.modfile != "" {
		cmd.Env = append(cmd.Env, "GOFLAGS=-modfile="+b.modfile)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the agent (%s): %w\n%s", b.name, err, out)
	}
	st, err := os.Stat(b.bin)
	if err != nil {
		return err
	}
	b.size = st.Size()
	out, err := exec.CommandContext(ctx, "go", "version", "-m", b.bin).Output()
	if err != nil {
		return fmt.Errorf("go version -m %s: %w", b.bin, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "dep" {
			b.modules++
			if strings.HasPrefix(f[1], "google.golang.org/grpc") {
				b.grpc = true
			}
		}
	}
	b.inits, err = traceInits(ctx, b.bin)
	return err
}

// initTrace is what GODEBUG=inittrace=1 printed for a start of the binary.
type initTrace struct {
	count        int
	clockMS      float64
	bytes, alloc int64
	top          []initLine // the largest by bytes
}

type initLine struct {
	pkg     string
	clockMS float64
	bytes   int64
}

var initRE = regexp.MustCompile(`^init (\S+) @\S+ ms, ([0-9.]+) ms clock, ([0-9]+) bytes, ([0-9]+) allocs`)

// traceInits starts the binary with --version, which returns right after
// the package inits, under GODEBUG=inittrace=1.
func traceInits(ctx context.Context, bin string) (initTrace, error) {
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return initTrace{}, fmt.Errorf("%s --version: %w\n%s", bin, err, out)
	}
	t := parseInitTrace(string(out))
	if t.count == 0 {
		return t, fmt.Errorf("%s printed no inittrace lines:\n%s", bin, out)
	}
	return t, nil
}

// parseInitTrace sums the inittrace lines of out and keeps the ten
// largest by bytes allocated.
func parseInitTrace(out string) initTrace {
	var t initTrace
	for _, line := range strings.Split(out, "\n") {
		m := initRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		clock, _ := strconv.ParseFloat(m[2], 64)
		bytes, _ := strconv.ParseInt(m[3], 10, 64)
		allocs, _ := strconv.ParseInt(m[4], 10, 64)
		t.count++
		t.clockMS += clock
		t.bytes += bytes
		t.alloc += allocs
		t.top = append(t.top, initLine{m[1], clock, bytes})
	}
	slices.SortStableFunc(t.top, func(a, b initLine) int { return int(b.bytes - a.bytes) })
	t.top = t.top[:min(len(t.top), 10)]
	return t
}

// target is a running agent: its process and its /metrics.
type target struct {
	pid    func() (int, error)
	url    string
	cgroup func() (cgroupSample, bool) // the container's accounting, if it has one
	logs   func() string
}

// measure waits for the agents' watches to be live, lets them settle, then
// samples them over the window, scraping each every scrapeEvery.
func measure(ctx context.Context, o options, builds []*build, targets []target) error {
	for i, t := range targets {
		if err := waitHealthy(ctx, t.url, 3*time.Minute); err != nil {
			return fmt.Errorf("%s: %w\n%s", builds[i].name, err, t.logs())
		}
	}
	fmt.Fprintf(os.Stderr, ">> agents live; settling %s, then measuring for %s\n", o.settle, o.window)
	time.Sleep(o.settle)
	pids := make([]int, len(targets))
	for i, t := range targets {
		pid, err := t.pid()
		if err != nil {
			return fmt.Errorf("%s: %w", builds[i].name, err)
		}
		pids[i] = pid
	}
	sample := func(end bool) error {
		for i, t := range targets {
			b := builds[i]
			fams, err := scrape(t.url)
			if err != nil {
				return fmt.Errorf("scraping the agent (%s): %w\n%s", b.name, err, t.logs())
			}
			s, err := readProc(pids[i])
			if err != nil {
				return fmt.Errorf("the agent (%s) is gone: %w\n%s", b.name, err, t.logs())
			}
			cg, _ := t.cgroup()
			if !end {
				b.first, b.cg0, b.writes[0] = s, cg, fams["watchprobe_agent_writes_total"]
				continue
			}
			b.last, b.cg1, b.writes[1] = s, cg, fams["watchprobe_agent_writes_total"]
			var other []string
			for _, name := range []string{"write_errors_total", "events_missed_total", "events_lost_total", "stalls_total", "stream_ends_total", "relists_total", "unmeasurable_total"} {
				other = append(other, fmt.Sprintf("%s %.0f", strings.TrimSuffix(name, "_total"), fams["watchprobe_agent_"+name]))
			}
			b.anomalies = strings.Join(other, ", ")
			if st, err := status(t.url); err == nil {
				b.interval = st
			}
		}
		return nil
	}
	if err := sample(false); err != nil {
		return err
	}
	start := time.Now()
	for time.Since(start)+o.scrapeEvery < o.window {
		time.Sleep(o.scrapeEvery)
		for i, t := range targets {
			if _, err := scrape(t.url); err != nil {
				return fmt.Errorf("scraping the agent (%s): %w\n%s", builds[i].name, err, t.logs())
			}
		}
	}
	time.Sleep(o.window - time.Since(start))
	return sample(true)
}

func waitHealthy(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("the agent's /-/ready was not 200 within %s: %s", limit, last)
}

// scrape reads the agent's /metrics in the text format: each family's
// samples summed (one series per family but the histogram's).
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		} else {
			name, rest, _ = strings.Cut(line, " ")
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// status is the agent's interval, from its / page.
func status(url string) (string, error) {
	resp, err := http.Get(url + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	first, _, _ := strings.Cut(string(body), "\n")
	if _, iv, ok := strings.Cut(first, "writing every "); ok {
		return iv, nil
	}
	return "", fmt.Errorf("no interval in %q", first)
}

// procSample is what /proc says of a process at one instant.
type procSample struct {
	procstat.Sample
	text, rodata int64 // of its file-backed RSS: the binary's code and read-only data
}

func readProc(pid int) (procSample, error) {
	s, err := procstat.Read(pid)
	if err != nil {
		return procSample{}, err
	}
	text, rodata := binaryPages(pid)
	return procSample{s, text, rodata}, nil
}

// binaryPages is how much of the process's RSS is its binary's code and
// its read-only data (type data, the function table), from
// /proc/PID/smaps.
func binaryPages(pid int) (text, rodata int64) {
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil || exe == "" {
		return 0, 0
	}
	var into *int64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			into = nil
			if len(f) >= 6 && f[5] == exe {
				switch f[1] {
				case "r-xp":
					into = &text
				case "r--p":
					into = &rodata
				}
			}
		case len(f) == 3 && f[0] == "Rss:" && into != nil:
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			*into += kb << 10
		}
	}
	return text, rodata
}

// cgroupSample is a container's cgroup v1 accounting: anonymous memory,
// usage (with the page cache charged to it: what a memory limit applies
// to) and its peak, CPU.
type cgroupSample struct {
	anon, usage, peak int64
	cpu               time.Duration
}

// runPods runs each build's agent as a pod on a node.
func runPods(ctx context.Context, o options, builds []*build) error {
	fmt.Fprintln(os.Stderr, ">> starting a node (containerd, kubelet, kube-proxy) and its control plane")
	node, err := localcluster.StartNode(ctx, localcluster.Options{BinDir: o.binDir})
	if err != nil {
		return err
	}
	defer node.Stop()
	client := kubernetes.NewForConfigOrDie(node.AdminConfig())
	if err := rbac(ctx, client); err != nil {
		return err
	}
	var targets []target
	for i, b := range builds {
		img, err := localcluster.BinaryImage(b.bin)
		if err != nil {
			return err
		}
		ref := fmt.Sprintf("localhost/watchprobe/agent-bench:%d", i)
		if err := node.ImportImage(ctx, ref, img); err != nil {
			return err
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("agent-%d", i), Namespace: namespace},
			Spec: corev1.PodSpec{
				ServiceAccountName: serviceAccount,
				NodeName:           localcluster.NodeName,
				RestartPolicy:      corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name:            "agent",
					Image:           ref,
					ImagePullPolicy: corev1.PullNever,
					Args:            b.extraArgs,
					Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
						FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"},
					}}},
					Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: metricsPort}},
				}},
			},
		}
		if _, err := client.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	logs := func() string { return podLogs(node.Dir()) }
	for i := range builds {
		pod, err := waitRunning(ctx, client, fmt.Sprintf("agent-%d", i), 3*time.Minute)
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", builds[i].name, err, logs())
		}
		_, id, _ := strings.Cut(pod.Status.ContainerStatuses[0].ContainerID, "://")
		mem, cpu := findCgroup("memory", id), findCgroup("cpuacct", id)
		targets = append(targets, target{
			url:  fmt.Sprintf("http://%s:%d", pod.Status.PodIP, metricsPort),
			logs: logs,
			pid: func() (int, error) {
				if mem == "" {
					return 0, fmt.Errorf("no memory cgroup for container %s (cgroup v1 expected)", id)
				}
				data, err := os.ReadFile(filepath.Join(mem, "cgroup.procs"))
				if err != nil {
					return 0, err
				}
				pids := strings.Fields(string(data))
				if len(pids) != 1 {
					return 0, fmt.Errorf("processes %v in the agent's container, want its one", pids)
				}
				return strconv.Atoi(pids[0])
			},
			cgroup: func() (cgroupSample, bool) { return readCgroup(mem, cpu) },
		})
	}
	return measure(ctx, o, builds, targets)
}

// rbac makes the agents' namespace, service account and the permissions
// AGENT_SPEC.md gives them.
func rbac(ctx context.Context, client kubernetes.Interface) error {
	if err := localcluster.CreateNamespaces(ctx, client, namespace); err != nil {
		return err
	}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}}
	meta := metav1.ObjectMeta{Name: serviceAccount, Namespace: namespace}
	if _, err := client.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "patch"},
	}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := client.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cluster := metav1.ObjectMeta{Name: "watchprobe-agent-bench"}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: cluster, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"},
	}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: cluster, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cluster.Name}}, metav1.CreateOptions{})
	return err
}

func waitRunning(ctx context.Context, client kubernetes.Interface, name string, limit time.Duration) (*corev1.Pod, error) {
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		pod, err := client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%s %+v", pod.Status.Phase, pod.Status.ContainerStatuses)
			if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" && len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].ContainerID != "" {
				return pod, nil
			}
			if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
				break
			}
		}
		time.Sleep(time.Second)
	}
	return nil, fmt.Errorf("pod %s not running within %s: %s", name, limit, last)
}

// findCgroup is the container's directory in a cgroup v1 hierarchy, "" if
// none.
func findCgroup(hierarchy, id string) string {
	var found string
	_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup", hierarchy), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.Contains(d.Name(), id) {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	return found
}

func readCgroup(mem, cpu string) (cgroupSample, bool) {
	var s cgroupSample
	if mem == "" || cpu == "" {
		return s, false
	}
	num := func(path string) (int64, bool) {
		data, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		return n, err == nil
	}
	stat, err := os.ReadFile(filepath.Join(mem, "memory.stat"))
	if err != nil {
		return s, false
	}
	for _, line := range strings.Split(string(stat), "\n") {
		if v, ok := strings.CutPrefix(line, "total_rss "); ok {
			s.anon, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	var ok1, ok2, ok3 bool
	s.usage, ok1 = num(filepath.Join(mem, "memory.usage_in_bytes"))
	s.peak, ok2 = num(filepath.Join(mem, "memory.max_usage_in_bytes"))
	ns, ok3 := num(filepath.Join(cpu, "cpuacct.usage"))
	s.cpu = time.Duration(ns)
	return s, ok1 && ok2 && ok3
}

// podLogs is the tail of the agents' container logs on the node.
func podLogs(dir string) string {
	var b strings.Builder
	_ = filepath.WalkDir(filepath.Join(dir, "pod-logs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, namespace+"_") {
			data, _ := os.ReadFile(p)
			if len(data) > 3000 {
				data = data[len(data)-3000:]
			}
			fmt.Fprintf(&b, "--- %s:\n%s\n", p, data)
		}
		return nil
	})
	return b.String()
}

// runProcesses runs each build's agent as a process on loopback, with the
// admin's kubeconfig, against a bare control plane.
func runProcesses(ctx context.Context, o options, builds []*build) error {
	fmt.Fprintln(os.Stderr, ">> starting etcd and kube-apiserver on loopback")
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: o.binDir})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := localcluster.CreateNamespaces(ctx, kubernetes.NewForConfigOrDie(c.AdminConfig()), namespace); err != nil {
		return err
	}
	kubeconfig := filepath.Join(c.Dir(), "agent.kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	var targets []target
	for i, b := range builds {
		port := 19918 + i
		logPath := filepath.Join(c.Dir(), fmt.Sprintf("agent-%d.log", i))
		logFile, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer logFile.Close()
		// No Node object here to read a zone from.
		args := append([]string{"--kubeconfig=" + kubeconfig, fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port)}, b.extraArgs...)
		if !slices.Contains(args, "--no-read-node") {
			args = append(args, "--no-read-node")
		}
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--node=") }) {
			args = append(args, "--node="+localcluster.NodeName)
		}
		cmd := exec.CommandContext(ctx, b.bin, args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		targets = append(targets, target{
			url:    fmt.Sprintf("http://127.0.0.1:%d", port),
			pid:    func() (int, error) { return cmd.Process.Pid, nil },
			cgroup: func() (cgroupSample, bool) { return cgroupSample{}, false },
			logs: func() string {
				data, _ := os.ReadFile(logPath)
				return string(data)
			},
		})
	}
	return measure(ctx, o, builds, targets)
}

func report(w io.Writer, o options, builds []*build, startLoad string) {
	where := "as pods on a node (containerd, runc, kubelet; cgroup v1), in-cluster configuration through the kubernetes Service"
	if o.process {
		where = "as processes on loopback with a kubeconfig, no kubelet or container"
	}
	fmt.Fprintf(w, "machine: %d CPUs, %s/%s, %s; load average (1 min) %s at the start, %s at the end\n\n", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), startLoad, loadAverage())
	fmt.Fprintf(w, "watchprobe-agent at its default settings, run %s, for %s after %s of settling, scraped every %s; CPU is utime + stime from /proc over the window; the aim is %d MiB and %.0f millicore per node.\n",
		where, o.window, o.settle, o.scrapeEvery, aimRSS>>20, aimMillicore)
	fmt.Fprintln(w, "\n| build | binary | modules | gRPC | package inits: allocated, clock | interval | writes in the window (all) | peak RSS (VmHWM) | RSS at the end: anonymous + file-backed (of it the binary's code, read-only data) | CPU (millicores) | cgroup at the end: anonymous, usage (peak) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, b := range builds {
		el := o.window.Seconds()
		cg := "n/a"
		if b.cg1.usage > 0 {
			cg = fmt.Sprintf("%s, %s (%s); %.2f millicores", mib(b.cg1.anon), mib(b.cg1.usage), mib(b.cg1.peak), 1000*(b.cg1.cpu-b.cg0.cpu).Seconds()/el)
		}
		fmt.Fprintf(w, "| %s | %.1f MB | %d | %s | %.1f MiB in %d inits, %.1f ms | %s | %.0f (%.0f) | %s | %s + %s (%s, %s) | %.2f | %s |\n",
			b.name, float64(b.size)/1e6, b.modules, yesNo(b.grpc), float64(b.inits.bytes)/(1<<20), b.inits.count, b.inits.clockMS, b.interval,
			b.writes[1]-b.writes[0], b.writes[1], mib(b.last.Peak), mib(b.last.Anon), mib(b.last.File), mib(b.last.text), mib(b.last.rodata), 1000*(b.last.CPU-b.first.CPU)/el, cg)
	}
	for _, b := range builds {
		fmt.Fprintf(w, "\n%s: the agent's counters at the end: %s\n", b.name, b.anomalies)
	}
	for _, v := range builds[1:] {
		a := builds[0]
		fmt.Fprintf(w, "\n%s, against the release build: binary %+.1f MB, peak RSS %+.1f MiB, anonymous %+.1f MiB, file-backed %+.1f MiB, inits' allocations %+.2f MiB\n",
			v.name, float64(v.size-a.size)/1e6, float64(v.last.Peak-a.last.Peak)/(1<<20), float64(v.last.Anon-a.last.Anon)/(1<<20), float64(v.last.File-a.last.File)/(1<<20), float64(v.inits.bytes-a.inits.bytes)/(1<<20))
	}
	fmt.Fprintf(w, "\n| the release build's largest package inits (GODEBUG=inittrace=1) | allocated | clock |\n|---|---|---|\n")
	for _, l := range builds[0].inits.top {
		fmt.Fprintf(w, "| %s | %.1f KiB | %.2f ms |\n", l.pkg, float64(l.bytes)/1024, l.clockMS)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
