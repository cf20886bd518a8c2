package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/nativehist"
	"github.com/watchprobe/watchprobe/internal/starve"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// starvedInterval is how often the exporter and the independent client of
// the self-health test write: each cycle is three writes.
const starvedInterval = time.Second

// starvedWrites is how many writes each side must have judged per path
// before a run is read: enough for a median and a 90th percentile.
const starvedWrites = 60

// starveRun is what one run of the self-health test read: the exporter's
// metrics and the independent client's latencies.
type starveRun struct {
	name     string
	families map[string]*dto.MetricFamily
	client   []time.Duration
}

// quantiles are a run's p50 and p90 on the exporter's path (its remaining,
// timed writes) and on the client.
func (r starveRun) quantiles(path string) (exporter, client [2]time.Duration) {
	var hs []*dto.Histogram
	for _, m := range r.families["watchprobe_event_latency_seconds"].GetMetric() {
		if label(m, "path") == path {
			hs = append(hs, m.GetHistogram())
		}
	}
	sorted := slices.Sorted(slices.Values(r.client))
	for i, q := range []float64{0.5, 0.9} {
		exporter[i] = time.Duration(nativehist.Quantile(q, hs...) * float64(time.Second))
		client[i] = sorted[int(q*float64(len(sorted)-1))]
	}
	return exporter, client
}

func (r starveRun) sum(name string, match map[string]string) float64 {
	v, _ := exportertest.Sum(r.families, name, match)
	return v
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// The exporter measures its own starvation, in a real CPU cgroup on the
// real control plane, and keeps it out of the cluster's figures. Three runs
// of the exporter beside an independent client that writes and watches
// markers of its own, unconstrained, on the same cluster at the same time:
// unconstrained; throttled by a CPU quota of 15m (cgroup v1
// cpu.cfs_quota_us), which stops it for most of each 100 ms period, far
// beyond the 50 ms threshold; and outweighed, at cpu.shares 10 (a 10m
// request) beside two busy processes, which no cgroup counter shows. What
// is asserted holds whatever the machine's load: under the quota some
// writes are unmeasurable (exporter_starved); in every run the latency
// histogram holds the observed writes only, never an unmeasurable one, and
// no write is judged twice; the quota throttles and the weight does not.
// How many writes each run found unmeasurable, and how the exporter's
// remaining p50 and p90 compare with the client's, are reported as
// measurements (hack/starvemeasure, docs/performance.md), not pass or
// fail: they depend on how busy the machine is.
//
// Every process of the test (the control plane, the client, the exporter
// and the busy ones) is in a cgroup of the test's own, with the most
// weight cgroup v1 gives, so that the other tests on the machine cannot
// starve the unconstrained run nor the client, and at most one CPU, so
// that the busy ones cannot starve the other tests.
func TestStarvedExporterUnmeasurable(t *testing.T) {
	if why := starve.Unavailable(); why != "" {
		t.Skipf("the test starves the exporter through cgroup v1's cpu controller, as root: %s", why)
	}
	top, err := starve.NewGroup(nil, fmt.Sprintf("watchprobe-selfhealth-%d", os.Getpid()))
	if err != nil {
		t.Fatalf("making the test's cgroup: %v", err)
	}
	t.Cleanup(func() {
		if err := top.Remove(); err != nil {
			t.Error(err)
		}
	})
	group := func(name string, shares int) *starve.Group {
		t.Helper()
		g, err := starve.NewGroup(top, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := g.Remove(); err != nil {
				t.Error(err)
			}
		})
		if err := g.SetShares(shares); err != nil {
			t.Fatal(err)
		}
		return g
	}
	if err := top.SetShares(262144); err != nil {
		t.Fatal(err)
	}
	// At most one CPU for all of it: with that weight the busy processes
	// would otherwise take both of the machine's cores from the tests that
	// run beside this one in `make test`. The exporter is outweighed inside
	// the test's cgroup all the same, and a quota on the parent throttles
	// no period of the exporter's own cgroup, which has none.
	if err := top.SetQuota(100*time.Millisecond, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The client and the unconstrained exporter alike, above the control
	// plane, whose work on each write they would otherwise wait behind.
	const weight = 10240
	cluster := group("cluster", 1024)
	// etcd's data on tmpfs: the cgroups share out CPU, not the disk, and a
	// busy disk would slow every write alike and end the test in etcd's
	// timeouts.
	dir, err := os.MkdirTemp("/dev/shm", "watchprobe-selfhealth-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := localcluster.StartForTest(t, localcluster.Options{Dir: dir})
	for _, pid := range []int{c.EtcdPID(), c.APIServerPID()} {
		if err := cluster.Add(pid); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = starve.Leave(pid) }) // the control plane stops after the cgroups go
	}
	kubeconfig := writeKubeconfig(t, c.AdminConfig())
	client := kubernetes.NewForConfigOrDie(c.AdminConfig())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	// run runs the exporter in a cgroup of its own from its first
	// instruction (it reads its cgroup as it starts), starves it by starve
	// once its paths are up (a starved start-up would only take longer),
	// and runs the client beside it until both have judged starvedWrites.
	run := func(name string, starving func(*testing.T, *starve.Group)) starveRun {
		t.Helper()
		ns := "starve-" + name
		localcluster.CreateNamespacesForTest(t, client, ns, ns+"-client")
		g := group(name, weight)
		e := startExporterIn(t, g, "--kubeconfig", kubeconfig, "--probe.namespace", ns, "--probe.replica", "starve",
			"--probe.interval", starvedInterval.String())
		defer e.Stop() // it deletes its markers
		if err := e.WaitPathsUp(60 * time.Second); err != nil {
			t.Fatal(err)
		}
		if starving != nil {
			starving(t, g)
		}
		cl, err := starve.StartClient(self, group(name+"-client", weight), kubeconfig, ns+"-client", starvedInterval)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Stop()
		// Read every 2 s, not faster: a scrape takes CPU from the exporter
		// it measures, and a starved one has little.
		// A bound on a starved run's progress, not a measurement: a
		// starved exporter still writes every few seconds.
		deadline := time.Now().Add(10 * time.Minute)
		for {
			select {
			case <-cl.Exited():
				t.Fatalf("%s: the independent client exited: %s", name, cl.Stderr())
			case <-e.Done():
				t.Fatalf("%s: the exporter exited", name)
			case <-time.After(2 * time.Second):
			}
			r := starveRun{name: name}
			for _, s := range cl.Samples() {
				r.client = append(r.client, s.Latency)
			}
			if r.families, err = exportertest.ScrapeNative(e.URL); err != nil {
				t.Fatal(err)
			}
			done := len(r.client) >= starvedWrites
			for _, path := range []string{metrics.PathInformer, metrics.PathWatch} {
				p := map[string]string{"path": path}
				done = done && r.sum("watchprobe_events_observed_total", p)+r.sum("watchprobe_events_unmeasurable_total", p) >= starvedWrites
			}
			if done {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not %d writes judged by the exporter and the client within 10 minutes (client: %d)", name, starvedWrites, len(r.client))
			}
		}
	}

	free := run("free", nil)
	if t.Failed() {
		return
	}
	throttled := run("quota", func(t *testing.T, g *starve.Group) {
		if err := g.SetQuota(1500*time.Microsecond, 100*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	})
	var busy *starve.Busy
	outweighed := run("shares", func(t *testing.T, g *starve.Group) {
		if err := g.SetShares(10); err != nil {
			t.Fatal(err)
		}
		if busy, err = starve.StartBusy(group("busy", 1024), 2); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(busy.Stop)
	})
	busy.Stop()

	for _, path := range []string{metrics.PathInformer, metrics.PathWatch} {
		p := map[string]string{"path": path}
		fe, fc := free.quantiles(path)
		for _, r := range []starveRun{free, throttled, outweighed} {
			starved := r.sum("watchprobe_events_unmeasurable_total", map[string]string{"path": path, "reason": metrics.UnmeasurableStarved})
			observed := r.sum("watchprobe_events_observed_total", p)
			var timed uint64
			for _, m := range r.families["watchprobe_event_latency_seconds"].GetMetric() {
				if label(m, "path") == path {
					timed += m.GetHistogram().GetSampleCount()
				}
			}
			acked := r.sum("watchprobe_writes_total", nil) - r.sum("watchprobe_write_errors_total", nil)
			judged := observed + starved + r.sum("watchprobe_events_missed_total", p) - r.sum("watchprobe_events_late_total", p)
			t.Logf("%s, %s path: %g writes acknowledged, %g observed, %g unmeasurable; the exporter's own CPU throttled in %g of %g periods, starved %.2f s",
				r.name, path, acked, observed, starved, r.sum("watchprobe_exporter_cpu_throttled_periods_total", nil),
				r.sum("watchprobe_exporter_cpu_periods_total", nil), r.sum("watchprobe_exporter_starved_seconds_total", nil))
			if r.name == throttled.name && starved == 0 {
				t.Errorf("%s: no write unmeasurable on the %s path while a quota stopped the exporter for most of each period", r.name, path)
			}
			if float64(timed) != observed {
				t.Errorf("%s: %d latency samples on the %s path for %g writes observed: the histogram must hold the timed writes only", r.name, timed, path, observed)
			}
			if judged > acked {
				t.Errorf("%s: %g verdicts on the %s path for %g writes acknowledged: a write counted twice", r.name, judged, path, acked)
			}
			if observed == 0 {
				continue
			}
			re, rc := r.quantiles(path)
			for i, q := range []string{"p50", "p90"} {
				t.Logf("measured: %s, %s path, %s: exporter %v, independent client %v (unconstrained: %v and %v)", r.name, path, q, re[i], rc[i], fe[i], fc[i])
			}
		}
	}
	if n := throttled.sum("watchprobe_exporter_cpu_throttled_periods_total", nil); n == 0 {
		t.Error("quota: the exporter's cgroup shows no throttled period")
	}
	if n := outweighed.sum("watchprobe_exporter_cpu_throttled_periods_total", nil); n != 0 {
		t.Errorf("shares: %g throttled periods without a quota", n)
	}
}

// startExporterIn starts the exporter binary in cgroup g from its first
// instruction, as a container's process starts in its pod's cgroup: a
// shell joins the cgroup and executes it.
func startExporterIn(t *testing.T, g *starve.Group, args ...string) *exporter {
	t.Helper()
	script := filepath.Join(t.TempDir(), "in-cgroup")
	writeFile(t, script, fmt.Sprintf("#!/bin/sh\necho $$ > %s/cgroup.procs && exec %s \"$@\"\n", g.Dir, exporterBin))
	if err := os.Chmod(script, 0o700); err != nil {
		t.Fatal(err)
	}
	return startBinary(t, script, nil, args...)
}
