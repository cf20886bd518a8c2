package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/model"

	"github.com/watchprobe/watchprobe/pkg/agent"
	"github.com/watchprobe/watchprobe/pkg/check"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// writeText writes the report for a person: per probe a table with a
// column per path.
func writeText(w io.Writer, r *check.Report) error {
	var b strings.Builder
	server := r.Server
	if r.ServerVersion != "" {
		server += " (kube-apiserver " + r.ServerVersion + ")"
	}
	fmt.Fprintf(&b, "watchprobe check against %s (replica %s): %d probe(s), %s\n",
		server, r.Replica, len(r.Probes), time.Duration(r.DurationSeconds*float64(time.Second)).Round(100*time.Millisecond))
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	obj := fmt.Sprintf("objective: at least %s of the events on each path within %s, at most %d anomalies per path",
		check.Percent(r.Objective.Target), seconds(r.Objective.LatencySeconds), r.Objective.AllowedAnomalies)
	for _, pr := range r.Probes {
		fmt.Fprintf(&b, "\nprobe %s (%s in %s, interval %s, deadline %s): %d cycles judged, %d successful; %d writes, %d failed, %s\n",
			pr.Name, pr.Kind, pr.Namespace, seconds(pr.IntervalSeconds), seconds(pr.DeadlineSeconds), pr.Cycles, pr.SuccessfulCycles, pr.Writes, pr.WriteErrors,
			refusedText(pr.WritesRefused))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		row := func(name string, cell func(p check.PathReport) string) {
			cells := []string{"  " + name}
			for _, p := range pr.Paths {
				cells = append(cells, cell(p))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		row("", func(p check.PathReport) string { return p.Label() })
		for _, q := range []struct {
			name string
			get  func(*check.LatencySummary) float64
		}{
			{"latency p50", func(l *check.LatencySummary) float64 { return l.P50 }},
			{"latency p90", func(l *check.LatencySummary) float64 { return l.P90 }},
			{"latency p99", func(l *check.LatencySummary) float64 { return l.P99 }},
			{"latency max", func(l *check.LatencySummary) float64 { return l.Max }},
		} {
			row(q.name, func(p check.PathReport) string {
				if p.Latency == nil {
					return "-"
				}
				return secs(q.get(p.Latency))
			})
		}
		row("observed", func(p check.PathReport) string { return fmt.Sprint(p.Observed) })
		row("within "+seconds(r.Objective.LatencySeconds).String(), func(p check.PathReport) string {
			if p.Ratio == nil {
				return "-"
			}
			return fmt.Sprintf("%d/%d (%s)", p.WithinObjective, p.Expected, check.Percent(*p.Ratio))
		})
		for _, reason := range check.MissedReasons {
			row("missed "+reason, func(p check.PathReport) string { return fmt.Sprint(p.Missed[reason]) })
		}
		for _, reason := range check.MissedReasons {
			row("lost "+reason, func(p check.PathReport) string { return fmt.Sprint(p.Lost[reason]) })
		}
		row("late", func(p check.PathReport) string { return fmt.Sprint(p.Late) })
		for _, k := range check.PathCounts {
			row(strings.ReplaceAll(k, "_", " "), func(p check.PathReport) string { return fmt.Sprint(p.Counts[k]) })
		}
		row("refused", func(p check.PathReport) string { return cmp.Or(p.Refused, "-") })
		row("watch ends", func(p check.PathReport) string { return nonZero(p.WatchEnds, check.EndReasons) })
		row("relists", func(p check.PathReport) string { return nonZero(p.Relists, check.RelistReasons) })
		if slices.ContainsFunc(pr.Paths, func(p check.PathReport) bool { return p.Resume != nil }) {
			row("resume window", func(p check.PathReport) string {
				if p.Resume == nil || p.Resume.WindowSeconds == nil {
					return "-"
				}
				return model.Duration(seconds(*p.Resume.WindowSeconds)).String()
			})
			row("resume checks", func(p check.PathReport) string {
				if p.Resume == nil {
					return "-"
				}
				counts := map[string]int64{}
				for _, o := range metrics.ResumeOutcomes {
					counts[o] = p.Resume.Count(o)
				}
				return nonZero(counts, metrics.ResumeOutcomes)
			})
		}
		row("objective", func(p check.PathReport) string {
			switch {
			case !p.OK:
				return "FAILS"
			case p.Expected == 0:
				return "owed nothing yet"
			}
			return "holds"
		})
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, c := range pr.Controllers {
			fmt.Fprintf(&b, "  controller %s: %s\n", c.Controller, controllerLine(c))
		}
		for _, f := range pr.Freshness {
			fmt.Fprintf(&b, "  freshness %s on %s: %s\n", f.Resource, cmp.Or(f.APIServer, "the load balancer"), freshnessLine(f))
		}
		for _, s := range pr.StaleReads {
			fmt.Fprintf(&b, "  reads on %s: %d, stale %s\n", cmp.Or(s.APIServer, "the load balancer"), s.Reads, nonZero(s.Kinds, metrics.StaleKinds))
		}
		for _, w := range pr.WatchList {
			fmt.Fprintf(&b, "  WatchList %s on %s: %s\n", w.Resource, cmp.Or(w.APIServer, "the load balancer"), watchListLine(w))
		}
	}
	if r.Agents != nil {
		if err := writeAgents(&b, r.Agents); err != nil {
			return err
		}
	}
	b.WriteString("\n")
	if r.OK {
		fmt.Fprintf(&b, "verdict: the objective holds (%s)\n", obj)
	} else {
		fmt.Fprintf(&b, "verdict: the objective does NOT hold (%s):\n", obj)
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  - %s\n", p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// agentRowsOK is how many ok nodes the text report lists: on a large
// cluster the nodes to look at would drown among them; the JSON lists all.
const agentRowsOK = 20

// writeAgents writes the node agents' section: a row per node, those not
// ok first.
func writeAgents(b *strings.Builder, a *check.AgentsReport) error {
	t := a.Totals
	if t.Nodes == 0 {
		fmt.Fprintf(b, "\nnode agents in %s: none (no Lease labelled %s=%s)\n", a.Namespace, agent.LabelComponent, agent.ComponentAgent)
		return nil
	}
	fmt.Fprintf(b, "\nnode agents in %s: %d nodes, %d ok, %d degraded, %d stale, %d unreadable\n", a.Namespace, t.Nodes, t.OK, t.Degraded, t.Stale, t.Unreadable)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\tzone\tverdict\thealthy\twrites\twrite errors\tmissed\tlost\tstalls\tstream ends\trelists\tunmeasurable\tp50\tp90\tmax\tbehind")
	shown := 0
	var unreadable []check.AgentReport
	for _, n := range a.Nodes {
		if n.Verdict == check.AgentOK {
			if shown == agentRowsOK {
				continue
			}
			shown++
		}
		if n.Verdict == check.AgentUnreadable {
			unreadable = append(unreadable, n)
		}
		lat := []string{"-", "-", "-"}
		if l := n.Latency; l != nil {
			lat = []string{secs(l.P50), secs(l.P90), secs(l.Max)}
		}
		behind := "-"
		if n.BehindSeconds != nil {
			behind = seconds(*n.BehindSeconds).String()
		}
		healthy := "no"
		if n.Healthy {
			healthy = "yes"
		}
		cells := []string{"  " + n.Node, cmp.Or(n.Zone, "-"), n.Verdict, healthy}
		for _, c := range []uint64{n.Writes, n.WriteErrors, n.Missed, n.Lost, n.Stalls, n.StreamEnds, n.Relists, n.Unmeasurable} {
			cells = append(cells, fmt.Sprint(c))
		}
		cells = append(cells, lat...)
		fmt.Fprintln(tw, strings.Join(append(cells, behind), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if more := t.OK - shown; more > 0 {
		fmt.Fprintf(b, "  and %d more ok nodes (the JSON report lists every node)\n", more)
	}
	for _, n := range a.Nodes {
		if n.Verdict == check.AgentDegraded && n.WatchConn != "" {
			fmt.Fprintf(b, "  %s watch connection: %s\n", n.Node, n.WatchConn)
		}
	}
	for _, n := range unreadable {
		fmt.Fprintf(b, "  %s unreadable: %s\n", n.Node, n.Error)
	}
	return nil
}

// freshnessLine is one line of a resource's freshness checks.
func freshnessLine(f check.FreshnessReport) string {
	line := fmt.Sprintf("%d of %d fresh", f.Fresh, f.Checks)
	if f.MaxSeconds != nil {
		line += ", max " + secs(*f.MaxSeconds)
	}
	if fb := nonZero(f.Fallbacks, metrics.FallbackReasons); fb != "-" {
		line += ", fell back: " + fb
	}
	if e := nonZero(f.Errors, metrics.FreshnessErrorReasons); e != "-" {
		line += ", failed: " + e
	}
	if q := nonZero(f.Queued, metrics.QueuedReasons); q != "-" {
		line += ", queued (the exporter's priority level): " + q
	}
	if u := nonZero(f.Uncached, metrics.UncachedReasons); u != "-" {
		line += ", not checked, no watch cache: " + u
	}
	if f.Stuck {
		line += ", STUCK"
	}
	return line
}

// watchListLine is one line of a resource's WatchList syncs.
func watchListLine(w check.WatchListReport) string {
	parts := []string{fmt.Sprintf("%d of %d synced", w.Synced, w.Syncs)}
	if w.MaxSeconds != nil {
		parts = append(parts, "max "+secs(*w.MaxSeconds))
	}
	for _, c := range []struct {
		what   string
		counts map[string]int64
		order  []string
	}{
		{"no end bookmark within the bound", w.Missed, metrics.WatchListMissedReasons},
		{"refused", w.Refused, metrics.WatchListRefusedReasons},
		{"failed", w.Errors, metrics.FreshnessErrorReasons},
		{"queued", w.Queued, metrics.QueuedReasons},
	} {
		if n := nonZero(c.counts, c.order); n != "-" {
			parts = append(parts, c.what+": "+n)
		}
	}
	if w.Stuck {
		parts = append(parts, "STUCK")
	}
	return strings.Join(parts, ", ")
}

// controllerLine is one line of how a controller answered the probe's
// changes.
func controllerLine(c check.ControllerReport) string {
	line := fmt.Sprintf("%d of %d changes answered", c.Reacted, c.Changes)
	if c.Latency != nil {
		line += fmt.Sprintf(", reaction p50 %s p99 %s max %s", secs(c.Latency.P50), secs(c.Latency.P99), secs(c.Latency.Max))
	}
	if c.Share != nil {
		line += fmt.Sprintf(" (controller's share p50 %s)", secs(c.Share.P50))
	}
	line += fmt.Sprintf("; missed %d, late %d, lost %d", c.Missed, c.Late, c.Lost)
	if c.ChangeErrors > 0 {
		line += fmt.Sprintf("; %d changes failed", c.ChangeErrors)
	}
	if !c.OK {
		line += ": FAILS"
	}
	return line
}

// nonZero lists the counts that are not zero, known keys first, as
// "timeout 2, eof 1"; "-" when all are.
func nonZero(m map[string]int64, order []string) string {
	keys := slices.Clone(order)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var parts []string
	for _, k := range keys {
		if m[k] != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// secs shows seconds at a precision a person reads: 812µs, 2.41ms, 1.25s.
func secs(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", s*1e3)
	case d < time.Second:
		return fmt.Sprintf("%.1fms", s*1e3)
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", s)
	}
	return d.Round(time.Second).String()
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// refusedText says how many writes were refused, and for which causes.
func refusedText(refused map[string]int64) string {
	var n int64
	for _, c := range refused {
		n += c
	}
	if n == 0 {
		return "0 refused"
	}
	return fmt.Sprintf("%d refused (%s)", n, nonZero(refused, metrics.RefusalCauses))
}
