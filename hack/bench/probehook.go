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
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// probed is what an overhead run reads of its probe once it has stopped.
type probed struct {
	// registry holds the probe's series, for the p50 its histograms give.
	registry prometheus.Gatherer
	// anomalies are its anomaly counters that rose, by series.
	anomalies map[string]float64
}

// runProbe runs one probe on every path, writing into ns for d, and tells
// rec of its writes and their arrivals.
func runProbe(ctx context.Context, cluster *localcluster.Cluster, ns string, d time.Duration, rec *recorder) (probed, error) {
	cfg := probe.DefaultConfig()
	cfg.Name, cfg.Namespace = "bench", ns
	cfg.Interval = model.Duration(overheadInterval)
	cfg.Paths = probe.KnownPaths // the exporter's etcd path beside the bare etcd watch
	cfg.Etcd.Endpoints = []string{cluster.EtcdURL}
	reg := prometheus.NewRegistry()
	pm := metrics.NewProbe(reg)
	config := cluster.AdminConfig()
	config.Wrap(rec.onWire) // the probe's own wrappers go around it
	p, err := probe.New(cfg, probe.Options{
		Config: config, Metrics: pm, Recorder: recorderHook{rec},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Replica: "bench", OrphanAge: time.Hour,
	})
	if err != nil {
		return probed{}, err
	}
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	p.Run(runCtx)
	rose, err := anomalies(pm.Anomalies())
	return probed{registry: reg, anomalies: rose}, err
}

// recorderHook passes the probe's word of its writes and their arrivals
// on to the recorder. The probe calls it under its lock: it only stores.
type recorderHook struct{ rec *recorder }

func (h recorderHook) Sent(marker string, seq uint64, event string, at time.Time) {
	h.rec.sentBy(writeKey{marker, seq}, event, at)
}

func (h recorderHook) Arrived(path, marker string, seq uint64, at time.Time) {
	h.rec.arrivedAt(exporterClient(path), writeKey{marker, seq}, at)
}

// anomalies reads the anomaly counters of g that count a fault and are not
// zero, as series.
func anomalies(g prometheus.Gatherer) (map[string]float64, error) {
	mfs, err := g.Gather()
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			var pairs []string
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
				if l.GetName() != "probe" && l.GetValue() != "" {
					pairs = append(pairs, l.GetName()+"="+strconv.Quote(l.GetValue()))
				}
			}
			if v := m.GetCounter().GetValue(); v != 0 && metrics.Fault(mf.GetName(), labels) {
				out[mf.GetName()+"{"+strings.Join(pairs, ",")+"}"] = v
			}
		}
	}
	return out, err
}
