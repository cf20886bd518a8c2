package main

import (
	"context"
	"fmt"
	"path/filepath"
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
}

// underLoad runs the overhead measurement for d while hack/bench/churn
// writes churnRate ConfigMap writes per second in a namespace of its own.
func underLoad(ctx context.Context, cluster *localcluster.Cluster, d time.Duration, churnRate float64, resume bool) (loadResult, error) {
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
	time.Sleep(5 * time.Second) // the apiserver's watch cache and etcd at their steady pace
	w0, f0 := churnCounts(churn)
	start := time.Now()
	res.overheadRun, err = overhead(ctx, cluster, d, "bench-load", resume)
	w1, f1 := churnCounts(churn)
	res.ChurnPerSecond, res.ChurnFailures = (w1-w0)/time.Since(start).Seconds(), f1-f0
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
