// Command bench measures watchprobe on the local control plane, as `make
// bench` runs it: its latency figures against bare reference clients on the
// same marker writes (a bare etcd watch, the physical floor, and a bare
// apiserver watch), its CPU, memory and apiserver load as probes and rates
// grow, and the cost of a scrape with 100 probes. It prints a table and
// writes the figures as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "directory holding watchprobe, kube-apiserver and etcd")
	out := flag.String("o", "out/bench.json", "where to write the figures as JSON")
	overheadFor := flag.Duration("overhead-for", 40*time.Second, "how long the overhead run writes markers")
	window := flag.Duration("window", 20*time.Second, "measurement window of each cost run")
	soakFor := flag.Duration("soak", 0, "instead of the benchmark, run 10 probes at 33 writes/s in all for this long and sample memory every 30 s")
	flag.Parse()
	var err error
	if *soakFor > 0 {
		err = soak(*binDir, *out, *soakFor)
	} else {
		err = run(*binDir, *out, *overheadFor, *window)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type results struct {
	Machine  string     `json:"machine"`
	Overhead []latency  `json:"overhead"`
	Cost     []cost     `json:"cost"`
	Scrape   scrapeCost `json:"scrape"`
}

type latency struct {
	Client     string  `json:"client"`
	Writes     int     `json:"writes"`
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	P50VsBare  float64 `json:"p50_vs_bare_apiserver_watch"`
	P50VsEtcd  float64 `json:"p50_vs_etcd_floor"`
}

type cost struct {
	Probes            int     `json:"probes"`
	WritesPerSecond   float64 `json:"writes_per_second"`
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUPer1000Writes  float64 `json:"cpu_seconds_per_1000_writes"`
	CPUPerWritePath   float64 `json:"cpu_seconds_per_write_per_path"`
	PeakRSSBytes      int64   `json:"peak_rss_bytes"`
	RSSStartBytes     int64   `json:"rss_start_bytes"`
	RSSEndBytes       int64   `json:"rss_end_bytes"`
	RequestsPerSecond float64 `json:"apiserver_requests_per_second"`
}

type scrapeCost struct {
	Probes         int     `json:"probes"`
	MeanSeconds    float64 `json:"mean_seconds"`
	MaxSeconds     float64 `json:"max_seconds"`
	BodyBytes      int     `json:"body_bytes"`
	Series         int     `json:"series"`
	NativeProtobuf int     `json:"protobuf_body_bytes"`
}

func run(binDir, out string, overheadFor, window time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	fmt.Println(">> starting etcd and kube-apiserver on loopback")
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	res := results{Machine: fmt.Sprintf("%d CPUs, %s, %s", runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, runtime.Version())}

	fmt.Printf(">> overhead: writing markers for %s, timed by the exporter and by bare reference clients\n", overheadFor)
	if res.Overhead, err = overhead(ctx, cluster, overheadFor); err != nil {
		return err
	}
	fmt.Println(">> cost: the exporter binary at growing rates and probe counts")
	if res.Cost, res.Scrape, err = costs(ctx, cluster, filepath.Join(binDir, "watchprobe"), window); err != nil {
		return err
	}
	printTable(res)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(">> figures written to", out)
	return os.WriteFile(out, append(data, '\n'), 0o644)
}

type writeKey struct {
	name string
	seq  uint64
}

// recorder collects, for each marker write, when it was sent and when each
// client received it.
type recorder struct {
	mu      sync.Mutex
	sent    map[writeKey]time.Time
	deletes map[string]uint64 // marker -> seq of its delete
	arrived map[string]map[writeKey]time.Time
}

func newRecorder() *recorder {
	return &recorder{sent: map[writeKey]time.Time{}, deletes: map[string]uint64{}, arrived: map[string]map[writeKey]time.Time{}}
}

func (r *recorder) Sent(marker string, seq uint64, event string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent[writeKey{marker, seq}] = at
	if event == metrics.EventDeleted {
		r.deletes[marker] = seq
	}
}

func (r *recorder) Arrived(client, marker string, seq uint64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.arrived[client]
	if m == nil {
		m = map[writeKey]time.Time{}
		r.arrived[client] = m
	}
	if _, seen := m[writeKey{marker, seq}]; !seen {
		m[writeKey{marker, seq}] = at
	}
}

// arrivedObject records an object seen by a reference client: by its
// sequence number, or, deleted, by the sequence of its marker's delete.
func (r *recorder) arrivedObject(client string, deleted bool, obj metav1.Object, at time.Time) {
	if deleted {
		r.mu.Lock()
		seq, ok := r.deletes[obj.GetName()]
		r.mu.Unlock()
		if ok {
			r.Arrived(client, obj.GetName(), seq, at)
		}
		return
	}
	if seq, err := strconv.ParseUint(obj.GetAnnotations()[probe.AnnotationSeq], 10, 64); err == nil {
		r.Arrived(client, obj.GetName(), seq, at)
	}
}

const benchNamespace = "bench"

func overhead(ctx context.Context, cluster *localcluster.Cluster, d time.Duration) ([]latency, error) {
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	rec := newRecorder()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The floor: etcd's own watch on the markers' keys, decoded only after
	// the arrival instant is taken.
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{cluster.EtcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	etcdWatch := etcd.Watch(ctx, "/registry/configmaps/"+benchNamespace+"/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	go func() {
		decoder := scheme.Codecs.UniversalDeserializer()
		for resp := range etcdWatch {
			at := time.Now()
			for _, ev := range resp.Events {
				value := ev.Kv.Value
				if ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil {
					value = ev.PrevKv.Value
				}
				obj, _, err := decoder.Decode(value, nil, nil)
				if err != nil {
					continue
				}
				if m, err := meta.Accessor(obj); err == nil {
					rec.arrivedObject("etcd watch (floor)", ev.Type == clientv3.EventTypeDelete, m, at)
				}
			}
		}
	}()

	// A bare apiserver watch: no informer, no FIFO, no handler.
	apiWatch, err := client.CoreV1().ConfigMaps(benchNamespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	go func() {
		for ev := range apiWatch.ResultChan() {
			at := time.Now()
			if m, err := meta.Accessor(ev.Object); err == nil && ev.Type != watch.Bookmark && ev.Type != watch.Error {
				rec.arrivedObject("bare apiserver watch", ev.Type == watch.Deleted, m, at)
			}
		}
	}()

	cfg := probe.DefaultConfig()
	cfg.Name, cfg.Namespace = "bench", benchNamespace
	cfg.Interval = model.Duration(200 * time.Millisecond)
	cfg.Paths = probe.KnownPaths // the exporter's etcd path beside the bare etcd watch
	cfg.Etcd.Endpoints = []string{cluster.EtcdURL}
	p, err := probe.New(cfg, probe.Options{
		Config: cluster.AdminConfig(), Metrics: metrics.NewProbe(prometheus.NewRegistry()), Recorder: rec,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Replica: "bench", OrphanAge: time.Hour,
	})
	if err != nil {
		return nil, err
	}
	probeCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	p.Run(probeCtx)
	time.Sleep(time.Second) // the last arrivals

	rec.mu.Lock()
	defer rec.mu.Unlock()
	clients := []string{"etcd watch (floor)", "bare apiserver watch", "exporter: " + metrics.PathEtcd, "exporter: " + metrics.PathWatch, "exporter: " + metrics.PathInformer}
	for _, path := range probe.KnownPaths {
		rec.arrived["exporter: "+path] = rec.arrived[path]
	}
	// Only writes every client saw, so that all are judged on the same ones.
	var common []writeKey
	for k := range rec.sent {
		all := true
		for _, c := range clients {
			_, ok := rec.arrived[c][k]
			all = all && ok
		}
		if all {
			common = append(common, k)
		}
	}
	if len(common) < 100 {
		return nil, fmt.Errorf("only %d writes were seen by every client", len(common))
	}
	var out []latency
	for _, c := range clients {
		var ds []float64
		for _, k := range common {
			ds = append(ds, rec.arrived[c][k].Sub(rec.sent[k]).Seconds())
		}
		slices.Sort(ds)
		out = append(out, latency{Client: c, Writes: len(ds), P50Seconds: ds[len(ds)/2], P99Seconds: ds[len(ds)*99/100]})
	}
	for i := range out {
		out[i].P50VsBare = out[i].P50Seconds / out[1].P50Seconds
		out[i].P50VsEtcd = out[i].P50Seconds / out[0].P50Seconds
	}
	return out, nil
}

// costs runs the exporter binary through a counting proxy at each load.
func costs(ctx context.Context, cluster *localcluster.Cluster, bin string, window time.Duration) ([]cost, scrapeCost, error) {
	cert, key, err := cluster.IssueServing()
	if err != nil {
		return nil, scrapeCost{}, err
	}
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	loads := []struct {
		probes   int
		interval time.Duration // each probe writes updates+2 markers per interval
		updates  int
	}{
		{1, 3 * time.Second, 1}, {1, 300 * time.Millisecond, 1}, {1, 100 * time.Millisecond, 3},
		{10, 3 * time.Second, 1}, {100, 3 * time.Second, 1},
	}
	var out []cost
	var scrape scrapeCost
	for i, load := range loads {
		ns := fmt.Sprintf("cost-%d", i)
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, scrape, err
		}
		proxy, err := faultproxy.New(cluster.APIServerURL, cluster.CAPEM(), cert, key)
		if err != nil {
			return nil, scrape, err
		}
		c, sc, err := measure(ctx, bin, cluster.AdminConfig(), proxy, ns, load.probes, load.interval, load.updates, window)
		proxy.Close()
		if err != nil {
			return nil, scrape, err
		}
		fmt.Printf("   %3d probes, %5.1f writes/s: %.3f CPU s, %.1f MiB peak\n", c.Probes, c.WritesPerSecond, c.CPUSeconds, float64(c.PeakRSSBytes)/(1<<20))
		out = append(out, c)
		if load.probes == 100 {
			scrape = sc
		}
	}
	return out, scrape, nil
}

func measure(ctx context.Context, bin string, admin *rest.Config, proxy *faultproxy.Proxy, ns string, probes int, interval time.Duration, updates int, window time.Duration) (cost, scrapeCost, error) {
	dir, err := os.MkdirTemp("", "watchprobe-bench-")
	if err != nil {
		return cost{}, scrapeCost{}, err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := localcluster.WriteKubeconfig(proxy.Config(admin), kubeconfig); err != nil {
		return cost{}, scrapeCost{}, err
	}
	var cfg strings.Builder
	cfg.WriteString("probes:\n")
	for i := range probes {
		fmt.Fprintf(&cfg, "  - {name: p%d, namespace: %s, interval: %s, updates: %d}\n", i, ns, model.Duration(interval), updates)
	}
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(cfg.String()), 0o600); err != nil {
		return cost{}, scrapeCost{}, err
	}
	addr, err := freeAddr()
	if err != nil {
		return cost{}, scrapeCost{}, err
	}
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfig, "--config.file", config,
		"--probe.replica", "bench", "--web.listen-address", addr, "--log.level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return cost{}, scrapeCost{}, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Signal(os.Interrupt); <-exited }()
	url := "http://" + addr
	if err := waitReady(url+"/-/ready", 2*time.Minute, exited); err != nil {
		return cost{}, scrapeCost{}, err
	}
	time.Sleep(5 * time.Second) // past start-up
	cpu0, rss0, _ := procStats(cmd.Process.Pid)
	writes0, req0 := sumMetric(url, "watchprobe_writes_total"), proxy.Requests()
	time.Sleep(window)
	cpu1, rss1, peak := procStats(cmd.Process.Pid)
	writes := sumMetric(url, "watchprobe_writes_total") - writes0
	requests := proxy.Requests() - req0
	c := cost{
		Probes:            probes,
		WritesPerSecond:   writes / window.Seconds(),
		CPUSeconds:        cpu1 - cpu0,
		CPUPer1000Writes:  (cpu1 - cpu0) / writes * 1000,
		CPUPerWritePath:   (cpu1 - cpu0) / writes / 2,
		PeakRSSBytes:      peak,
		RSSStartBytes:     rss0,
		RSSEndBytes:       rss1,
		RequestsPerSecond: float64(requests) / window.Seconds(),
	}
	var sc scrapeCost
	sc.Probes = probes
	for range 10 {
		start := time.Now()
		body := get(url+"/metrics", "")
		d := time.Since(start).Seconds()
		sc.MeanSeconds += d / 10
		sc.MaxSeconds = max(sc.MaxSeconds, d)
		sc.BodyBytes = len(body)
		sc.Series = strings.Count(body, "\n") - strings.Count(body, "\n#")
	}
	sc.NativeProtobuf = len(get(url+"/metrics", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"))
	return c, sc, nil
}

func get(url, accept string) string {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// sumMetric adds up every sample of a metric in the text exposition.
func sumMetric(url, name string) float64 {
	var sum float64
	for _, line := range strings.Split(get(url+"/metrics", ""), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			fields := strings.Fields(line)
			v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
			sum += v
		}
	}
	return sum
}

// procStats reads CPU seconds (user + system), current and peak RSS.
func procStats(pid int) (cpu float64, rss, peak int64) {
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
		f := strings.Fields(string(stat)[i+2:])
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		cpu = (utime + stime) / 100 // USER_HZ is 100 on Linux
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				rss = kb * 1024
			case "VmHWM:":
				peak = kb * 1024
			}
		}
	}
	return cpu, rss, peak
}

func waitReady(url string, within time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("the exporter exited before it was ready")
		default:
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within %s", url, within)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func printTable(r results) {
	ms := func(s float64) string { return fmt.Sprintf("%.2f ms", s*1000) }
	fmt.Printf("\nmachine: %s\n\n", r.Machine)
	fmt.Println("| client (same writes) | writes | p50 | p99 | p50 / bare apiserver watch | p50 / etcd floor |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, l := range r.Overhead {
		fmt.Printf("| %s | %d | %s | %s | %.3f | %.2f |\n", l.Client, l.Writes, ms(l.P50Seconds), ms(l.P99Seconds), l.P50VsBare, l.P50VsEtcd)
	}
	fmt.Println("\n| probes | writes/s | CPU ms per 1000 writes | CPU ms per write per path | peak RSS | RSS start → end | apiserver requests/s |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, c := range r.Cost {
		fmt.Printf("| %d | %.1f | %.1f | %.3f | %.1f MiB | %.1f → %.1f MiB | %.2f |\n", c.Probes, c.WritesPerSecond, c.CPUPer1000Writes*1000,
			c.CPUPerWritePath*1000, float64(c.PeakRSSBytes)/(1<<20), float64(c.RSSStartBytes)/(1<<20), float64(c.RSSEndBytes)/(1<<20), c.RequestsPerSecond)
	}
	fmt.Printf("\n/metrics with %d probes: %d series, %d bytes (text), %d bytes (protobuf); mean %s, max %s over 10 scrapes\n",
		r.Scrape.Probes, r.Scrape.Series, r.Scrape.BodyBytes, r.Scrape.NativeProtobuf, ms(r.Scrape.MeanSeconds), ms(r.Scrape.MaxSeconds))
}

type soakSample struct {
	Seconds   float64 `json:"seconds"`
	RSSBytes  int64   `json:"rss_bytes"`
	HeapBytes float64 `json:"heap_inuse_bytes"`
	Writes    float64 `json:"writes"`
}

// soak runs the exporter under a steady load and samples its memory, to
// show whether it stays flat.
func soak(binDir, out string, d time.Duration) error {
	ctx := context.Background()
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "soak"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "watchprobe-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	var cfg strings.Builder
	cfg.WriteString("probes:\n")
	for i := range 10 {
		fmt.Fprintf(&cfg, "  - {name: s%d, namespace: soak, interval: 3s, updates: 8}\n", i)
	}
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(cfg.String()), 0o600); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(binDir, "watchprobe"), "--kubeconfig", kubeconfig, "--config.file", config,
		"--probe.replica", "soak", "--web.listen-address", addr, "--log.level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Signal(os.Interrupt); <-exited }()
	url := "http://" + addr
	if err := waitReady(url+"/-/ready", 2*time.Minute, exited); err != nil {
		return err
	}
	fmt.Printf(">> soak: 10 probes, 33 writes/s in all, for %s; a sample every 30 s\n", d)
	var samples []soakSample
	start := time.Now()
	for {
		_, rss, _ := procStats(cmd.Process.Pid)
		s := soakSample{Seconds: time.Since(start).Seconds(), RSSBytes: rss,
			HeapBytes: sumMetric(url, "go_memstats_heap_inuse_bytes"), Writes: sumMetric(url, "watchprobe_writes_total")}
		samples = append(samples, s)
		fmt.Printf("   %4.0f s: RSS %.1f MiB, heap in use %.1f MiB, %0.f writes\n", s.Seconds, float64(s.RSSBytes)/(1<<20), s.HeapBytes/(1<<20), s.Writes)
		if time.Since(start) >= d {
			break
		}
		time.Sleep(30 * time.Second)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(samples, "", "  ")
	return os.WriteFile(out, append(data, '\n'), 0o644)
}
