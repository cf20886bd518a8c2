// Command bench measures watchprobe on the local control plane, as `make
// bench` runs it: its latency figures against bare reference clients on the
// same marker writes (a bare etcd watch, the physical floor, and a bare
// apiserver watch), its CPU, memory and apiserver load as probes and rates
// grow, and the cost of a scrape with 100 probes. It prints a table and
// writes the figures as JSON.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "directory holding watchprobe, kube-apiserver and etcd")
	out := flag.String("o", "out/bench.json", "where to write the figures as JSON")
	overheadFor := flag.Duration("overhead-for", 40*time.Second, "how long the overhead run writes markers")
	loadFor := flag.Duration("load-for", 40*time.Second, "how long the overhead run under background churn writes markers (0: no load phase)")
	churnRate := flag.Float64("churn-rate", 600, "background churn of the load phase, in ConfigMap writes per second")
	window := flag.Duration("window", 40*time.Second, "measurement window of each cost run")
	flag.DurationVar(&retention, "retention", 0, "give every probe of the cost and soak runs this retention (default: the probe's default)")
	flag.BoolVar(&resumeChecks, "resume", false, "give the overhead runs' probe resume checks (the default ages, a round every 10 s), to compare its paths' latency with a run without")
	flag.BoolVar(&proxyHTTP1, "proxy-http1", false, "make the cost runs' counting proxies speak HTTP/1.1 only (one connection per watch), as the figures before 2026-11-30 were measured")
	flag.BoolVar(&bareTogether, "bare-together", false, "make the bare client of the cost runs begin every probe's cycles at once, as before the evening of 2026-11-30 (it then began before the exporter; now after), rather than on the exporter's schedule")
	flag.Float64Var(&bareOffset, "bare-offset", 0, "shift the bare client's schedule by this fraction of the interval from the exporter's (a control: 0.5 keeps the schedule's shape but not its instants)")
	flag.BoolVar(&oneNamespace, "one-namespace", false, "put all probes of a cost or soak run in one namespace, as the cost figures were measured until the evening of 2026-11-30, rather than each in its own")
	flag.BoolVar(&cpuProfile, "cpu-profile", false, "also save a CPU profile of the exporter over the 100-probe window (profiling adds a little CPU to that window)")
	flag.Func("cost-probes", "run only the cost loads with these probe counts, comma-separated, e.g. 100 (for a quick check; default all)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("%q is not a probe count", f)
			}
			costProbes = append(costProbes, n)
		}
		return nil
	})
	soakFor := flag.Duration("soak", 0, "instead of the benchmark, run 100 probes at 105 writes/s in all for this long and sample memory every 30 s")
	seriesOnly := flag.Bool("series", false, "instead of the benchmark, print the series per probe with and without classic histogram buckets")
	flag.Parse()
	var err error
	if *seriesOnly {
		var counts []seriesCount
		if counts, err = seriesPerProbe(); err == nil {
			printSeries(os.Stdout, counts)
		}
	} else if *soakFor > 0 {
		err = soak(*binDir, *out, *soakFor)
	} else {
		err = run(*binDir, *out, *overheadFor, *loadFor, *churnRate, *window)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type results struct {
	Machine  string      `json:"machine"`
	Overhead overheadRun `json:"overhead"`
	Load     *loadResult `json:"load,omitempty"`
	Cost     []cost      `json:"cost"`
	Scrape   scrapeCost  `json:"scrape"`
	// SeriesMemory is the peak RSS, on the 100-probe load, of a bare client,
	// of one that also keeps the exporter's series, and of the exporter.
	SeriesMemory *seriesMemory `json:"series_memory,omitempty"`
	// SeriesPerProbe is computed, not measured: the same in every run.
	SeriesPerProbe []seriesCount `json:"series_per_probe"`
}

type latency struct {
	Client string `json:"client"`
	// Event is the event type the writes were expected as, or empty for
	// all of them.
	Event               string  `json:"event,omitempty"`
	Writes              int     `json:"writes"`
	P50Seconds          float64 `json:"p50_seconds"`
	P99Seconds          float64 `json:"p99_seconds"`
	P50VsBare           float64 `json:"p50_vs_bare_apiserver_watch"`
	P50MinusBareSeconds float64 `json:"p50_minus_bare_apiserver_watch_seconds"`
	P50VsEtcd           float64 `json:"p50_vs_etcd_floor"`
	// P50OldClassicSeconds is what histogram_quantile made of these very
	// latencies with the earlier classic buckets (oldLatencyBuckets).
	P50OldClassicSeconds float64 `json:"p50_old_classic_buckets_seconds"`
}

type cost struct {
	Probes int `json:"probes"`
	// WritesPerSecond is counted by the exporter's scrapes, a check of
	// ScheduledWrites, the rate its probes' settings make.
	WritesPerSecond  float64 `json:"writes_per_second"`
	ScheduledWrites  float64 `json:"scheduled_writes_per_second"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	CPUPer1000Writes float64 `json:"cpu_seconds_per_1000_writes"`
	CPUPerWritePath  float64 `json:"cpu_seconds_per_write_per_path"`
	PeakRSSBytes     int64   `json:"peak_rss_bytes"`
	RSSStartBytes    int64   `json:"rss_start_bytes"`
	RSSEndBytes      int64   `json:"rss_end_bytes"`
	// At the end, RSS by kind: anonymous (heap, stacks, runtime) and
	// file-backed (mostly the binary's own pages).
	RSSAnonEndBytes   int64   `json:"rss_anon_end_bytes"`
	RSSFileEndBytes   int64   `json:"rss_file_end_bytes"`
	RequestsPerSecond float64 `json:"apiserver_requests_per_second"`
	// TerminatedWatches counts the watches kube-apiserver ended in the
	// window as unresponsive, the exporter's and the bare client's: each
	// costs a relist, so a window with some does not compare the clients'
	// own costs.
	TerminatedWatches float64 `json:"apiserver_terminated_watches"`
	// The bare client (hack/bench/bare) on the same load, at the same time,
	// through its own counting proxy: what any client of that load pays.
	Bare bareCost `json:"bare"`
	// CPURatio is the exporter's CPU over the bare client's, on the same
	// schedule of writes over the same seconds; PeakRSSRatio the ratio of
	// their peak RSS.
	CPURatio     float64 `json:"cpu_vs_bare"`
	PeakRSSRatio float64 `json:"peak_rss_vs_bare"`
	// ScheduleSpreadSeconds is the shortest part of the interval in which
	// the exporter's probes' latest creates fell; PhaseDiff* how far, in
	// the interval, each bare probe's latest create was from the exporter's
	// probe of the same number (see startOnSchedule).
	ScheduleSpreadSeconds  float64 `json:"schedule_spread_seconds"`
	PhaseDiffMedianSeconds float64 `json:"phase_difference_median_seconds"`
	PhaseDiffMaxSeconds    float64 `json:"phase_difference_max_seconds"`
	// phases are the exporter's probes' latest creates at the end of the
	// window, for a later run on the same schedule (nil in one namespace).
	phases []time.Time
}

type bareCost struct {
	WritesPerSecond       float64 `json:"writes_per_second"`
	ScheduleSpreadSeconds float64 `json:"schedule_spread_seconds"`
	CPUSeconds            float64 `json:"cpu_seconds"`
	PeakRSSBytes          int64   `json:"peak_rss_bytes"`
	RSSAnonEndBytes       int64   `json:"rss_anon_end_bytes"`
	RSSFileEndBytes       int64   `json:"rss_file_end_bytes"`
	RequestsPerSecond     float64 `json:"apiserver_requests_per_second"`
	// Events received per write in the window, on the informers and the
	// raw watches: 1 when the reference did all the work it is compared on.
	InformerEventsPerWrite float64 `json:"informer_events_per_write"`
	WatchEventsPerWrite    float64 `json:"watch_events_per_write"`
}

type scrapeCost struct {
	Probes      int     `json:"probes"`
	MeanSeconds float64 `json:"mean_seconds"`
	MaxSeconds  float64 `json:"max_seconds"`
	// EmptyMeanSeconds is the mean scrape of an empty registry served by
	// promhttp in the bench process over loopback, in the same run: the
	// fixed cost of a scrape, to which the exporter's is a ratio.
	EmptyMeanSeconds float64 `json:"empty_registry_mean_seconds"`
	VsEmpty          float64 `json:"mean_vs_empty_registry"`
	BodyBytes        int     `json:"body_bytes"`
	Series           int     `json:"series"`
	NativeProtobuf   int     `json:"protobuf_body_bytes"`
}

func run(binDir, out string, overheadFor, loadFor time.Duration, churnRate float64, window time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	// Found before the phases that do not need it, so that a missing
	// build fails in seconds, not after minutes of overhead and load.
	exporter, err := exporterBinary(binDir)
	if err != nil {
		return err
	}
	fmt.Println(">> starting etcd and kube-apiserver on loopback")
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	// The load average says whether the machine was the bench's alone:
	// other work shifts every figure, and ratios less than absolutes.
	startLoad := loadAverage()
	res := results{Machine: fmt.Sprintf("%d CPUs, %s, %s", runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, runtime.Version())}

	if overheadFor > 0 {
		fmt.Printf(">> overhead: writing markers for %s, timed by the exporter and by bare reference clients\n", overheadFor)
		if res.Overhead, err = overhead(ctx, cluster, overheadFor, "bench"); err != nil {
			return err
		}
	}
	if loadFor > 0 {
		fmt.Printf(">> load: the same, for %s, while another process churns %.0f ConfigMap writes/s\n", loadFor, churnRate)
		load, err := underLoad(ctx, cluster, loadFor, churnRate)
		if err != nil {
			return err
		}
		res.Load = &load
	}
	fmt.Println(">> cost: the exporter binary at growing rates and probe counts, beside the bare client on the same load")
	if res.Cost, res.Scrape, err = costs(ctx, cluster, exporter, window, filepath.Dir(out)); err != nil {
		return err
	}
	if largest := costLoads[len(costLoads)-1]; len(res.Cost) > 0 && res.Cost[len(res.Cost)-1].Probes == largest.probes {
		fmt.Printf(">> series memory: two bare clients on the %d-probe load, one of them keeping the exporter's series\n", largest.probes)
		// A reference, not the bench's result: its failure loses only itself.
		if m, err := measureSeriesMemory(ctx, cluster, largest, window, res.Cost[len(res.Cost)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "bench: no series memory:", err)
		} else {
			res.SeriesMemory = &m
		}
	}
	if res.SeriesPerProbe, err = seriesPerProbe(); err != nil {
		return err
	}
	// The tables go to the terminal and, as Markdown, beside the JSON:
	// `make bench-docs` puts them into docs/performance.md.
	var tables bytes.Buffer
	w := io.MultiWriter(os.Stdout, &tables)
	res.Machine += fmt.Sprintf("; load average (1 min) %s at the start, %s at the end", startLoad, loadAverage())
	printTable(w, res)
	printSeries(w, res.SeriesPerProbe)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(res, "", "  ")
	md := strings.TrimSuffix(out, filepath.Ext(out)) + ".md"
	fmt.Println(">> figures written to", out, "and", md)
	if err := os.WriteFile(md, []byte(strings.TrimPrefix(tables.String(), "\n")), 0o644); err != nil {
		return err
	}
	return os.WriteFile(out, append(data, '\n'), 0o644)
}

// loadAverage is the machine's load average over the last minute, from
// /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// terminatedWatchers reads kube-apiserver's count of the ConfigMap watches
// it ended because their clients did not keep up (or it could not deliver
// fast enough), -1 if it cannot.
func terminatedWatchers(ctx context.Context, client kubernetes.Interface) float64 {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, `apiserver_terminated_watchers_total{group="",resource="configmaps"} `) {
			v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndex(line, " "):]), 64)
			if err == nil {
				return v
			}
		}
	}
	return 0 // none yet: the series appears with the first
}

// createNamespace creates namespace ns, which each phase writes in alone.
func createNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	return err
}

// oneNamespace puts all probes of a cost or soak run in one namespace.
// By default each probe has its own: kube-apiserver's watch cache offers
// every event of a namespace to every watch in it, whatever its label
// selector, so with 100 probes in one namespace each write goes to 200
// watches rather than 2, and on this machine kube-apiserver 1.37 then ended
// hundreds of the probes' watches as unresponsive
// (apiserver_terminated_watchers_total), at random, in some runs and not
// others: relists that made the clients' CPU figures differ from run to
// run by more than what is compared.
var oneNamespace bool

// probeNamespace is the namespace of probe i (named p<i>) of a run in ns.
func probeNamespace(ns string, i int) string {
	if oneNamespace {
		return ns
	}
	return fmt.Sprintf("%s-p%d", ns, i)
}

// createProbeNamespaces creates the namespaces of a run's probes in ns.
func createProbeNamespaces(ctx context.Context, client kubernetes.Interface, ns string, probes int) error {
	if oneNamespace {
		probes = 1
	}
	for i := range probes {
		if err := createNamespace(ctx, client, probeNamespace(ns, i)); err != nil {
			return err
		}
	}
	return nil
}

// bareTogether makes the bare client of a cost run begin all its probes'
// cycles at once. By default each of its probes begins on the schedule of
// the exporter's probe of the same number (see measure).
var bareTogether bool

// bareOffset shifts the bare client's schedule by this fraction of the
// interval from the exporter's.
var bareOffset float64

// costProbes, if set, limits the cost loads to these probe counts.
var costProbes []int

// retention, if set, is every probe's retention in the cost and soak runs.
var retention time.Duration

// resumeChecks gives the overhead runs' probe resume checks, so that its
// paths' latency can be set beside a run's without them.
var resumeChecks bool

func retentionSetting() string {
	if retention == 0 {
		return ""
	}
	return ", retention: " + model.Duration(retention).String()
}

type costLoad struct {
	probes   int
	interval time.Duration // each probe writes updates+2 markers per interval
	updates  int
}

// costLoads are the cost runs' loads, the last the largest: 100 probes x 3
// writes every 2.857 s, 105 writes/s.
var costLoads = []costLoad{
	{1, 3 * time.Second, 1}, {1, 300 * time.Millisecond, 1}, {1, 100 * time.Millisecond, 3},
	{10, 3 * time.Second, 1}, {100, 2857 * time.Millisecond, 1},
}

// costs runs the exporter binary through a counting proxy at each load,
// beside the bare client on the same load through a proxy of its own.
func costs(ctx context.Context, cluster *localcluster.Cluster, bin string, window time.Duration, outDir string) ([]cost, scrapeCost, error) {
	cert, key, err := cluster.IssueServing()
	if err != nil {
		return nil, scrapeCost{}, err
	}
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	dir, err := os.MkdirTemp("", "watchprobe-bench-bare-")
	if err != nil {
		return nil, scrapeCost{}, err
	}
	defer os.RemoveAll(dir)
	bareBin, err := buildBare(dir)
	if err != nil {
		return nil, scrapeCost{}, err
	}
	var out []cost
	var scrape scrapeCost
	for i, load := range costLoads {
		if len(costProbes) > 0 && !slices.Contains(costProbes, load.probes) {
			continue
		}
		ns := fmt.Sprintf("cost-%d", i)
		profile := filepath.Join(outDir, fmt.Sprintf("cost-%d-%dprobes", i, load.probes))
		c, sc, err := sideBySide(ctx, cluster, client, cert, key, bin, bareBin, dir, ns, load.probes, load.interval, load.updates, window, profile)
		if err != nil {
			return nil, scrape, err
		}
		fmt.Printf("   %3d probes: exporter %5.1f writes/s, %.2f CPU s, peak RSS %s (at the end %s anonymous + %s file); bare client %5.1f writes/s, %.2f CPU s, peak RSS %s (%s + %s); CPU %.2fx, peak RSS %.2fx; watches ended by the apiserver as unresponsive %.0f (-1: unknown)\n",
			c.Probes, c.WritesPerSecond, c.CPUSeconds, mib(float64(c.PeakRSSBytes)), mib(float64(c.RSSAnonEndBytes)), mib(float64(c.RSSFileEndBytes)),
			c.Bare.WritesPerSecond, c.Bare.CPUSeconds, mib(float64(c.Bare.PeakRSSBytes)), mib(float64(c.Bare.RSSAnonEndBytes)), mib(float64(c.Bare.RSSFileEndBytes)), c.CPURatio, c.PeakRSSRatio, c.TerminatedWatches)
		out = append(out, c)
		if load.probes == 100 {
			scrape = sc
		}
	}
	return out, scrape, nil
}

// exporterBinary is the exporter built into binDir, or an error that names
// the make target which builds it.
func exporterBinary(binDir string) (string, error) {
	bin := filepath.Join(binDir, "watchprobe")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("exporter binary missing at %s: run `make build` (or `make bench`, which builds it): %w", bin, err)
	}
	return bin, nil
}

// clientPlace makes the namespaces of one client of a cost run (ns, or
// one per probe) and the counting proxy it talks to the apiserver through.
func clientPlace(ctx context.Context, cluster *localcluster.Cluster, client kubernetes.Interface, cert, key []byte, ns string, probes int) (*countingProxy, error) {
	if err := createProbeNamespaces(ctx, client, ns, probes); err != nil {
		return nil, err
	}
	return newCountingProxy(cluster.APIServerURL, cluster.CAPEM(), cert, key)
}

// sideBySide runs the bare client and the exporter on one load, each in its
// own namespace and through its own counting proxy, and measures both.
func sideBySide(ctx context.Context, cluster *localcluster.Cluster, client kubernetes.Interface, cert, key []byte, bin, bareBin, dir, ns string,
	probes int, interval time.Duration, updates int, window time.Duration, profile string) (cost, scrapeCost, error) {
	var proxies []*countingProxy
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	for _, ns := range []string{ns, ns + "-bare"} {
		proxy, err := clientPlace(ctx, cluster, client, cert, key, ns, probes)
		if err != nil {
			return cost{}, scrapeCost{}, err
		}
		proxies = append(proxies, proxy)
	}
	bare, err := startBare(ctx, bareBin, proxies[1].Config(cluster.AdminConfig()), dir, ns+"-bare", probes, interval, updates, fmt.Sprintf("-namespace-per-probe=%t", !oneNamespace), "-wait-for-start")
	if err != nil {
		return cost{}, scrapeCost{}, err
	}
	defer bare.stop()
	return measure(ctx, bin, cluster.AdminConfig(), client, proxies[0], ns, probes, interval, updates, window, bare, proxies[1], profile)
}

// measure runs the exporter on one load and measures it over window, and
// the bare client, already running on the same load, over the same window.
// It saves the exporter's profiles under the prefix profile, and prints the
// largest entries of those of 100 probes.
func measure(ctx context.Context, bin string, admin *rest.Config, client kubernetes.Interface, proxy *countingProxy, ns string, probes int, interval time.Duration, updates int, window time.Duration,
	bare *bareClient, bareProxy *countingProxy, profile string) (cost, scrapeCost, error) {
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
		fmt.Fprintf(&cfg, "  - {name: p%d, namespace: %s, interval: %s, updates: %d%s}\n", i, probeNamespace(ns, i), model.Duration(interval), updates, retentionSetting())
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
		"--probe.replica", "bench", "--web.listen-address", addr, "--log.level", "warn", "--web.enable-pprof")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return cost{}, scrapeCost{}, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Signal(os.Interrupt); <-exited }()
	url := "http://" + addr
	if err := waitPathsUp(url, 2*time.Minute, exited); err != nil {
		return cost{}, scrapeCost{}, err
	}
	if err := startOnSchedule(bare, proxy, ns, probes, interval); err != nil {
		return cost{}, scrapeCost{}, err
	}
	// Every bare probe has begun, and has written for two intervals more.
	time.Sleep(3*interval + 5*time.Second)
	// The CPU window holds no scrape of /metrics (at 100 probes one costs
	// about as much as seconds of probing; its cost is measured below).
	// A whole number of intervals: each window holds as many cycles of each
	// probe, whatever their phase. Both clients write on the same schedule,
	// so their CPU is compared over the same seconds, and per write at the
	// schedule's rate. The writes counted by scrapes just outside the
	// window only check that schedule: the probes write in bursts, and a
	// count taken a second late can hold a burst more (5% at 100 probes).
	window = max(window.Round(interval), interval)
	scheduled := float64(probes*(updates+2)) / interval.Seconds()
	terminated0 := terminatedWatchers(ctx, client)
	writes0, at0 := scrapeSum(url, "watchprobe_writes_total")
	bareWrites0, bareInformer0, bareWatch0 := bare.counts()
	bareAt0 := time.Now()
	cpu0, rss0, _ := procStats(cmd.Process.Pid)
	bareCPU0, _, _ := procStats(bare.pid())
	req0, bareReq0 := proxy.Requests(), bareProxy.Requests()
	start := time.Now()
	profiled := func() {}
	if cpuProfile && probes == 100 {
		profiled = startCPUProfile(url, profile, window)
	}
	time.Sleep(window)
	cpu1, rss1, peak := procStats(cmd.Process.Pid)
	bareCPU1, _, barePeak := procStats(bare.pid())
	elapsed := time.Since(start).Seconds()
	anon, file := rssSplit(cmd.Process.Pid)
	bareAnon, bareFile := rssSplit(bare.pid())
	requests, bareRequests := proxy.Requests()-req0, bareProxy.Requests()-bareReq0
	bareWrites1, bareInformer1, bareWatch1 := bare.counts()
	bareElapsed := time.Since(bareAt0).Seconds()
	writes1, at1 := scrapeSum(url, "watchprobe_writes_total")
	terminated := -1.0 // unknown
	if terminated1 := terminatedWatchers(ctx, client); terminated0 >= 0 && terminated1 >= 0 {
		terminated = terminated1 - terminated0
	}
	writeRate := (writes1 - writes0) / at1.Sub(at0).Seconds()
	cpuRate := (cpu1 - cpu0) / elapsed
	bareWrites := bareWrites1 - bareWrites0
	bareWriteRate, bareCPURate := bareWrites/bareElapsed, (bareCPU1-bareCPU0)/elapsed
	c := cost{
		Probes:            probes,
		WritesPerSecond:   writeRate,
		CPUSeconds:        cpu1 - cpu0,
		ScheduledWrites:   scheduled,
		CPUPer1000Writes:  cpuRate / scheduled * 1000,
		CPUPerWritePath:   cpuRate / scheduled / 2,
		PeakRSSBytes:      peak,
		RSSStartBytes:     rss0,
		RSSEndBytes:       rss1,
		RSSAnonEndBytes:   anon,
		RSSFileEndBytes:   file,
		RequestsPerSecond: float64(requests) / elapsed,
		TerminatedWatches: terminated,
		Bare: bareCost{
			WritesPerSecond:        bareWriteRate,
			CPUSeconds:             bareCPU1 - bareCPU0,
			PeakRSSBytes:           barePeak,
			RSSAnonEndBytes:        bareAnon,
			RSSFileEndBytes:        bareFile,
			RequestsPerSecond:      float64(bareRequests) / elapsed,
			InformerEventsPerWrite: (bareInformer1 - bareInformer0) / bareWrites,
			WatchEventsPerWrite:    (bareWatch1 - bareWatch0) / bareWrites,
		},
	}
	c.CPURatio = cpuRate / bareCPURate
	for _, r := range []float64{writeRate, bareWriteRate} {
		if r < 0.9*scheduled || r > 1.1*scheduled {
			fmt.Printf("   %d probes: a client wrote %.1f writes/s, off the schedule's %.1f by more than 10%%: its writes failed, or the machine was too busy\n", probes, r, scheduled)
		}
	}
	c.PeakRSSRatio = float64(c.PeakRSSBytes) / float64(c.Bare.PeakRSSBytes)
	scheduleCheck(&c, proxy, bareProxy, ns, probes, interval)
	if c.PhaseDiffMaxSeconds > 0 || c.ScheduleSpreadSeconds > 0 {
		fmt.Printf("   %d probes: in the window the exporter's probes created their markers within %s of each interval, the bare client's within %s; each bare probe %s from the exporter's at the median, %s at most (offset asked: %.2f of %s)\n",
			probes, seconds(c.ScheduleSpreadSeconds), seconds(c.Bare.ScheduleSpreadSeconds), seconds(c.PhaseDiffMedianSeconds), seconds(c.PhaseDiffMaxSeconds), bareOffset, interval)
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
	empty := httptest.NewServer(promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}))
	for range 10 {
		start := time.Now()
		get(empty.URL, "")
		sc.EmptyMeanSeconds += time.Since(start).Seconds() / 10
	}
	empty.Close()
	sc.VsEmpty = sc.MeanSeconds / sc.EmptyMeanSeconds
	profiled()
	if err := memoryReport(url, profile, probes == 100); err != nil {
		fmt.Fprintln(os.Stderr, "bench: no heap profile:", err)
	}
	return c, sc, nil
}

// startOnSchedule starts the bare client's probes on the exporter's
// schedule: each probe's cycles a whole number of intervals (and
// bareOffset of one) after those of the exporter's probe of the same
// number, as its creates come through the exporter's proxy. Each exporter
// probe begins once its own paths have synced, so its probes' writes are
// spread over part of the interval; a bare client beginning all at once
// writes in one burst per interval and pays less for the same writes (one
// wakeup serves every event pending), which made the CPU ratio of the same
// code range from 1.4 to 1.8 run to run. The phases are read from each
// probe's second create, past the queue of start-up. With all probes in one
// namespace, or -bare-together, every bare probe begins at once.
func startOnSchedule(bare *bareClient, proxy *countingProxy, ns string, probes int, interval time.Duration) error {
	if oneNamespace || bareTogether {
		return bare.start(nil)
	}
	phases := make([]time.Time, probes)
	within := 3*interval + time.Minute
	deadline := time.Now().Add(within)
	for i := range phases {
		for {
			if n, latest := proxy.Creates(probeNamespace(ns, i)); n >= 2 {
				phases[i] = latest.Add(time.Duration(bareOffset * float64(interval)))
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("exporter probe p%d did not write twice within %s of being ready", i, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return bare.start(phases)
}

// scheduleCheck compares, at the end of a window, where in the interval
// each probe's latest create fell for the exporter and for the bare client:
// the schedules match if the differences are small against the spread.
func scheduleCheck(c *cost, proxy, bareProxy *countingProxy, ns string, probes int, interval time.Duration) {
	if oneNamespace {
		return
	}
	var exporter, bare []time.Time
	var diffs []time.Duration
	for i := range probes {
		_, e := proxy.Creates(probeNamespace(ns, i))
		_, b := bareProxy.Creates(probeNamespace(ns+"-bare", i))
		if e.IsZero() || b.IsZero() {
			return
		}
		exporter, bare = append(exporter, e), append(bare, b)
		d := inInterval(b.Sub(e), interval)
		if d > interval/2 {
			d = interval - d
		}
		diffs = append(diffs, d)
	}
	slices.Sort(diffs)
	c.phases = exporter
	c.ScheduleSpreadSeconds = spread(exporter, interval).Seconds()
	c.Bare.ScheduleSpreadSeconds = spread(bare, interval).Seconds()
	c.PhaseDiffMedianSeconds = diffs[len(diffs)/2].Seconds()
	c.PhaseDiffMaxSeconds = diffs[len(diffs)-1].Seconds()
}

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}

// inInterval is d modulo interval, in [0, interval).
func inInterval(d, interval time.Duration) time.Duration { return (d%interval + interval) % interval }

// spread is the shortest part of an interval that holds every phase: the
// interval less the longest gap between two phases in a row, around it.
func spread(phases []time.Time, interval time.Duration) time.Duration {
	if len(phases) < 2 {
		return 0
	}
	offsets := make([]time.Duration, len(phases))
	for i, t := range phases {
		offsets[i] = inInterval(t.Sub(phases[0]), interval)
	}
	slices.Sort(offsets)
	gap := offsets[0] + interval - offsets[len(offsets)-1]
	for i := 1; i < len(offsets); i++ {
		gap = max(gap, offsets[i]-offsets[i-1])
	}
	return (interval - gap).Round(time.Millisecond)
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

// scrapeSum is sumMetric with the instant its sample stands for: halfway
// through the scrape.
func scrapeSum(url, name string) (float64, time.Time) {
	before := time.Now()
	v := sumMetric(url, name)
	return v, before.Add(time.Since(before) / 2)
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
	status := procStatus(pid)
	return cpu, status["VmRSS:"], status["VmHWM:"]
}

// procStatus reads the sizes in /proc/<pid>/status, in bytes, by field.
func procStatus(pid int) map[string]int64 {
	out := map[string]int64{}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = kb * 1024
		}
	}
	return out
}

// waitPathsUp waits until the exporter at url serves its metrics and every
// path of its probes has a stream open and caught up: /-/ready is the
// exporter's own state, not its probes'.
func waitPathsUp(url string, within time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("the exporter exited before its paths were up")
		default:
		}
		if resp, err := http.Get(url + "/metrics"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			up, down := 0, 0
			for _, line := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(line, "watchprobe_path_up{") {
					if strings.HasSuffix(line, " 1") {
						up++
					} else {
						down++
					}
				}
			}
			if resp.StatusCode == http.StatusOK && up > 0 && down == 0 {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the paths of the exporter at %s not all up within %s", url, within)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func printTable(w io.Writer, r results) {
	ms := func(s float64) string { return fmt.Sprintf("%.2f ms", s*1000) }
	fmt.Fprintf(w, "\nmachine: %s\n\n", r.Machine)
	printRun(w, "idle", r.Overhead)
	if r.Load != nil {
		fmt.Fprintf(w, "\nunder load: %.0f ConfigMap writes/s of churn from another process (target %.0f, %.0f failed)\n", r.Load.ChurnPerSecond, r.Load.ChurnTargetPerSecond, r.Load.ChurnFailures)
		printRun(w, "under load", r.Load.overheadRun)
		fmt.Fprintf(w, "\nan independent bare client in its own process, same shape and rate, own writes and send stamps, at the same time: p50 added %.2f ms, modified %.2f ms, deleted %.2f ms\n",
			r.Load.Independent["added"]*1000, r.Load.Independent["modified"]*1000, r.Load.Independent["deleted"]*1000)
		fmt.Fprintf(w, "the same bare client inside the bench's process, beside the probe: p50 added %.2f ms, modified %.2f ms, deleted %.2f ms\n",
			r.Load.InProcess["added"]*1000, r.Load.InProcess["modified"]*1000, r.Load.InProcess["deleted"]*1000)
	}
	fmt.Fprintln(w, "\n| probes | writes/s (schedule) | CPU ms per 1000 writes | CPU ms per write per path | peak RSS | RSS start → end | apiserver requests/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, c := range r.Cost {
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.3f | %.1f MiB | %.1f → %.1f MiB | %.2f |\n", c.Probes, c.ScheduledWrites, c.CPUPer1000Writes*1000,
			c.CPUPerWritePath*1000, float64(c.PeakRSSBytes)/(1<<20), float64(c.RSSStartBytes)/(1<<20), float64(c.RSSEndBytes)/(1<<20), c.RequestsPerSecond)
	}
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Fprintln(w, "\n| probes | writes/s counted (exporter / bare) | CPU s (exporter / bare) | CPU, exporter / bare | peak RSS (exporter / bare) | peak RSS, exporter / bare | bare events per write (informer / watch) | watches the apiserver ended (-1: unknown) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, c := range r.Cost {
		fmt.Fprintf(w, "| %d | %.1f / %.1f | %.2f / %.2f | %.2f | %s / %s | %.2f | %.2f / %.2f | %.0f |\n", c.Probes, c.WritesPerSecond, c.Bare.WritesPerSecond,
			c.CPUSeconds, c.Bare.CPUSeconds, c.CPURatio, mib(c.PeakRSSBytes), mib(c.Bare.PeakRSSBytes), c.PeakRSSRatio,
			c.Bare.InformerEventsPerWrite, c.Bare.WatchEventsPerWrite, c.TerminatedWatches)
	}
	fmt.Fprintf(w, "\n/metrics with %d probes: %d series, %d bytes (text), %d bytes (protobuf); mean %s, max %s over 10 scrapes; %.0fx the mean scrape of an empty registry (%s) in the same run\n",
		r.Scrape.Probes, r.Scrape.Series, r.Scrape.BodyBytes, r.Scrape.NativeProtobuf, ms(r.Scrape.MeanSeconds), ms(r.Scrape.MaxSeconds), r.Scrape.VsEmpty, ms(r.Scrape.EmptyMeanSeconds))
	if m := r.SeriesMemory; m != nil {
		fmt.Fprintf(w, "\n| peak RSS at %d probes, one sample each (anonymous + file-backed at the end) | bare client | bare client keeping the exporter's series | exporter (its cost run) |\n|---|---|---|---|\n", m.Probes)
		fmt.Fprintf(w, "| | %s (%s + %s) | %s (%s + %s) | %s (%s + %s) |\n", mib(m.BarePeakRSSBytes), mib(m.BareAnonEndBytes), mib(m.BareFileEndBytes),
			mib(m.SeriesPeakRSS), mib(m.SeriesAnonEnd), mib(m.SeriesFileEnd), mib(m.ExporterPeakRSS), mib(m.ExporterAnonEnd), mib(m.ExporterFileEnd))
		fmt.Fprintf(w, "\nthe bare client keeping the series had observed %.2f events per write into them at its scrape (about 2: every write on both paths; a write is counted when it returns, and its events often arrive first)\n", m.SeriesEventsRatio)
	}
}

// printRun prints what one overhead run measured.
func printRun(w io.Writer, title string, r overheadRun) {
	fmt.Fprintf(w, "\n%s: %d marker writes sent; seen by", title, r.Writes)
	for _, c := range slices.Sorted(maps.Keys(r.Seen)) {
		fmt.Fprintf(w, " %s %d,", c, r.Seen[c])
	}
	fmt.Fprintf(w, " the exporter's anomalies: %s (the tables hold only writes every client saw)\n", anomalyList(r.Anomalies))
	printLatency(w, title, r.Latency)
	printPreSend(w, title, r.PreSend)
	printReported(w, title, r.Reported)
}

// anomalyList lists the anomaly counters that rose, by series, or says none.
func anomalyList(rose map[string]float64) string {
	if len(rose) == 0 {
		return "none"
	}
	var out []string
	for _, series := range slices.Sorted(maps.Keys(rose)) {
		out = append(out, fmt.Sprintf("%s %.0f", series, rose[series]))
	}
	return strings.Join(out, ", ")
}

// printLatency prints one latency table: every client on the same writes,
// all of them first, then by event type.
func printLatency(w io.Writer, title string, rows []latency) {
	ms := func(s float64) string { return fmt.Sprintf("%.2f ms", s*1000) }
	fmt.Fprintf(w, "\n| %s: client (same writes) | event | writes | p50 | p99 | p50 / bare apiserver watch | p50 - bare apiserver watch | p50 / etcd floor |\n", title)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, l := range rows {
		event := l.Event
		if event == "" {
			event = "all"
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %.3f | %+.2f ms | %.2f |\n", l.Client, event, l.Writes, ms(l.P50Seconds), ms(l.P99Seconds), l.P50VsBare, l.P50MinusBareSeconds*1000, l.P50VsEtcd)
	}
}

// printPreSend prints the time writes spent in the exporter and client-go
// before the transport, where the send stamp is taken: part of no latency.
func printPreSend(w io.Writer, title string, rows []delay) {
	ms := func(s float64) string { return fmt.Sprintf("%.3f ms", s*1000) }
	fmt.Fprintf(w, "\n| %s: write call to HTTP transport (before the send stamp) | writes | p50 | p99 | max |\n|---|---|---|---|---|\n", title)
	for _, d := range rows {
		event := d.Event
		if event == "" {
			event = "all"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", event, d.Writes, ms(d.P50Seconds), ms(d.P99Seconds), ms(d.MaxSeconds))
	}
}

// printReported prints the p50 a user reads off the exporter's histograms
// beside the exact one of the same writes.
func printReported(w io.Writer, title string, rows []reportedP50) {
	fmt.Fprintf(w, "\n| %s: p50 as the exporter's histogram gives it | event | exact | from classic buckets | from native buckets | from the earlier classic buckets (one 10–25 ms bucket) |\n|---|---|---|---|---|---|\n", title)
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %.2f ms | %.2f ms (%+.0f%%) | %.2f ms (%+.0f%%) | %.2f ms (%+.0f%%) |\n", r.Path, r.Event, r.ExactSeconds*1000,
			r.ClassicBucket*1000, (r.ClassicBucket/r.ExactSeconds-1)*100, r.NativeBucket*1000, (r.NativeBucket/r.ExactSeconds-1)*100,
			r.OldClassicBucket*1000, (r.OldClassicBucket/r.ExactSeconds-1)*100)
	}
}

type soakSample struct {
	Seconds      float64 `json:"seconds"`
	RSSBytes     int64   `json:"rss_bytes"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	AnonBytes    int64   `json:"rss_anon_bytes"`
	FileBytes    int64   `json:"rss_file_bytes"`
	HeapBytes    float64 `json:"heap_inuse_bytes"`
	Writes       float64 `json:"writes"`
}

// soak runs the exporter under a steady load and samples its memory, to
// show whether it stays flat.
func soak(binDir, out string, d time.Duration) error {
	ctx := context.Background()
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}
	exporter, err := exporterBinary(binDir)
	if err != nil {
		return err
	}
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	if err := createProbeNamespaces(ctx, client, "soak", 100); err != nil {
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
	// The cost runs' largest load: 100 probes x 3 writes every 2.857 s.
	for i := range 100 {
		fmt.Fprintf(&cfg, "  - {name: s%d, namespace: %s, interval: 2857ms, updates: 1%s}\n", i, probeNamespace("soak", i), retentionSetting())
	}
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(cfg.String()), 0o600); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(exporter, "--kubeconfig", kubeconfig, "--config.file", config,
		"--probe.replica", "soak", "--web.listen-address", addr, "--log.level", "warn", "--web.enable-pprof")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() { _ = cmd.Process.Signal(os.Interrupt); <-exited }()
	url := "http://" + addr
	if err := waitPathsUp(url, 2*time.Minute, exited); err != nil {
		return err
	}
	fmt.Printf(">> soak: 100 probes, 105 writes/s in all, for %s; a sample every 30 s\n", d)
	var samples []soakSample
	start := time.Now()
	for {
		_, rss, peak := procStats(cmd.Process.Pid)
		anon, file := rssSplit(cmd.Process.Pid)
		s := soakSample{Seconds: time.Since(start).Seconds(), RSSBytes: rss, PeakRSSBytes: peak, AnonBytes: anon, FileBytes: file,
			HeapBytes: sumMetric(url, "go_memstats_heap_inuse_bytes"), Writes: sumMetric(url, "watchprobe_writes_total")}
		samples = append(samples, s)
		fmt.Printf("   %4.0f s: RSS %s (%s anonymous, %s file), peak %s, heap in use %s, %.0f writes\n", s.Seconds,
			mib(float64(rss)), mib(float64(anon)), mib(float64(file)), mib(float64(peak)), mib(s.HeapBytes), s.Writes)
		if time.Since(start) >= d {
			break
		}
		time.Sleep(30 * time.Second)
	}
	if err := memoryReport(url, filepath.Join(filepath.Dir(out), "soak"), true); err != nil {
		fmt.Fprintln(os.Stderr, "bench: no heap profile:", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(samples, "", "  ")
	return os.WriteFile(out, append(data, '\n'), 0o644)
}
