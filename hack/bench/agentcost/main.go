// Command agentcost measures what per-node agents would cost kube-apiserver
// and etcd: one process simulates N agents on the local control plane, each
// with a Lease of its own in one namespace, watched by a watch narrowed to
// it and updated at an interval, the watches spread over several HTTP/2
// connections as agents on separate nodes would hold them. It reads the
// apiserver's and etcd's CPU and memory from /proc in five windows:
//
//	idle          N Leases, no watch, no write
//	watchers      N watches by field selector metadata.name, no write
//	name          the same watches, each Lease updated every interval
//	writes        the same writes, no watch
//	label         N watches by label selector instead, the same writes
//
// and prints, per N, the cost per watcher (watchers - idle), per event
// (name, writes and label against idle) and how many events each kind of
// watch delivered. It prints Markdown, and writes it to -o: `make bench`
// runs it at 100 and 500 agents into out/agentcost.md (`make bench-docs`
// puts it into docs/performance.md), `make bench-agents` at the numbers
// AGENTS gives.
//
//	go run ./hack/bench/agentcost -bin-dir bin -agents 100,500 -o out/agentcost.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/procstat"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "where kube-apiserver and etcd are")
	agents := flag.String("agents", "100,500", "numbers of simulated agents, comma-separated")
	interval := flag.Duration("interval", 10*time.Second, "each agent's write interval")
	connections := flag.Int("connections", 10, "HTTP/2 connections the watches and writes are spread over")
	window := flag.Duration("window", 40*time.Second, "each measurement window's length")
	out := flag.String("o", "", "also write the Markdown to this file")
	flag.Parse()
	var ns []int
	for _, s := range strings.Split(*agents, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "-agents: %q is not a positive number of agents; give e.g. -agents 100,500\n", s)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	if *connections < 1 || *interval <= 0 || *window <= 0 {
		fmt.Fprintln(os.Stderr, "-connections, -interval and -window must be positive")
		os.Exit(2)
	}
	if err := run(*binDir, ns, *interval, *connections, *window, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const namespace = "agents"

// readProc reads a process's CPU time and memory from /proc.
func readProc(pid int) (procstat.Sample, error) { return procstat.Read(pid) }

// usage is a window's figures for one process: CPU in cores, the mean of
// its anonymous RSS sampled every second.
type usage struct {
	cores float64
	anon  float64
}

// measure samples the apiserver and etcd over d.
func measure(apiserver, etcd int, d time.Duration) (api, et usage, err error) {
	pids := []int{apiserver, etcd}
	var first, last [2]procstat.Sample
	var anonSum [2]float64
	n := 0
	start := time.Now()
	for {
		for i, pid := range pids {
			s, err := readProc(pid)
			if err != nil {
				return api, et, err
			}
			if n == 0 {
				first[i] = s
			}
			last[i] = s
			anonSum[i] += float64(s.Anon)
		}
		n++
		if time.Since(start) >= d {
			break
		}
		time.Sleep(time.Second)
	}
	el := time.Since(start).Seconds()
	api = usage{cores: (last[0].CPU - first[0].CPU) / el, anon: anonSum[0] / float64(n)}
	et = usage{cores: (last[1].CPU - first[1].CPU) / el, anon: anonSum[1] / float64(n)}
	return api, et, nil
}

// clients are one clientset per connection: a Dial of its own keeps
// client-go from sharing one transport, and so one HTTP/2 connection,
// between them.
func clients(base *rest.Config, n int) []*kubernetes.Clientset {
	var cs []*kubernetes.Clientset
	for range n {
		c := rest.CopyConfig(base)
		c.QPS, c.Burst = -1, 0 // no client-side throttling: the agents are separate processes
		d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
		c.Dial = d.DialContext
		cs = append(cs, kubernetes.NewForConfigOrDie(c))
	}
	return cs
}

func leaseName(i int) string { return fmt.Sprintf("agent-%05d", i) }

// agents holds the Leases, the write loop and the watches.
type agents struct {
	n       int
	cs      []*kubernetes.Clientset
	leases  []*coordinationv1.Lease
	written atomic.Int64
	seen    atomic.Int64 // MODIFIED events of an agent's own Lease, all watches
	foreign atomic.Int64 // events of another agent's Lease: a selector that let one through
}

func (a *agents) client(i int) *kubernetes.Clientset { return a.cs[i%len(a.cs)] }

func (a *agents) create(ctx context.Context) error {
	a.leases = make([]*coordinationv1.Lease, a.n)
	errs := make([]error, len(a.cs))
	var wg sync.WaitGroup
	for c := range a.cs {
		wg.Go(func() {
			for i := c; i < a.n; i += len(a.cs) {
				holder := leaseName(i)
				l, err := a.client(i).CoordinationV1().Leases(namespace).Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Name: leaseName(i), Labels: map[string]string{"agent": leaseName(i)}},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
				}, metav1.CreateOptions{})
				if err != nil {
					errs[c] = err
					return
				}
				a.leases[i] = l
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// write updates every agent's Lease once per interval, each at its own
// offset in the interval, until ctx ends.
func (a *agents) write(ctx context.Context, interval time.Duration) error {
	errs := make([]error, len(a.cs))
	var wg sync.WaitGroup
	for c := range a.cs {
		wg.Go(func() {
			var mine []int
			for i := c; i < a.n; i += len(a.cs) {
				mine = append(mine, i)
			}
			if len(mine) == 0 {
				return
			}
			step := interval / time.Duration(len(mine))
			// Connections start staggered, so the writes of the whole
			// set are spread over the interval.
			next := time.Now().Add(step * time.Duration(c) / time.Duration(len(a.cs)))
			for k := 0; ; k++ {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				i := mine[k%len(mine)]
				l := a.leases[i].DeepCopy()
				now := metav1.NowMicro()
				l.Spec.RenewTime = &now
				// Not cut short by the phase's end: a write the server made
				// but the client gave up on would leave a stale version for
				// the next phase's update to conflict with.
				wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				updated, err := a.client(i).CoordinationV1().Leases(namespace).Update(wctx, l, metav1.UpdateOptions{})
				cancel()
				if err != nil {
					errs[c] = fmt.Errorf("updating %s: %w", l.Name, err)
					return
				}
				a.leases[i] = updated
				a.written.Add(1)
				next = next.Add(step)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// watch opens one watch per agent, by name or by label, from the Leases'
// current versions, and counts what they deliver until ctx ends. It
// returns once every watch is open.
func (a *agents) watch(ctx context.Context, byLabel bool) (*sync.WaitGroup, error) {
	var wg sync.WaitGroup
	ws := make([]watch.Interface, a.n)
	errs := make([]error, len(a.cs))
	var open sync.WaitGroup
	for c := range a.cs {
		open.Go(func() {
			for i := c; i < a.n; i += len(a.cs) {
				opts := metav1.ListOptions{ResourceVersion: a.leases[i].ResourceVersion, AllowWatchBookmarks: true}
				if byLabel {
					opts.LabelSelector = "agent=" + leaseName(i)
				} else {
					opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", leaseName(i)).String()
				}
				w, err := a.client(i).CoordinationV1().Leases(namespace).Watch(ctx, opts)
				if err != nil {
					errs[c] = err
					return
				}
				ws[i] = w
			}
		})
	}
	open.Wait()
	for i, w := range ws {
		if w == nil {
			continue
		}
		wg.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if ev.Type != watch.Modified {
						continue
					}
					if l, ok := ev.Object.(*coordinationv1.Lease); ok && l.Name == leaseName(i) {
						a.seen.Add(1)
					} else {
						a.foreign.Add(1)
					}
				}
			}
		})
	}
	return &wg, errors.Join(errs...)
}

func run(binDir string, ns []int, interval time.Duration, connections int, window time.Duration, out string) error {
	ctx := context.Background()
	var md strings.Builder
	fmt.Fprintf(&md, "machine: %d CPUs, %s/%s, %s, load average (1 min) %s at the start; each agent writes every %s; %d connections; %s windows\n\n",
		runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), loadAverage(), interval, connections, window)
	var table, summary strings.Builder
	table.WriteString("| agents | writes/s | window | apiserver CPU (millicores) | over idle | apiserver anon RSS (MiB) | apiserver live heap (MiB) | apiserver goroutines | etcd CPU (millicores) | over idle | etcd anon RSS (MiB) | events delivered / written |\n")
	table.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range ns {
		if err := runOne(ctx, binDir, n, interval, connections, window, &table, &summary); err != nil {
			return fmt.Errorf("%d agents: %w", n, err)
		}
		// Progress, for a run that ends early.
		fmt.Fprintf(os.Stderr, "%d agents done\n%s%s", n, table.String(), summary.String())
	}
	md.WriteString(table.String())
	md.WriteString(summary.String())
	fmt.Fprintf(&md, "\nload average (1 min) %s at the end\n", loadAverage())
	fmt.Print(md.String())
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(md.String()), 0o644)
}

// apiserverHeap is kube-apiserver's live heap, read from its heap profile
// after the garbage collection that gc=1 asks for (RSS alone moves by more
// than a few hundred watchers take, with the garbage the GC has not yet
// returned), and its number of goroutines.
func apiserverHeap(ctx context.Context, admin *kubernetes.Clientset) (float64, int, error) {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/heap").Param("gc", "1").Param("debug", "1").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("the apiserver's heap profile: %w", err)
	}
	heap := -1.0
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			heap, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if heap < 0 {
		return 0, 0, errors.New("the apiserver's heap profile has no HeapAlloc line")
	}
	raw, err = admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/goroutine").Param("debug", "1").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("the apiserver's goroutine profile: %w", err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	v, ok := strings.CutPrefix(first, "goroutine profile: total ")
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("the apiserver's goroutine profile begins %q", first)
	}
	return heap, n, nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

func runOne(ctx context.Context, binDir string, n int, interval time.Duration, connections int, window time.Duration, table, summary *strings.Builder) error {
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer c.Stop()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if err := localcluster.CreateNamespaces(ctx, admin, namespace); err != nil {
		return err
	}
	a := &agents{n: n, cs: clients(c.AdminConfig(), connections)}
	if err := a.create(ctx); err != nil {
		return err
	}
	apiPID, etcdPID := c.APIServerPID(), c.EtcdPID()
	rate := float64(n) / interval.Seconds()
	type row struct {
		name       string
		api, etc   usage
		heap       float64 // the apiserver's live heap after a GC, bytes
		goroutines int
		events     string
	}
	var rows []row
	window1 := func(name string, events func() string) error {
		api, et, err := measure(apiPID, etcdPID, window)
		if err != nil {
			return err
		}
		e := ""
		if events != nil {
			e = events()
		}
		heap, goroutines, err := apiserverHeap(ctx, admin)
		if err != nil {
			return err
		}
		rows = append(rows, row{name, api, et, heap, goroutines, e})
		return nil
	}
	// phase runs the writes (if any) and watches (if any) for one window,
	// after a settling time of one interval.
	phase := func(name string, writes, watches, byLabel bool) error {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var watchers *sync.WaitGroup
		if watches {
			w, err := a.watch(pctx, byLabel)
			if err != nil {
				return fmt.Errorf("%s: opening the watches: %w", name, err)
			}
			watchers = w
		}
		writeErr := make(chan error, 1)
		if writes {
			go func() { writeErr <- a.write(pctx, interval) }()
		} else {
			writeErr <- nil
		}
		time.Sleep(interval)
		w0, s0, f0 := a.written.Load(), a.seen.Load(), a.foreign.Load()
		err := window1(name, func() string {
			if !watches || !writes {
				return ""
			}
			// Events still in flight at the window's end count in the
			// next one; the ratio is over the window.
			return fmt.Sprintf("%d / %d (foreign %d)", a.seen.Load()-s0, a.written.Load()-w0, a.foreign.Load()-f0)
		})
		cancel()
		if watchers != nil {
			watchers.Wait()
		}
		return errors.Join(err, <-writeErr)
	}
	if err := window1("idle", nil); err != nil {
		return err
	}
	for _, p := range []struct {
		name                     string
		writes, watches, byLabel bool
	}{
		{"watchers by name, no writes", false, true, false},
		{"watchers by name, writes", true, true, false},
		{"writes, no watchers", true, false, false},
		{"watchers by label, writes", true, true, true},
	} {
		if err := phase(p.name, p.writes, p.watches, p.byLabel); err != nil {
			return err
		}
	}
	idle := rows[0]
	for _, r := range rows {
		wr := "0"
		if strings.Contains(r.name, "writes") && !strings.Contains(r.name, "no writes") {
			wr = fmt.Sprintf("%.0f", rate)
		}
		fmt.Fprintf(table, "| %d | %s | %s | %.0f | %+.0f | %.1f | %.1f | %d | %.0f | %+.0f | %.1f | %s |\n", n, wr, r.name,
			1000*r.api.cores, 1000*(r.api.cores-idle.api.cores), r.api.anon/(1<<20), r.heap/(1<<20), r.goroutines,
			1000*r.etc.cores, 1000*(r.etc.cores-idle.etc.cores), r.etc.anon/(1<<20), r.events)
	}
	// Per watcher and per event, from the windows' differences.
	get := func(prefix string) row {
		for _, r := range rows {
			if strings.HasPrefix(r.name, prefix) {
				return r
			}
		}
		return row{}
	}
	watchers, name, writes, label := get("watchers by name, no"), get("watchers by name, writes"), get("writes, no"), get("watchers by label")
	fmt.Fprintf(summary, "\n%d agents: per watcher, idle: apiserver %+.1f KiB live heap, %+.2f goroutines, %+.1f KiB anon RSS, %+.3f millicores; per write with its watcher by name: apiserver %.2f ms CPU (%.2f ms without watchers), etcd %.2f ms; by label: apiserver %.2f ms\n",
		n, (watchers.heap-idle.heap)/float64(n)/1024, float64(watchers.goroutines-idle.goroutines)/float64(n), (watchers.api.anon-idle.api.anon)/float64(n)/1024, 1000*(watchers.api.cores-idle.api.cores)/float64(n),
		1000*(name.api.cores-watchers.api.cores)/rate, 1000*(writes.api.cores-idle.api.cores)/rate,
		1000*(name.etc.cores-watchers.etc.cores)/rate, 1000*(label.api.cores-watchers.api.cores)/rate)
	return nil
}
