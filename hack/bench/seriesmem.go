package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"

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

// measureSeriesMemory runs the two bare clients on the exporter's schedule
// in its cost run (exporter), for as long as that run lasts: the exporter
// had written for about two intervals when the bare client of the cost run
// began, three intervals and 5 s before the window. The series variant is
// scraped when the exporter was, at the start of the window.
func measureSeriesMemory(ctx context.Context, cluster *localcluster.Cluster, load costLoad, window time.Duration, exporter cost) (seriesMemory, error) {
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
		proxy, err := clientPlace(ctx, cluster, client, cert, key, run.ns, probes)
		if err != nil {
			return seriesMemory{}, err
		}
		proxies = append(proxies, proxy)
		c, err := startBare(ctx, run.bin, proxy.Config(cluster.AdminConfig()), dir, run.ns, probes, interval, updates,
			append(run.extra, "-namespace-per-probe", "-wait-for-start")...)
		if err != nil {
			return seriesMemory{}, err
		}
		clients = append(clients, c)
	}
	for _, c := range clients {
		if err := c.start(exporter.phases); err != nil {
			return seriesMemory{}, err
		}
	}
	time.Sleep(2*interval + 3*interval + 5*time.Second)
	url := "http://" + addr
	writes, observed := sumMetric(url, "watchprobe_writes_total"), sumMetric(url, "watchprobe_events_observed_total")
	if writes == 0 {
		return seriesMemory{}, fmt.Errorf("the bare client keeping the exporter's series counted no write")
	}
	time.Sleep(max(window.Round(interval), interval))
	_, _, barePeak := procStats(clients[0].pid())
	_, _, seriesPeak := procStats(clients[1].pid())
	m := seriesMemory{Probes: probes, BarePeakRSSBytes: barePeak, SeriesPeakRSS: seriesPeak,
		ExporterPeakRSS: exporter.PeakRSSBytes, ExporterAnonEnd: exporter.RSSAnonEndBytes, ExporterFileEnd: exporter.RSSFileEndBytes,
		SeriesEventsRatio: observed / writes}
	m.BareAnonEndBytes, m.BareFileEndBytes = rssSplit(clients[0].pid())
	m.SeriesAnonEnd, m.SeriesFileEnd = rssSplit(clients[1].pid())
	return m, nil
}
