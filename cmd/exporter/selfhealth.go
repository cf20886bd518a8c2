package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/procfs"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/selfhealth"
)

// selfhealthDefaultThreshold is --exporter.starved-threshold's default.
const selfhealthDefaultThreshold = 20 * time.Millisecond

// startMonitor starts the exporter's self-monitor with threshold, until
// ctx ends, recording what it sees in m (nil: nowhere).
func startMonitor(ctx context.Context, threshold time.Duration, m *metrics.SelfHealth) (*selfhealth.Monitor, error) {
	mon, err := selfhealth.New(threshold, m)
	if err != nil {
		return nil, fmt.Errorf("--exporter.starved-threshold: %w", err)
	}
	go mon.Run(ctx)
	return mon, nil
}

// cgroupCPU reads the throttling of the exporter's own cgroup; without a
// cgroup CPU controller it says so once and reads nothing.
func cgroupCPU(logger *slog.Logger) func() (metrics.CPUThrottling, bool) {
	fs, err := procfs.NewDefaultFS()
	var cg *selfhealth.CgroupCPU
	if err == nil {
		cg, err = selfhealth.FindCgroupCPU(fs, os.Getpid(), "/")
	}
	if err != nil {
		logger.Info("CPU throttling of the exporter's cgroup is not exported", "err", err)
		return func() (metrics.CPUThrottling, bool) { return metrics.CPUThrottling{}, false }
	}
	var logged atomic.Bool // scrapes may run at once
	return func() (metrics.CPUThrottling, bool) {
		t, err := cg.Read()
		if err != nil && logged.CompareAndSwap(false, true) {
			logger.Warn("reading the CPU throttling of the exporter's cgroup", "file", cg.Stat, "err", err)
		}
		return t, err == nil
	}
}
