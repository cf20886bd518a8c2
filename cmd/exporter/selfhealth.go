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
const selfhealthDefaultThreshold = 50 * time.Millisecond

// startMonitor starts the exporter's self-monitor with threshold, reading
// cgroup's throttling (nil: none) where the run-queue wait cannot be read,
// until ctx ends, recording what it sees in m (nil: nowhere).
func startMonitor(ctx context.Context, threshold time.Duration, cgroup *selfhealth.CgroupCPU, m *metrics.SelfHealth, logger *slog.Logger) (*selfhealth.Monitor, error) {
	mon, err := selfhealth.New(threshold, cgroup, m)
	if err != nil {
		return nil, fmt.Errorf("--exporter.starved-threshold: %w", err)
	}
	if why := mon.CPUWaitUnavailable(); why != "" {
		logger.Warn("the exporter's run-queue wait cannot be read: contention for the CPU by weight (a small CPU request on a busy node) is seen only as self-monitor wake-ups later than --exporter.starved-threshold, and a CPU limit's throttle through the cgroup's throttled time, which overstates it on many CPUs", "err", why)
	}
	go mon.Run(ctx)
	return mon, nil
}

// ownCgroup is the cgroup whose CPU limit applies to the exporter, nil
// without a cgroup CPU controller, which it says once.
func ownCgroup(logger *slog.Logger) *selfhealth.CgroupCPU {
	fs, err := procfs.NewDefaultFS()
	var cg *selfhealth.CgroupCPU
	if err == nil {
		cg, err = selfhealth.FindCgroupCPU(fs, os.Getpid(), "/")
	}
	if err != nil {
		logger.Info("the CPU throttling of the exporter's cgroup is not read", "err", err)
		return nil
	}
	return cg
}

// cgroupThrottling reads cg's throttling for the metrics at scrape time,
// nothing without a cgroup; a failure is logged once.
func cgroupThrottling(cg *selfhealth.CgroupCPU, logger *slog.Logger) func() (metrics.CPUThrottling, bool) {
	var logged atomic.Bool // scrapes may run at once
	return func() (metrics.CPUThrottling, bool) {
		if cg == nil {
			return metrics.CPUThrottling{}, false
		}
		t, err := cg.Read()
		if err != nil && logged.CompareAndSwap(false, true) {
			logger.Warn("reading the CPU throttling of the exporter's cgroup", "file", cg.Stat, "err", err)
		}
		return t, err == nil
	}
}
