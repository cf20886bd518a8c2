package main

import (
	"context"
	"fmt"
	"time"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// seriesMemory is the peak RSS of two bare clients on the 100-probe load
// side by side, one of them also keeping the exporter's series for its
// probes, observing into them and scraped once (hack/bench/bare, built with
// the series tag), beside the exporter's in its cost run on that load. One
// sample each: a peak moves with where the GC's sawtooth stands.
type seriesMemory struct {
	Probes           int   `json:"probes"`
	BarePeakRSSBytes int64 `json:"bare_peak_rss_bytes"`
	BareAnonEndBytes int64 `json:"bare_rss_anon_end_bytes"`
	BareFileEndBytes int64 `json:"bare_rss_file_end_bytes"`
	SeriesPeakRSS    int64 `json:"with_series_peak_rss_bytes"`
	SeriesAnonEnd    int64 `json:"with_series_rss_anon_end_bytes"`
	SeriesFileEnd    int64 `json:"with_series_rss_file_end_bytes"`
	ExporterPeakRSS  int64 `json:"exporter_peak_rss_bytes"`
	ExporterAnonEnd  int64 `json:"exporter_rss_anon_end_bytes"`
	ExporterFileEnd  int64 `json:"exporter_rss_file_end_bytes"`
	// SeriesEventsRatio is the events observed into the series per write
	// counted, at the scrape: about 2, every write on both paths.
	SeriesEventsRatio float64 `json:"with_series_events_per_write"`
}

// measureSeriesMemory runs the two bare clients on the largest load, on the
// schedule of the exporter's cost run on it (exporter), for as long as that
// run lasts: the exporter had written for about two intervals when the
// bare client of the cost run began, three intervals and 5 s before the
// window. The series variant is scraped when the exporter was, at the
// start of the window.
func measureSeriesMemory(ctx context.Context, cluster *localcluster.Cluster, window time.Duration, exporter cost) (seriesMemory, error) {
	load := largestLoad
	r, err := newRig(cluster)
	if err != nil {
		return seriesMemory{}, err
	}
	defer r.close()
	addr, err := exportertest.FreeAddr()
	if err != nil {
		return seriesMemory{}, err
	}
	var clients []*bareClient
	for _, variant := range []struct {
		ns    string
		tags  []string
		extra []string
	}{{"mem-bare", nil, nil}, {"mem-series", []string{"series"}, []string{"-series.listen-address", addr}}} {
		bin, err := buildHelper(r.dir, "bare", variant.tags...)
		if err != nil {
			return seriesMemory{}, err
		}
		proxy, err := r.place(ctx, variant.ns, load.probes)
		if err != nil {
			return seriesMemory{}, err
		}
		defer proxy.Close()
		c, err := r.startBare(ctx, bin, proxy.Config(cluster.AdminConfig()), variant.ns, load, append(variant.extra, "-wait-for-start")...)
		if err != nil {
			return seriesMemory{}, err
		}
		defer c.stop() // through its proxy: it deletes its markers
		clients = append(clients, c)
	}
	for _, c := range clients {
		if err := c.start(exporter.phases); err != nil {
			return seriesMemory{}, err
		}
	}
	time.Sleep(2*load.interval + 3*load.interval + 5*time.Second)
	families, err := exportertest.Scrape("http://" + addr)
	if err != nil {
		return seriesMemory{}, err
	}
	writes, _ := exportertest.Sum(families, "watchprobe_writes_total", nil)
	observed, _ := exportertest.Sum(families, "watchprobe_events_observed_total", nil)
	if writes == 0 {
		return seriesMemory{}, fmt.Errorf("the bare client keeping the exporter's series counted no write")
	}
	time.Sleep(max(window.Round(load.interval), load.interval))
	bare, series := readProc(clients[0].pid()), readProc(clients[1].pid())
	return seriesMemory{Probes: load.probes,
		BarePeakRSSBytes: bare.Peak, BareAnonEndBytes: bare.Anon, BareFileEndBytes: bare.File,
		SeriesPeakRSS: series.Peak, SeriesAnonEnd: series.Anon, SeriesFileEnd: series.File,
		ExporterPeakRSS: exporter.PeakRSSBytes, ExporterAnonEnd: exporter.RSSAnonEndBytes, ExporterFileEnd: exporter.RSSFileEndBytes,
		SeriesEventsRatio: observed / writes}, nil
}
