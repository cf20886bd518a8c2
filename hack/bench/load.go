package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// loadResult is the overhead measured again while another process churns
// ConfigMaps on the same apiserver: what the paths add when the apiserver,
// etcd and the exporter compete for the CPU, as in a busy cluster.
type loadResult struct {
	ChurnTargetPerSecond float64 `json:"churn_target_writes_per_second"`
	ChurnPerSecond       float64 `json:"churn_writes_per_second"`
	ChurnFailures        float64 `json:"churn_failures"`
	overheadRun
	// Independent is a bare client in a process of its own, writing
	// markers in the same shape at the same rate at the same time, timed
	// from its own send stamps: other writes, but what an independent
	// client reads at that moment, p50 by event type.
	Independent map[string]float64 `json:"independent_bare_client_p50_seconds"`
	// InProcess is a bare client of the same shape inside the bench's
	// process, beside the probe: what the process's own load adds.
	InProcess map[string]float64 `json:"in_process_bare_client_p50_seconds"`
}

// underLoad runs the overhead measurement for d while hack/bench/churn
// writes churnRate ConfigMap writes per second in a namespace of its own,
// beside a bare client in its own process and one in the bench's.
func underLoad(ctx context.Context, cluster *localcluster.Cluster, d time.Duration, churnRate float64) (loadResult, error) {
	res := loadResult{ChurnTargetPerSecond: churnRate}
	r, err := newRig(cluster)
	if err != nil {
		return res, err
	}
	defer r.close()
	churn, err := startChurn(ctx, r, churnRate)
	if err != nil {
		return res, err
	}
	defer churn.stop()
	bare, err := startIndependent(ctx, r)
	if err != nil {
		return res, err
	}
	defer bare.stop()
	time.Sleep(5 * time.Second) // the apiserver's watch cache and etcd at their steady pace
	inCtx, stopInProcess := context.WithCancel(ctx)
	defer stopInProcess()
	inProcess, err := inProcessBare(inCtx, r.client, "bench-load-inproc", overheadInterval)
	if err != nil {
		return res, err
	}
	_ = bare.cmd.Process.Signal(syscall.SIGUSR2) // its samples from now on
	w0, f0 := churnCounts(churn)
	start := time.Now()
	res.overheadRun, err = overhead(ctx, cluster, d, "bench-load")
	res.InProcess = inProcess()
	w1, f1 := churnCounts(churn)
	res.ChurnPerSecond, res.ChurnFailures = (w1-w0)/time.Since(start).Seconds(), f1-f0
	res.Independent = map[string]float64{}
	for _, f := range strings.Fields(bare.ask()) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "p50_") {
			res.Independent[strings.TrimPrefix(k, "p50_")], _ = strconv.ParseFloat(v, 64)
		}
	}
	return res, err
}

// startChurn builds and starts hack/bench/churn, writing in a namespace of
// its own.
func startChurn(ctx context.Context, r *rig, churnRate float64) (*child, error) {
	const ns = "churn"
	if err := localcluster.CreateNamespaces(ctx, r.client, ns); err != nil {
		return nil, err
	}
	bin, err := buildHelper(r.dir, "churn")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(r.dir, "churn-kubeconfig")
	if err := r.cluster.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	return startChild(ctx, "the churn", bin, "-kubeconfig", kubeconfig, "-namespace", ns, "-rate", fmt.Sprint(churnRate))
}

// churnCounts asks the churn for the writes it made and those that failed.
func churnCounts(churn *child) (writes, failures float64) {
	_, _ = fmt.Sscanf(churn.ask(), "writes=%g failures=%g", &writes, &failures)
	return writes, failures
}

// startIndependent starts the bare client of one probe, in the overhead
// probe's shape and at its rate, timing its own writes.
func startIndependent(ctx context.Context, r *rig) (*bareClient, error) {
	const ns = "bench-load-bare"
	load := costLoad{probes: 1, interval: overheadInterval, updates: 1}
	if err := createProbeNamespaces(ctx, r.client, ns, load.probes); err != nil {
		return nil, err
	}
	bin, err := buildHelper(r.dir, "bare")
	if err != nil {
		return nil, err
	}
	return r.startBare(ctx, bin, r.cluster.AdminConfig(), ns, load, "-latency")
}
