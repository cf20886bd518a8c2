package main

import (
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/watchprobe/watchprobe/internal/exportertest"
)

type scrapeCost struct {
	Probes      int     `json:"probes"`
	MeanSeconds float64 `json:"mean_seconds"`
	MaxSeconds  float64 `json:"max_seconds"`
	// EmptyMeanSeconds is the mean scrape of an empty registry served by
	// promhttp in the bench process over loopback, in the same run: the
	// fixed cost of a scrape, to which the exporter's is a ratio.
	EmptyMeanSeconds float64 `json:"empty_registry_mean_seconds"`
	VsEmpty          float64 `json:"mean_vs_empty_registry"`
	BodyBytes        int     `json:"body_bytes"`
	Series           int     `json:"series"`
	NativeProtobuf   int     `json:"protobuf_body_bytes"`
}

// scrapes is how many scrapes each mean is taken over.
const scrapes = 10

// measureScrape times scrapes of the exporter at url, which runs probes,
// and of an empty registry.
func measureScrape(url string, probes int) scrapeCost {
	sc := scrapeCost{Probes: probes}
	for range scrapes {
		start := time.Now()
		_, body, _ := exportertest.Get(url+"/metrics", "")
		d := time.Since(start).Seconds()
		sc.MeanSeconds += d / scrapes
		sc.MaxSeconds = max(sc.MaxSeconds, d)
		sc.BodyBytes = len(body)
		sc.Series = strings.Count(body, "\n") - strings.Count(body, "\n#")
	}
	_, protobuf, _ := exportertest.Get(url+"/metrics", "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	sc.NativeProtobuf = len(protobuf)
	empty := httptest.NewServer(promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{}))
	defer empty.Close()
	for range scrapes {
		start := time.Now()
		_, _, _ = exportertest.Get(empty.URL, "")
		sc.EmptyMeanSeconds += time.Since(start).Seconds() / scrapes
	}
	sc.VsEmpty = sc.MeanSeconds / sc.EmptyMeanSeconds
	return sc
}
