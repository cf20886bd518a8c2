package main

import (
	"bytes"
	"strings"
	"testing"
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
	lines := strings.Split(b.String(), "\n")
	tables, cells := 0, 0
	for i, l := range lines {
		inTable := strings.HasPrefix(l, "|")
		prevInTable := i > 0 && strings.HasPrefix(lines[i-1], "|")
		switch {
		case inTable && !prevInTable:
			tables++
			cells = strings.Count(l, "|")
			if i > 0 && lines[i-1] != "" {
				t.Errorf("line %d: a table right after text %q", i+1, lines[i-1])
			}
		case inTable && strings.Count(l, "|") != cells:
			t.Errorf("line %d: %d cells, its header %d: %s", i+1, strings.Count(l, "|")-1, cells-1, l)
		case !inTable && prevInTable && l != "":
			t.Errorf("line %d: text right after a table: %q", i+1, l)
		}
	}
	if tables < 9 {
		t.Errorf("%d tables, want every table of a run (9):\n%s", tables, b.String())
	}
	if strings.Contains(b.String(), "map[") {
		t.Errorf("a Go map in the tables:\n%s", b.String())
	}
}
