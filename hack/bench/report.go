package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// results are the figures of one run, written as JSON; each phase's type
// sits beside the code that measures it.
type results struct {
	Machine  string      `json:"machine"`
	Overhead overheadRun `json:"overhead"`
	Load     *loadResult `json:"load,omitempty"`
	Cost     []cost      `json:"cost"`
	Scrape   scrapeCost  `json:"scrape"`
	// SeriesMemory is the peak RSS, on the 100-probe load, of a bare client,
	// of one that also keeps the exporter's series, and of the exporter.
	SeriesMemory *seriesMemory `json:"series_memory,omitempty"`
	// SeriesPerProbe is computed, not measured: the same in every run.
	SeriesPerProbe []seriesCount `json:"series_per_probe"`
}

// printTable prints the run's tables in Markdown, each with blank lines
// around it so that no line of text is taken for one of its rows.
func printTable(w io.Writer, r results) {
	fmt.Fprintf(w, "\nmachine: %s\n\n", r.Machine)
	printRun(w, "idle", r.Overhead)
	if l := r.Load; l != nil {
		fmt.Fprintf(w, "\nunder load: %.0f ConfigMap writes/s of churn from another process (target %.0f, %.0f failed)\n", l.ChurnPerSecond, l.ChurnTargetPerSecond, l.ChurnFailures)
		printRun(w, "under load", l.overheadRun)
	}
	printCost(w, r.Cost)
	s := r.Scrape
	fmt.Fprintf(w, "\n/metrics with %d probes: %d series, %d bytes (text), %d bytes (protobuf); mean %s, max %s over 10 scrapes; %.0fx the mean scrape of an empty registry (%s) in the same run\n",
		s.Probes, s.Series, s.BodyBytes, s.NativeProtobuf, ms(s.MeanSeconds), ms(s.MaxSeconds), s.VsEmpty, ms(s.EmptyMeanSeconds))
	if m := r.SeriesMemory; m != nil {
		printSeriesMemory(w, *m)
	}
}

// printRun prints what one overhead run measured.
func printRun(w io.Writer, title string, r overheadRun) {
	fmt.Fprintf(w, "\n%s: %d marker writes sent; seen by", title, r.Writes)
	for _, c := range slices.Sorted(maps.Keys(r.Seen)) {
		fmt.Fprintf(w, " %s %d,", c, r.Seen[c])
	}
	fmt.Fprintf(w, " the exporter's anomalies: %s (the tables hold only writes every client saw)\n", anomalyList(r.Anomalies))
	printLatency(w, title, r.Latency)
	printPreSend(w, title, r.PreSend)
	printReported(w, title, r.Reported)
}

// anomalyList lists the anomaly counters that rose, by series, or says none.
func anomalyList(rose map[string]float64) string {
	if len(rose) == 0 {
		return "none"
	}
	var out []string
	for _, series := range slices.Sorted(maps.Keys(rose)) {
		out = append(out, fmt.Sprintf("%s %.0f", series, rose[series]))
	}
	return strings.Join(out, ", ")
}

// printLatency prints one latency table: every client on the same writes,
// all of them first, then by event type.
func printLatency(w io.Writer, title string, rows []latency) {
	fmt.Fprintf(w, "\n| %s: client (same writes) | event | writes | p50 | p99 | p50 / bare apiserver watch | p50 - bare apiserver watch | p50 / etcd floor |\n", title)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, l := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %.3f | %+.2f ms | %.2f |\n", l.Client, eventOrAll(l.Event), l.Writes, ms(l.P50Seconds), ms(l.P99Seconds), l.P50VsBare, l.P50MinusBareSeconds*1000, l.P50VsEtcd)
	}
}

// printPreSend prints the time writes spent in the exporter and client-go
// before the transport, where the send stamp is taken: part of no latency.
func printPreSend(w io.Writer, title string, rows []delay) {
	ms3 := func(s float64) string { return fmt.Sprintf("%.3f ms", s*1000) }
	fmt.Fprintf(w, "\n| %s: write call to HTTP transport (before the send stamp) | writes | p50 | p99 | max |\n|---|---|---|---|---|\n", title)
	for _, d := range rows {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", eventOrAll(d.Event), d.Writes, ms3(d.P50Seconds), ms3(d.P99Seconds), ms3(d.MaxSeconds))
	}
}

func eventOrAll(event string) string {
	if event == "" {
		return "all"
	}
	return event
}

// printReported prints the p50 a user reads off the exporter's histograms
// beside the exact one of the same writes.
func printReported(w io.Writer, title string, rows []reportedP50) {
	fmt.Fprintf(w, "\n| %s: p50 as the exporter's histogram gives it | event | exact | from classic buckets | from native buckets |\n|---|---|---|---|---|\n", title)
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %.2f ms | %.2f ms (%+.0f%%) | %.2f ms (%+.0f%%) |\n", r.Path, r.Event, r.ExactSeconds*1000,
			r.ClassicBucket*1000, (r.ClassicBucket/r.ExactSeconds-1)*100, r.NativeBucket*1000, (r.NativeBucket/r.ExactSeconds-1)*100)
	}
}

// printCost prints the cost runs: the exporter's own figures, then beside
// the bare client's.
func printCost(w io.Writer, costs []cost) {
	fmt.Fprintln(w, "\n| probes | writes/s (schedule) | CPU ms per 1000 writes | CPU ms per write per path | peak RSS | RSS start → end | apiserver requests/s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, c := range costs {
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.3f | %s | %.1f → %s | %.2f |\n", c.Probes, c.ScheduledWrites, c.CPUPer1000Writes*1000,
			c.CPUPerWritePath*1000, mib(c.PeakRSSBytes), float64(c.RSSStartBytes)/(1<<20), mib(c.RSSEndBytes), c.RequestsPerSecond)
	}
	fmt.Fprintln(w, "\n| probes | writes/s counted (exporter / bare) | CPU s (exporter / bare) | CPU, exporter / bare | peak RSS (exporter / bare) | peak RSS, exporter / bare | bare events per write (informer / watch) | watches the apiserver ended (-1: unknown) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, c := range costs {
		fmt.Fprintf(w, "| %d | %.1f / %.1f | %.2f / %.2f | %.2f | %s / %s | %.2f | %.2f / %.2f | %.0f |\n", c.Probes, c.WritesPerSecond, c.Bare.WritesPerSecond,
			c.CPUSeconds, c.Bare.CPUSeconds, c.CPURatio, mib(c.PeakRSSBytes), mib(c.Bare.PeakRSSBytes), c.PeakRSSRatio,
			c.Bare.InformerEventsPerWrite, c.Bare.WatchEventsPerWrite, c.TerminatedWatches)
	}
}

// printCostLine prints one cost run as it ends.
func printCostLine(c cost) {
	fmt.Printf("   %3d probes: exporter %5.1f writes/s, %.2f CPU s, peak RSS %s (at the end %s anonymous + %s file); bare client %5.1f writes/s, %.2f CPU s, peak RSS %s (%s + %s); CPU %.2fx, peak RSS %.2fx; watches ended by the apiserver as unresponsive %.0f (-1: unknown)\n",
		c.Probes, c.WritesPerSecond, c.CPUSeconds, mib(c.PeakRSSBytes), mib(c.RSSAnonEndBytes), mib(c.RSSFileEndBytes),
		c.Bare.WritesPerSecond, c.Bare.CPUSeconds, mib(c.Bare.PeakRSSBytes), mib(c.Bare.RSSAnonEndBytes), mib(c.Bare.RSSFileEndBytes), c.CPURatio, c.PeakRSSRatio, c.TerminatedWatches)
}

func printSeriesMemory(w io.Writer, m seriesMemory) {
	fmt.Fprintf(w, "\n| peak RSS at %d probes, one sample each (anonymous + file-backed at the end) | bare client | bare client keeping the exporter's series | exporter (its cost run) |\n|---|---|---|---|\n", m.Probes)
	fmt.Fprintf(w, "| | %s (%s + %s) | %s (%s + %s) | %s (%s + %s) |\n", mib(m.BarePeakRSSBytes), mib(m.BareAnonEndBytes), mib(m.BareFileEndBytes),
		mib(m.SeriesPeakRSS), mib(m.SeriesAnonEnd), mib(m.SeriesFileEnd), mib(m.ExporterPeakRSS), mib(m.ExporterAnonEnd), mib(m.ExporterFileEnd))
	fmt.Fprintf(w, "\nthe bare client keeping the series had observed %.2f events per write into them at its scrape (about 2: every write on both paths; a write is counted when it returns, and its events often arrive first)\n", m.SeriesEventsRatio)
}

func printSeries(w io.Writer, counts []seriesCount) {
	fmt.Fprintln(w, "\n| series per probe (informer, watch) | text format (classic ingestion) | native ingestion (protobuf) |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, c := range counts {
		mode := "classic + native buckets (default)"
		if !c.ClassicHistograms {
			mode = "native only (--no-metrics.classic-histograms)"
		}
		fmt.Fprintf(w, "| %s | %d | %d |\n", mode, c.Text, c.Native)
	}
}

func ms(s float64) string { return fmt.Sprintf("%.2f ms", s*1000) }

func mib[N int64 | float64](b N) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
