// Command starvemeasure measures what CPU starvation does to the
// exporter's figures, as the self-health test (TestStarvedExporterUnmeasurable
// in cmd/exporter) sets it up but for longer and for any weight or limit:
// the exporter in a cgroup v1 CPU cgroup of its own, throttled by a quota
// or outweighed by two busy processes, an independent client beside it,
// everything under a parent cgroup of the highest weight. It prints, per
// case, the writes unmeasurable, the exporter's p50 and p90 of the rest
// beside the client's, its throttling, run-queue wait and CPU use: the
// table in docs/performance.md ("CPU starvation"). Run as root, from the
// repository's root:
//
//	go build -o /tmp/watchprobe ./cmd/exporter
//	go run ./hack/starvemeasure -exporter /tmp/watchprobe -cases free,quota15,request10,request100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/nativehist"
	"github.com/watchprobe/watchprobe/internal/starve"
)

func main() {
	starve.ClientMain()
	cases := flag.String("cases", "free,quota15,request10,request50,request100,request200", "comma-separated: free (no constraint), quota<m> (a CPU limit of m millicores), request<m> (the weight of a CPU request of m millicores beside two busy processes)")
	dur := flag.Duration("for", 30*time.Second, "how long each case writes")
	interval := flag.Duration("interval", time.Second, "the probe's and the client's interval (three writes each)")
	exporter := flag.String("exporter", "", "the exporter binary")
	binDir := flag.String("bin-dir", "bin", "directory holding kube-apiserver and etcd")
	flag.Parse()
	if err := run(strings.Split(*cases, ","), *dur, *interval, *exporter, *binDir); err != nil {
		fmt.Fprintln(os.Stderr, "starvemeasure:", err)
		os.Exit(1)
	}
}

// weight is the client's and the unconstrained exporter's cpu.shares, above
// the control plane's (1024), whose work on each write they would
// otherwise wait behind.
const weight = 10240

func run(cases []string, dur, interval time.Duration, exporter, binDir string) error {
	if exporter == "" {
		return fmt.Errorf("-exporter is required")
	}
	ctx := context.Background()
	top, err := starve.NewGroup(nil, fmt.Sprintf("watchprobe-starvemeasure-%d", os.Getpid()))
	if err != nil {
		return err
	}
	defer top.Remove()
	if err := top.SetShares(262144); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("/dev/shm", "watchprobe-starvemeasure-") // etcd off the disk
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cl, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir, Dir: dir})
	if err != nil {
		return err
	}
	defer cl.Stop()
	cg, err := starve.NewGroup(top, "cluster")
	if err != nil {
		return err
	}
	defer cg.Remove()
	for _, pid := range []int{cl.EtcdPID(), cl.APIServerPID()} {
		if err := cg.Add(pid); err != nil {
			return err
		}
		defer starve.Leave(pid)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cl.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	client := kubernetes.NewForConfigOrDie(cl.AdminConfig())
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Println("| case | unmeasurable (informer) | exporter p50 / p90 | client p50 / p90 | throttled periods | run-queue wait | exporter CPU |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for i, c := range cases {
		ns := fmt.Sprintf("starvemeasure-%d", i)
		if err := localcluster.CreateNamespaces(ctx, client, ns, ns+"-client"); err != nil {
			return err
		}
		line, err := measure(c, top, exporter, self, kubeconfig, ns, dur, interval)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		fmt.Println(line)
	}
	return nil
}

// measure runs one case and returns its row.
func measure(c string, top *starve.Group, exporter, self, kubeconfig, ns string, dur, interval time.Duration) (string, error) {
	g, err := starve.NewGroup(top, "exporter")
	if err != nil {
		return "", err
	}
	defer g.Remove()
	if err := g.SetShares(weight); err != nil {
		return "", err
	}
	script := filepath.Join(os.TempDir(), fmt.Sprintf("starvemeasure-%d", os.Getpid()))
	if err := os.WriteFile(script, fmt.Appendf(nil, "#!/bin/sh\necho $$ > %s/cgroup.procs && exec %s \"$@\"\n", g.Dir, exporter), 0o700); err != nil {
		return "", err
	}
	defer os.Remove(script)
	e, err := exportertest.Start(script, nil, os.Stderr, "--kubeconfig", kubeconfig, "--probe.namespace", ns,
		"--probe.replica", "starvemeasure", "--probe.interval", interval.String(), "--log.level", "warn")
	if err != nil {
		return "", err
	}
	defer e.Stop()
	if err := e.WaitPathsUp(2 * time.Minute); err != nil {
		return "", err
	}
	var m int
	switch {
	case c == "free":
	case strings.HasPrefix(c, "quota"):
		if _, err := fmt.Sscanf(c, "quota%d", &m); err != nil {
			return "", err
		}
		if err := g.SetQuota(time.Duration(m)*100*time.Microsecond, 100*time.Millisecond); err != nil {
			return "", err
		}
	case strings.HasPrefix(c, "request"):
		if _, err := fmt.Sscanf(c, "request%d", &m); err != nil {
			return "", err
		}
		if err := g.SetShares(starve.SharesOfRequest(m)); err != nil {
			return "", err
		}
		bg, err := starve.NewGroup(top, "busy")
		if err != nil {
			return "", err
		}
		defer bg.Remove()
		b, err := starve.StartBusy(bg, 2)
		if err != nil {
			return "", err
		}
		defer b.Stop()
	default:
		return "", fmt.Errorf("unknown case %q", c)
	}
	clg, err := starve.NewGroup(top, "client")
	if err != nil {
		return "", err
	}
	defer clg.Remove()
	if err := clg.SetShares(weight); err != nil {
		return "", err
	}
	before, err := exportertest.ScrapeNative(e.URL)
	if err != nil {
		return "", err
	}
	cpu0 := processCPU(e.Cmd.Process.Pid)
	client, err := starve.StartClient(self, clg, kubeconfig, ns+"-client", interval)
	if err != nil {
		return "", err
	}
	time.Sleep(dur)
	client.Stop()
	cpu := processCPU(e.Cmd.Process.Pid) - cpu0
	after, err := exportertest.ScrapeNative(e.URL)
	if err != nil {
		return "", err
	}
	var lat []time.Duration
	for _, s := range client.Samples() {
		lat = append(lat, s.Latency)
	}
	slices.Sort(lat)
	delta := func(name string, match map[string]string) float64 {
		a, _ := exportertest.Sum(after, name, match)
		b, _ := exportertest.Sum(before, name, match)
		return a - b
	}
	inf := map[string]string{"path": "informer"}
	var hs []*dto.Histogram
	for _, m := range after["watchprobe_event_latency_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "path" && l.GetValue() == "informer" {
				hs = append(hs, m.GetHistogram())
			}
		}
	}
	ms := func(s float64) string { return fmt.Sprintf("%.2f", s*1000) }
	q := func(p float64) string {
		if len(lat) == 0 {
			return "-"
		}
		return ms(lat[int(p*float64(len(lat)-1))].Seconds())
	}
	starved := delta("watchprobe_events_unmeasurable_total", map[string]string{"path": "informer", "reason": "exporter_starved"})
	return fmt.Sprintf("| %s | %.0f of %.0f | %s / %s ms | %s / %s ms | %.0f of %.0f | %.0f ms/s | %.1f millicores |", c,
		starved, starved+delta("watchprobe_events_observed_total", inf),
		ms(nativehist.Quantile(0.5, hs...)), ms(nativehist.Quantile(0.9, hs...)), q(0.5), q(0.9),
		delta("watchprobe_exporter_cpu_throttled_periods_total", nil), delta("watchprobe_exporter_cpu_periods_total", nil),
		1000*delta("watchprobe_exporter_cpu_wait_seconds_total", nil)/dur.Seconds(), 1000*cpu.Seconds()/dur.Seconds()), nil
}

// processCPU is the CPU time process pid has used, from /proc.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var user, system int64
	fmt.Sscan(f[11], &user)
	fmt.Sscan(f[12], &system)
	return time.Duration(user+system) * 10 * time.Millisecond // USER_HZ, 100 on Linux
}
