package main

// This file is the bench's one contact with the probe's insides: it runs a
// probe in process for the overhead runs, hears each marker write's send
// and its first arrival on each path, and reads which anomalies it counted.
// Everything else the bench knows of the exporter comes from its binary's
// /metrics or from the recorder.

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// probed is what an overhead run reads of its probe once it has stopped.
type probed struct {
	// registry holds the probe's series, for the p50 its histograms give
	// (what a user reads, set beside the exact one).
	registry prometheus.Gatherer
	// anomalies are its anomalies, by series.
	anomalies map[string]float64
}

// runProbe runs one probe on every path, writing into ns for d, and tells
// rec of its writes and their arrivals.
// With resume, the probe also runs resume checks (the default ages, a
// round every 10 s).
func runProbe(ctx context.Context, cluster *localcluster.Cluster, ns string, d time.Duration, rec *recorder, resume bool) (probed, error) {
	cfg := config.DefaultConfig()
	cfg.Name, cfg.Namespace = "bench", ns
	cfg.Interval = model.Duration(overheadInterval)
	cfg.Paths = config.KnownPaths // the exporter's etcd path beside the bare etcd watch
	cfg.Etcd.Endpoints = []string{cluster.EtcdURL}
	if resume {
		cfg.Resume = config.DefaultResumeConfig()
		cfg.Resume.Every = model.Duration(10 * time.Second)
	}
	reg := prometheus.NewRegistry()
	pm := metrics.NewProbe(reg)
	config := cluster.AdminConfig()
	config.Wrap(rec.onWire) // the probe's own wrappers go around it
	hook := &recorderHook{rec: rec, anomalies: map[string]float64{}}
	p, err := probe.New(cfg, probe.Options{
		Config: config, Metrics: pm, Sinks: []judge.Sink{hook},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Replica: "bench", OrphanAge: time.Hour,
	})
	if err != nil {
		return probed{}, err
	}
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	p.Run(runCtx)
	hook.mu.Lock()
	defer hook.mu.Unlock()
	return probed{registry: reg, anomalies: maps.Clone(hook.anomalies)}, nil
}

// recorderHook hears the probe's outcomes: each write just before it is
// sent (on the writer, before its request reaches the transport), each
// first arrival of a write on a path, and the anomalies.
type recorderHook struct {
	rec       *recorder
	mu        sync.Mutex
	anomalies map[string]float64
}

func (h *recorderHook) Outcome(o judge.Outcome) {
	switch o.Kind {
	case judge.Sent:
		h.rec.sentBy(writeKey{o.Marker, o.Seq}, o.Event, o.At)
	case judge.Arrived:
		h.rec.arrivedAt(exporterClient(o.Path.Name), writeKey{o.Marker, o.Seq}, o.At)
	}
	if a := o.Anomaly(); a != "" {
		h.mu.Lock()
		h.anomalies["watchprobe_"+a]++
		h.mu.Unlock()
	}
}
