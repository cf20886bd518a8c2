package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/watchprobe/watchprobe/internal/repotest"
)

// The tables `make bench` writes are what docs/performance.md shows
// (`make bench-docs`): each is a Markdown table with blank lines around it,
// so that no line of text is taken for one of its rows, and every row has
// its header's cells.
func TestBenchTablesAreMarkdown(t *testing.T) {
	run := overheadRun{
		Latency:   []latency{{Client: "bare apiserver watch", Writes: 3}, {Client: "exporter: watch", Event: "added", Writes: 1}},
		PreSend:   []delay{{Writes: 3}},
		Reported:  []reportedP50{{Path: "watch", Event: "added", ExactSeconds: 0.005}},
		Writes:    3,
		Seen:      map[string]int{"bare apiserver watch": 3},
		Anomalies: map[string]float64{`watchprobe_events_missed_total{path="watch"}`: 1},
	}
	r := results{
		Machine:        "2 CPUs",
		Overhead:       run,
		Load:           &loadResult{overheadRun: run},
		Cost:           []cost{{Probes: 1}, {Probes: 100}},
		SeriesMemory:   &seriesMemory{Probes: 100},
		SeriesPerProbe: []seriesCount{{ClassicHistograms: true}, {}},
	}
	var b bytes.Buffer
	printTable(&b, r)
	printSeries(&b, r.SeriesPerProbe)
	tables, problems := repotest.Tables(b.String())
	for _, p := range problems {
		t.Error(p)
	}
	if tables < 9 {
		t.Errorf("%d tables, want every table of a run (9):\n%s", tables, b.String())
	}
	if strings.Contains(b.String(), "map[") {
		t.Errorf("a Go map in the tables:\n%s", b.String())
	}
}
