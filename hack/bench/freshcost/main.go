// Command freshcost measures what the freshness checks (pkg/probe/freshness)
// cost kube-apiserver on the local control plane: its CPU and the requests
// per second a checker adds, per resource and check interval, with 10,000
// objects of the resource in another namespace; whether a consistent LIST
// of a namespace holding none of them costs more with those 10,000 than
// without (the cache's namespace index, not a scan); what API Priority and
// Fairness makes of each form of the checks' LIST (apf.go); and what the
// checks at their defaults add to a priority level. `make bench-freshness`
// runs it; it prints Markdown for docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "where kube-apiserver and etcd are")
	objects := flag.Int("objects", 10000, "objects of the resource in the load namespace")
	window := flag.Duration("window", 30*time.Second, "each measurement's length")
	samples := flag.Int("samples", 50, "requests of each form of LIST timed")
	flag.Parse()
	if err := run(*binDir, *objects, *window, *samples); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func cpu(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// listTimes is the median and p99 of n consistent LISTs of pods in ns.
func listTimes(ctx context.Context, c kubernetes.Interface, ns string, n int) (time.Duration, time.Duration) {
	var ds []time.Duration
	for range n {
		start := time.Now()
		if _, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
			panic(err)
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[n/2], ds[n*99/100]
}

func run(binDir string, objects int, window time.Duration, samples int) error {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir, EtcdOverrides: []string{"/pods"}})
	if err != nil {
		return err
	}
	defer c.Stop()
	rc := c.AdminConfig()
	rc.QPS, rc.Burst = 500, 1000
	client := kubernetes.NewForConfigOrDie(rc)
	if err := localcluster.CreateNamespaces(ctx, client, "fresh", "load"); err != nil {
		return err
	}
	emptyP50, emptyP99 := listTimes(ctx, client, "fresh", 200)

	// The load: pods in another namespace.
	if err := localcluster.CreatePods(ctx, client, "load", objects); err != nil {
		return err
	}
	loadedP50, loadedP99 := listTimes(ctx, client, "fresh", 200)
	fullStart := time.Now()
	if _, err := client.CoreV1().Pods("load").List(ctx, metav1.ListOptions{}); err != nil {
		return err
	}
	full := time.Since(fullStart)

	pid := c.APIServerPID()
	measure := func(every time.Duration, resources []string) (float64, float64) {
		var checker *freshness.Checker
		if every > 0 {
			f := config.DefaultFreshnessConfig()
			f.Resources, f.Reads = resources, false
			f.Every = model.Duration(every)
			checker, err = freshness.New(freshness.Options{Probe: "bench", Namespace: "fresh", Config: f, LoadBalanced: c.AdminConfig(),
				Metrics: metrics.NewProbe(prometheus.NewRegistry()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now})
			if err != nil {
				panic(err)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, window)
		defer cancel()
		if checker != nil {
			defer checker.Close()
		}
		before, start, rounds := cpu(pid), time.Now(), 0
		if checker != nil {
			t := time.NewTicker(every)
			defer t.Stop()
			for cctx.Err() == nil {
				checker.Round(cctx)
				rounds++
				select {
				case <-cctx.Done():
				case <-t.C:
				}
			}
		} else {
			<-cctx.Done()
		}
		el := time.Since(start).Seconds()
		// The first round only makes the series; each check after is two
		// LISTs: the baseline and the consistent one.
		return (cpu(pid) - before) / el, float64(2*max(rounds-1, 0)*len(resources)) / el
	}
	// Discovery once, outside the windows: Round's first call resolves.
	idle, _ := measure(0, nil)
	fmt.Printf("| setting | apiserver CPU (cores) | over idle | LISTs/s |\n|---|---|---|---|\n")
	fmt.Printf("| idle, %d pods in another namespace | %.4f | | 0 |\n", objects, idle)
	for _, tc := range []struct {
		every     time.Duration
		resources []string
	}{
		{time.Second, []string{"pods"}},
		{100 * time.Millisecond, []string{"pods"}},
		{time.Second, []string{"pods", "configmaps", "endpointslices.discovery.k8s.io", "leases.coordination.k8s.io"}},
		{30 * time.Second, []string{"pods", "configmaps", "endpointslices.discovery.k8s.io", "leases.coordination.k8s.io"}},
	} {
		cores, rps := measure(tc.every, tc.resources)
		fmt.Printf("| every %s, %s | %.4f | %+.4f | %.2f |\n", tc.every, strings.Join(tc.resources, ", "), cores, cores-idle, rps)
	}
	fmt.Printf("\nconsistent LIST of pods in a namespace with none: p50 %s p99 %s with no pods anywhere, p50 %s p99 %s with %d in another namespace; LIST of those %d: %s\n",
		emptyP50.Round(10*time.Microsecond), emptyP99.Round(10*time.Microsecond), loadedP50.Round(10*time.Microsecond), loadedP99.Round(10*time.Microsecond), objects, objects, full.Round(time.Millisecond))

	if err := seatsPerForm(ctx, c, objects, samples, 300*time.Millisecond); err != nil {
		return err
	}
	return defaultsCost(ctx, c)
}
