// Command bench measures watchprobe on the local control plane, as `make
// bench` runs it: its latency figures against bare reference clients on the
// same marker writes (a bare etcd watch, the physical floor, and a bare
// apiserver watch), idle and under background churn; its CPU and memory
// beside a bare client-go program on the same load as probes and rates
// grow; the cost of a scrape with 100 probes; and how much of its memory
// its series take. It prints the tables, writes them as Markdown beside
// the figures as JSON.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// options are the bench's flags.
type options struct {
	binDir      string
	out         string
	overheadFor time.Duration
	loadFor     time.Duration
	churnRate   float64
	window      time.Duration
	// costProbes, if set, limits the cost runs to loads of these probe
	// counts.
	costProbes []int
	// retention, if set, is every probe's retention in the cost and soak
	// runs.
	retention time.Duration
	// resume gives the overhead runs' probe resume checks.
	resume     bool
	cpuProfile bool
	soak       time.Duration
	series     bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.binDir, "bin-dir", "bin", "directory holding watchprobe, kube-apiserver and etcd")
	fs.StringVar(&o.out, "o", "out/bench.json", "where to write the figures as JSON")
	fs.DurationVar(&o.overheadFor, "overhead-for", 40*time.Second, "how long the overhead run writes markers")
	fs.DurationVar(&o.loadFor, "load-for", 40*time.Second, "how long the overhead run under background churn writes markers (0: no load phase)")
	fs.Float64Var(&o.churnRate, "churn-rate", 600, "background churn of the load phase, in ConfigMap writes per second")
	fs.DurationVar(&o.window, "window", 40*time.Second, "measurement window of each cost run")
	fs.DurationVar(&o.retention, "retention", 0, "give every probe of the cost and soak runs this retention (default: the probe's default)")
	fs.BoolVar(&o.resume, "resume", false, "give the overhead runs' probe resume checks (the default ages, a round every 10 s), to compare its paths' latency with a run without")
	fs.BoolVar(&o.cpuProfile, "cpu-profile", false, "also save a CPU profile of the exporter over the 100-probe window (profiling adds a little CPU to that window)")
	fs.Func("cost-probes", "run only the cost loads with these probe counts, comma-separated, e.g. 100 (for a quick check; default all)", func(v string) error {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fmt.Errorf("%q is not a probe count", f)
			}
			o.costProbes = append(o.costProbes, n)
		}
		return nil
	})
	fs.DurationVar(&o.soak, "soak", 0, "instead of the benchmark, run the 100-probe load for this long and sample memory every 30 s")
	fs.BoolVar(&o.series, "series", false, "instead of the benchmark, print the series per probe with and without classic histogram buckets")
	return o, fs.Parse(args)
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	switch {
	case o.series:
		var counts []seriesCount
		if counts, err = seriesPerProbe(); err == nil {
			printSeries(os.Stdout, counts)
		}
	case o.soak > 0:
		err = soak(o)
	default:
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// setUp finds the exporter binary, then starts the control plane: a missing
// build fails in seconds, not after minutes of overhead and load.
func setUp(ctx context.Context, binDir string) (exporterBin string, cluster *localcluster.Cluster, err error) {
	if binDir, err = filepath.Abs(binDir); err != nil {
		return "", nil, err
	}
	exporterBin = filepath.Join(binDir, "watchprobe")
	if _, err := os.Stat(exporterBin); err != nil {
		return "", nil, fmt.Errorf("exporter binary missing at %s: run `make build` (or `make bench`, which builds it): %w", exporterBin, err)
	}
	fmt.Println(">> starting etcd and kube-apiserver on loopback")
	cluster, err = localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	return exporterBin, cluster, err
}

// run runs the benchmark's phases in turn and writes what they measured.
func run(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exporterBin, cluster, err := setUp(ctx, o.binDir)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	// The load average says whether the machine was the bench's alone:
	// other work shifts every figure, and ratios less than absolutes.
	startLoad := loadAverage()
	res := results{Machine: fmt.Sprintf("%d CPUs, %s, %s", runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH, runtime.Version())}
	if err := runPhases(ctx, cluster, exporterBin, o, &res); err != nil {
		return err
	}
	res.Machine += fmt.Sprintf("; load average (1 min) %s at the start, %s at the end", startLoad, loadAverage())
	return writeResults(res, o.out)
}

func runPhases(ctx context.Context, cluster *localcluster.Cluster, exporterBin string, o options, res *results) error {
	var err error
	if o.overheadFor > 0 {
		fmt.Printf(">> overhead: writing markers for %s, timed by the exporter and by bare reference clients\n", o.overheadFor)
		if res.Overhead, err = overhead(ctx, cluster, o.overheadFor, "bench", o.resume); err != nil {
			return err
		}
	}
	if o.loadFor > 0 {
		fmt.Printf(">> load: the same, for %s, while another process churns %.0f ConfigMap writes/s\n", o.loadFor, o.churnRate)
		load, err := underLoad(ctx, cluster, o.loadFor, o.churnRate, o.resume)
		if err != nil {
			return err
		}
		res.Load = &load
	}
	fmt.Println(">> cost: the exporter binary at growing rates and probe counts, beside the bare client on the same load")
	if res.Cost, res.Scrape, err = costs(ctx, cluster, exporterBin, o, filepath.Dir(o.out)); err != nil {
		return err
	}
	if n := len(res.Cost); n > 0 && res.Cost[n-1].Probes == largestLoad.probes {
		fmt.Printf(">> series memory: two bare clients on the %d-probe load, one of them keeping the exporter's series\n", largestLoad.probes)
		// A reference, not the bench's result: its failure loses only itself.
		if m, err := measureSeriesMemory(ctx, cluster, o.window, res.Cost[n-1]); err != nil {
			fmt.Fprintln(os.Stderr, "bench: no series memory:", err)
		} else {
			res.SeriesMemory = &m
		}
	}
	res.SeriesPerProbe, err = seriesPerProbe()
	return err
}

// writeResults prints the tables and writes them, as Markdown, beside the
// figures as JSON at out: `make bench-docs` puts them into
// docs/performance.md.
func writeResults(res results, out string) error {
	var tables bytes.Buffer
	w := io.MultiWriter(os.Stdout, &tables)
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
