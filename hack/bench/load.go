package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

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
// writes churnRate ConfigMap writes per second in a namespace of its own.
func underLoad(ctx context.Context, cluster *localcluster.Cluster, d time.Duration, churnRate float64) (loadResult, error) {
	res := loadResult{ChurnTargetPerSecond: churnRate}
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	const churnNS = "churn"
	if err := createNamespace(ctx, client, churnNS); err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "watchprobe-bench-churn-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	bin, err := buildHelper(dir, "churn")
	if err != nil {
		return res, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		return res, err
	}
	churn, err := startChild(ctx, "the churn", bin, "-kubeconfig", kubeconfig, "-namespace", churnNS, "-rate", fmt.Sprint(churnRate))
	if err != nil {
		return res, err
	}
	defer churn.stop()
	const bareNS = "bench-load-bare"
	if err := createNamespace(ctx, client, bareNS); err != nil {
		return res, err
	}
	bareBin, err := buildBare(dir)
	if err != nil {
		return res, err
	}
	bare, err := startBare(ctx, bareBin, cluster.AdminConfig(), dir, bareNS, 1, overheadInterval, 1, "-latency")
	if err != nil {
		return res, err
	}
	defer bare.stop()
	time.Sleep(5 * time.Second) // the apiserver's watch cache and etcd at their steady pace
	inCtx, stopInProcess := context.WithCancel(ctx)
	defer stopInProcess()
	inProcess, err := inProcessBare(inCtx, client, "bench-load-inproc", overheadInterval)
	if err != nil {
		return res, err
	}
	_ = bare.cmd.Process.Signal(syscall.SIGUSR2) // its samples from now on
	var w0, w1, f0, f1 float64
	_, _ = fmt.Sscanf(churn.ask(), "writes=%g failures=%g", &w0, &f0)
	start := time.Now()
	res.overheadRun, err = overhead(ctx, cluster, d, "bench-load")
	res.InProcess = inProcess()
	_, _ = fmt.Sscanf(churn.ask(), "writes=%g failures=%g", &w1, &f1)
	res.ChurnPerSecond, res.ChurnFailures = (w1-w0)/time.Since(start).Seconds(), f1-f0
	res.Independent = map[string]float64{}
	for _, f := range strings.Fields(bare.ask()) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "p50_") {
			res.Independent[strings.TrimPrefix(k, "p50_")], _ = strconv.ParseFloat(v, 64)
		}
	}
	return res, err
}
