package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// seriesMemory is the memory of two bare clients on the 100-probe load at
// the same time, one of them also keeping the exporter's series for its
// probes and observing into them (hack/bench/bare, built with the series
// tag): what the series alone add to a client that does the same work.
type seriesMemory struct {
	Probes            int   `json:"probes"`
	BarePeakRSSBytes  int64 `json:"bare_peak_rss_bytes"`
	BareAnonEndBytes  int64 `json:"bare_rss_anon_end_bytes"`
	BareFileEndBytes  int64 `json:"bare_rss_file_end_bytes"`
	SeriesPeakRSS     int64 `json:"with_series_peak_rss_bytes"`
	SeriesAnonEnd     int64 `json:"with_series_rss_anon_end_bytes"`
	SeriesFileEnd     int64 `json:"with_series_rss_file_end_bytes"`
	ExporterPeakRSS   int64 `json:"exporter_peak_rss_bytes"`
	SeriesAddedBytes  int64 `json:"series_added_peak_rss_bytes"`
	ExporterRestBytes int64 `json:"exporter_rest_peak_rss_bytes"`
}

// measureSeriesMemory runs the two bare clients for as long as a cost run
// lasts (start-up, three intervals and the window) and reads their peak
// RSS. exporterPeak is the exporter's on the same load, from its cost run.
func measureSeriesMemory(ctx context.Context, cluster *localcluster.Cluster, load costLoad, window time.Duration, exporterPeak int64) (seriesMemory, error) {
	probes, interval, updates := load.probes, load.interval, load.updates
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	cert, key, err := cluster.IssueServing()
	if err != nil {
		return seriesMemory{}, err
	}
	dir, err := os.MkdirTemp("", "watchprobe-bench-series-")
	if err != nil {
		return seriesMemory{}, err
	}
	defer os.RemoveAll(dir)
	plainBin, err := buildBare(dir)
	if err != nil {
		return seriesMemory{}, err
	}
	seriesBin, err := buildBare(dir, "series")
	if err != nil {
		return seriesMemory{}, err
	}
	var clients []*bareClient
	var proxies []*countingProxy
	defer func() {
		for _, c := range clients {
			c.stop() // through its proxy: it deletes its markers
		}
		for _, p := range proxies {
			p.Close()
		}
	}()
	addr, err := freeAddr()
	if err != nil {
		return seriesMemory{}, err
	}
	for _, run := range []struct {
		bin, ns string
		extra   []string
	}{{plainBin, "mem-bare", nil}, {seriesBin, "mem-series", []string{"-series.listen-address", addr}}} {
		if err := createProbeNamespaces(ctx, client, run.ns, probes); err != nil {
			return seriesMemory{}, err
		}
		proxy, err := newCountingProxy(cluster.APIServerURL, cluster.CAPEM(), cert, key)
		if err != nil {
			return seriesMemory{}, err
		}
		proxies = append(proxies, proxy)
		c, err := startBare(ctx, run.bin, proxy.Config(cluster.AdminConfig()), dir, run.ns, probes, interval, updates,
			append(run.extra, fmt.Sprintf("-namespace-per-probe=%t", !oneNamespace), "-wait-for-start")...)
		if err != nil {
			return seriesMemory{}, err
		}
		clients = append(clients, c)
	}
	for _, c := range clients {
		if err := c.start(nil); err != nil {
			return seriesMemory{}, err
		}
	}
	// As in a cost run: the window begins with a scrape of the exporter.
	time.Sleep(3*interval + 5*time.Second)
	if sumMetric("http://"+addr, "watchprobe_writes_total") == 0 {
		return seriesMemory{}, errors.New("the bare client with the exporter's series counted no write")
	}
	time.Sleep(max(window.Round(interval), interval))
	_, _, barePeak := procStats(clients[0].pid())
	_, _, seriesPeak := procStats(clients[1].pid())
	m := seriesMemory{Probes: probes, BarePeakRSSBytes: barePeak, SeriesPeakRSS: seriesPeak, ExporterPeakRSS: exporterPeak}
	m.BareAnonEndBytes, m.BareFileEndBytes = rssSplit(clients[0].pid())
	m.SeriesAnonEnd, m.SeriesFileEnd = rssSplit(clients[1].pid())
	m.SeriesAddedBytes = seriesPeak - barePeak
	m.ExporterRestBytes = exporterPeak - seriesPeak
	return m, nil
}
