package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/procstat"
)

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
	// window, for a later run on the same schedule.
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

// costs runs the exporter binary at each load, beside the bare client on
// the same load.
func costs(ctx context.Context, cluster *localcluster.Cluster, exporterBin string, o options, outDir string) ([]cost, scrapeCost, error) {
	r, err := newRig(cluster)
	if err != nil {
		return nil, scrapeCost{}, err
	}
	defer r.close()
	bareBin, err := buildHelper(r.dir, "bare")
	if err != nil {
		return nil, scrapeCost{}, err
	}
	var out []cost
	var scrape scrapeCost
	for i, load := range costLoads {
		if len(o.costProbes) > 0 && !slices.Contains(o.costProbes, load.probes) {
			continue
		}
		run := costRun{rig: r, load: load, ns: fmt.Sprintf("cost-%d", i), window: o.window, retention: o.retention,
			profile: filepath.Join(outDir, fmt.Sprintf("cost-%d-%dprobes", i, load.probes)), largest: load == largestLoad, cpuProfile: o.cpuProfile}
		c, sc, err := run.measure(ctx, exporterBin, bareBin)
		if err != nil {
			return nil, scrape, err
		}
		printCostLine(c)
		out = append(out, c)
		if run.largest {
			scrape = sc
		}
	}
	return out, scrape, nil
}

// costRun is one cost run: the exporter and the bare client on one load,
// each in namespaces of its own and through its own counting proxy,
// measured over the same window.
type costRun struct {
	*rig
	load      costLoad
	ns        string // the exporter's; the bare client's is ns-bare
	window    time.Duration
	retention time.Duration
	// profile is the prefix of the exporter's profiles: a heap profile at
	// the end of every run, and with cpuProfile a CPU profile of the
	// largest load's window.
	profile    string
	largest    bool
	cpuProfile bool
}

// measure runs the bare client, then the exporter, on the run's load, starts
// the bare client on the exporter's schedule, and measures both over the
// window, then the exporter's scrapes.
func (r costRun) measure(ctx context.Context, exporterBin, bareBin string) (cost, scrapeCost, error) {
	exporterProxy, err := r.place(ctx, r.ns, r.load.probes)
	if err != nil {
		return cost{}, scrapeCost{}, err
	}
	defer exporterProxy.Close()
	bareProxy, err := r.place(ctx, r.ns+"-bare", r.load.probes)
	if err != nil {
		return cost{}, scrapeCost{}, err
	}
	defer bareProxy.Close()
	bare, err := r.startBare(ctx, bareBin, bareProxy.Config(r.cluster.AdminConfig()), r.ns+"-bare", r.load, "-wait-for-start")
	if err != nil {
		return cost{}, scrapeCost{}, err
	}
	defer bare.stop() // through its proxy: it deletes its markers
	exporter, err := r.startExporter(exporterBin, exporterProxy.Config(r.cluster.AdminConfig()), r.ns, r.load, r.retention)
	if err != nil {
		return cost{}, scrapeCost{}, err
	}
	defer exporter.Stop()
	if err := startOnSchedule(bare, exporterProxy, r.ns, r.load); err != nil {
		return cost{}, scrapeCost{}, err
	}
	// Every bare probe has begun, and has written for two intervals more.
	time.Sleep(3*r.load.interval + 5*time.Second)

	c := r.measureWindow(ctx, exporter, bare, exporterProxy, bareProxy)
	warnOffSchedule(c)
	scheduleCheck(&c, exporterProxy, bareProxy, r.ns, r.load)
	sc := measureScrape(exporter.URL, r.load.probes)
	if err := memoryReport(exporter.URL, r.profile); err != nil {
		fmt.Fprintln(os.Stderr, "bench: no heap profile:", err)
	}
	return c, sc, nil
}

// usage is the CPU and memory of both clients, and the requests their
// proxies passed, at one instant.
type usage struct {
	exporter, bare         procstat.Sample
	requests, bareRequests int64
	at                     time.Time
}

// counts are the clients' own counts of their work, read around the CPU
// window, since reading them takes CPU (a scrape of 100 probes about as
// much as seconds of probing) and time.
type counts struct {
	writes   float64
	writesAt time.Time // halfway through the scrape that counted writes
	bare     bareCounts
	bareAt   time.Time
	// terminated is kube-apiserver's count of the ConfigMap watches it
	// ended as unresponsive, -1 if unknown.
	terminated float64
}

// measureWindow measures both clients over the run's window, a whole number
// of intervals: each window holds as many cycles of each probe, whatever
// their phase. Both clients write on the same schedule, so their CPU is
// compared over the same seconds, and per write at the schedule's rate.
// The writes counted just outside the window only check that schedule:
// the probes write in bursts, and a count taken a second late can hold a
// burst more.
func (r costRun) measureWindow(ctx context.Context, exporter *exportertest.Process, bare *bareClient, exporterProxy, bareProxy *countingProxy) cost {
	window := max(r.window.Round(r.load.interval), r.load.interval)
	readCounts := func() counts {
		var c counts
		c.terminated = terminatedWatchers(ctx, r.client)
		before := time.Now()
		_, body, _ := exportertest.Get(exporter.URL+"/metrics", "")
		c.writesAt = before.Add(time.Since(before) / 2)
		if families, err := exportertest.Parse(body); err == nil {
			c.writes, _ = exportertest.Sum(families, "watchprobe_writes_total", nil)
		}
		c.bare, c.bareAt = bare.counts(), time.Now()
		return c
	}
	readUsage := func() usage {
		return usage{exporter: readProc(exporter.Cmd.Process.Pid), bare: readProc(bare.pid()),
			requests: exporterProxy.Requests(), bareRequests: bareProxy.Requests(), at: time.Now()}
	}
	c0 := readCounts()
	u0 := readUsage()
	profiled := func() {}
	if r.largest && r.cpuProfile {
		profiled = startCPUProfile(exporter.URL, r.profile, window)
	}
	time.Sleep(window)
	u1 := readUsage()
	c1 := readCounts()
	profiled()
	return costOf(r.load, c0, u0, u1, c1)
}

// costOf is what a window cost, from the counts and usage at its ends.
func costOf(load costLoad, c0 counts, u0, u1 usage, c1 counts) cost {
	elapsed := u1.at.Sub(u0.at).Seconds()
	scheduled := load.writesPerSecond()
	cpuRate := (u1.exporter.CPU - u0.exporter.CPU) / elapsed
	bareCPURate := (u1.bare.CPU - u0.bare.CPU) / elapsed
	bareWrites := c1.bare.writes - c0.bare.writes
	terminated := -1.0
	if c0.terminated >= 0 && c1.terminated >= 0 {
		terminated = c1.terminated - c0.terminated
	}
	return cost{
		Probes:            load.probes,
		WritesPerSecond:   (c1.writes - c0.writes) / c1.writesAt.Sub(c0.writesAt).Seconds(),
		ScheduledWrites:   scheduled,
		CPUSeconds:        u1.exporter.CPU - u0.exporter.CPU,
		CPUPer1000Writes:  cpuRate / scheduled * 1000,
		CPUPerWritePath:   cpuRate / scheduled / 2,
		PeakRSSBytes:      u1.exporter.Peak,
		RSSStartBytes:     u0.exporter.RSS,
		RSSEndBytes:       u1.exporter.RSS,
		RSSAnonEndBytes:   u1.exporter.Anon,
		RSSFileEndBytes:   u1.exporter.File,
		RequestsPerSecond: float64(u1.requests-u0.requests) / elapsed,
		TerminatedWatches: terminated,
		Bare: bareCost{
			WritesPerSecond:        bareWrites / c1.bareAt.Sub(c0.bareAt).Seconds(),
			CPUSeconds:             u1.bare.CPU - u0.bare.CPU,
			PeakRSSBytes:           u1.bare.Peak,
			RSSAnonEndBytes:        u1.bare.Anon,
			RSSFileEndBytes:        u1.bare.File,
			RequestsPerSecond:      float64(u1.bareRequests-u0.bareRequests) / elapsed,
			InformerEventsPerWrite: (c1.bare.informer - c0.bare.informer) / bareWrites,
			WatchEventsPerWrite:    (c1.bare.watch - c0.bare.watch) / bareWrites,
		},
		CPURatio:     cpuRate / bareCPURate,
		PeakRSSRatio: float64(u1.exporter.Peak) / float64(u1.bare.Peak),
	}
}

// warnOffSchedule says when a client wrote at a rate off its schedule's:
// its writes failed, or the machine was too busy for it.
func warnOffSchedule(c cost) {
	for _, rate := range []float64{c.WritesPerSecond, c.Bare.WritesPerSecond} {
		if rate < 0.9*c.ScheduledWrites || rate > 1.1*c.ScheduledWrites {
			fmt.Printf("   %d probes: a client wrote %.1f writes/s, off the schedule's %.1f by more than 10%%: its writes failed, or the machine was too busy\n", c.Probes, rate, c.ScheduledWrites)
		}
	}
}

// terminatedWatchers reads kube-apiserver's count of the ConfigMap watches
// it ended because their clients did not keep up (or it could not deliver
// fast enough), -1 if it cannot.
func terminatedWatchers(ctx context.Context, client kubernetes.Interface) float64 {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return -1
	}
	families, err := exportertest.Parse(string(body))
	if err != nil {
		return -1
	}
	// None yet is 0: the series appears with the first.
	n, _ := exportertest.Sum(families, "apiserver_terminated_watchers_total", map[string]string{"group": "", "resource": "configmaps"})
	return n
}
