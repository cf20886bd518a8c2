package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/watchprobe/watchprobe/internal/exportertest"
)

type soakSample struct {
	Seconds      float64 `json:"seconds"`
	RSSBytes     int64   `json:"rss_bytes"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	AnonBytes    int64   `json:"rss_anon_bytes"`
	FileBytes    int64   `json:"rss_file_bytes"`
	HeapBytes    float64 `json:"heap_inuse_bytes"`
	Writes       float64 `json:"writes"`
}

// soakEvery is how often the soak samples the exporter's memory.
const soakEvery = 30 * time.Second

// soak runs the exporter on the largest load for o.soak and samples its
// memory, to show whether it stays flat, then saves its heap profile.
func soak(o options) error {
	ctx := context.Background()
	exporterBin, cluster, err := setUp(ctx, o.binDir)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	r, err := newRig(cluster)
	if err != nil {
		return err
	}
	defer r.close()
	load := largestLoad
	if err := createProbeNamespaces(ctx, r.client, "soak", load.probes); err != nil {
		return err
	}
	exporter, err := r.startExporter(exporterBin, cluster.AdminConfig(), "soak", load, o.retention)
	if err != nil {
		return err
	}
	defer exporter.Stop()
	fmt.Printf(">> soak: %d probes, %.0f writes/s in all, for %s; a sample every %s\n", load.probes, load.writesPerSecond(), o.soak, soakEvery)
	var samples []soakSample
	start := time.Now()
	for {
		s := sampleSoak(exporter, time.Since(start))
		samples = append(samples, s)
		fmt.Printf("   %4.0f s: RSS %s (%s anonymous, %s file), peak %s, heap in use %s, %.0f writes\n", s.Seconds,
			mib(s.RSSBytes), mib(s.AnonBytes), mib(s.FileBytes), mib(s.PeakRSSBytes), mib(s.HeapBytes), s.Writes)
		if time.Since(start) >= o.soak {
			break
		}
		time.Sleep(soakEvery)
	}
	if err := memoryReport(exporter.URL, filepath.Join(filepath.Dir(o.out), "soak")); err != nil {
		fmt.Fprintln(os.Stderr, "bench: no heap profile:", err)
	}
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(samples, "", "  ")
	return os.WriteFile(o.out, append(data, '\n'), 0o644)
}

func sampleSoak(exporter *exportertest.Process, since time.Duration) soakSample {
	p := readProc(exporter.Cmd.Process.Pid)
	s := soakSample{Seconds: since.Seconds(), RSSBytes: p.RSS, PeakRSSBytes: p.Peak, AnonBytes: p.Anon, FileBytes: p.File}
	if families, err := exportertest.Scrape(exporter.URL); err == nil {
		s.HeapBytes, _ = exportertest.Sum(families, "go_memstats_heap_inuse_bytes", nil)
		s.Writes, _ = exportertest.Sum(families, "watchprobe_writes_total", nil)
	}
	return s
}
