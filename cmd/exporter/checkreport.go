package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/version"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// checkSchemaVersion is the version of the JSON report's schema
// (docs/check-report.schema.json). Adding a field keeps it; renaming,
// removing or changing the meaning of one bumps it.
const checkSchemaVersion = 1

// checkReport is the JSON report of `watchprobe check`; the text report
// shows the same.
type checkReport struct {
	SchemaVersion   int           `json:"schema_version"`
	Version         string        `json:"version"`
	Server          string        `json:"server"`
	Replica         string        `json:"replica"`
	Started         time.Time     `json:"started"`
	DurationSeconds float64       `json:"duration_seconds"`
	Interrupted     bool          `json:"interrupted"`
	Objective       objective     `json:"objective"`
	OK              bool          `json:"ok"`
	Problems        []string      `json:"problems"`
	Probes          []probeReport `json:"probes"`
	// MarkersLeft are the check's markers still in the cluster after its
	// probes stopped: an apiserver too slow or failing to delete them.
	MarkersLeft []markerRef `json:"markers_left"`
}

type objective struct {
	LatencySeconds   float64 `json:"latency_seconds"`
	Target           float64 `json:"target"`
	AllowedAnomalies int     `json:"allowed_anomalies"`
}

type probeReport struct {
	Name             string       `json:"name"`
	Kind             string       `json:"kind"`
	Namespace        string       `json:"namespace"`
	IntervalSeconds  float64      `json:"interval_seconds"`
	DeadlineSeconds  float64      `json:"deadline_seconds"`
	Cycles           int          `json:"cycles"`
	SuccessfulCycles int          `json:"successful_cycles"`
	Writes           int64        `json:"writes"`
	WriteErrors      int64        `json:"write_errors"`
	OK               bool         `json:"ok"`
	Problems         []string     `json:"problems"`
	Paths            []pathReport `json:"paths"`
}

type pathReport struct {
	Path      string `json:"path"`
	APIServer string `json:"apiserver,omitempty"`
	// Latency is null when no event arrived.
	Latency  *latencySummary `json:"latency_seconds"`
	Observed int64           `json:"observed"`
	// Expected counts the events the path owed: those observed and those
	// missed that never arrived.
	Expected        int64 `json:"expected"`
	WithinObjective int64 `json:"within_objective"`
	// Ratio is WithinObjective/Expected, null when nothing was expected.
	Ratio  *float64         `json:"ratio"`
	Missed map[string]int64 `json:"missed"`
	// Lost counts, by reason, the missed events still undelivered when the
	// probe's lost_after passed; a miss within lost_after of the check's
	// end is missed and not (yet) lost.
	Lost           map[string]int64 `json:"lost"`
	Duplicates     int64            `json:"duplicates"`
	Replays        int64            `json:"replays"`
	OutOfOrder     int64            `json:"out_of_order"`
	Late           int64            `json:"late"`
	WatchEnds      map[string]int64 `json:"watch_ends"`
	Relists        map[string]int64 `json:"relists"`
	Bookmarks      int64            `json:"bookmarks"`
	RequestsFailed int64            `json:"requests_failed"`
	Anomalies      int64            `json:"anomalies"`
	// Resume is present on a path the probe's resume checks ran on.
	Resume   *resumeReport `json:"resume,omitempty"`
	OK       bool          `json:"ok"`
	Problems []string      `json:"problems"`
}

// resumeReport is what a path's resume checks found.
type resumeReport struct {
	// WindowSeconds is the largest age that replayed exactly in the
	// path's latest round that judged every age; null when no round did.
	WindowSeconds *float64 `json:"window_seconds"`
	// Checks counts the checks by configured age, then outcome.
	Checks map[string]map[string]int64 `json:"checks"`
	// Inexact lists the latest checks whose replay was not exact.
	Inexact []inexactReplay `json:"inexact"`
}

// inexactReplay is one resume check whose replay was not exact, with the
// events involved: resourceVersions, or a delete's marker.
type inexactReplay struct {
	Age        string   `json:"age"`
	From       string   `json:"from"`
	Missing    []string `json:"missing"`
	Duplicated []string `json:"duplicated"`
	OutOfOrder []string `json:"out_of_order"`
	Error      string   `json:"error,omitempty"`
}

func (p *pathReport) resume() *resumeReport {
	if p.Resume == nil {
		p.Resume = &resumeReport{Checks: map[string]map[string]int64{}, Inexact: []inexactReplay{}}
	}
	return p.Resume
}

// count is how many checks had outcome, over every age.
func (r *resumeReport) count(outcome string) int64 {
	var n int64
	for _, byOutcome := range r.Checks {
		n += byOutcome[outcome]
	}
	return n
}

// latencySummary holds exact order statistics of every latency recorded
// (nearest rank), in seconds.
type latencySummary struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

var (
	missedReasons = []string{metrics.MissedRelist, metrics.MissedUnavailable, metrics.MissedSilent}
	endReasons    = []string{metrics.EndTimeout, metrics.EndClosedEarly, metrics.EndExpired, metrics.EndTooManyRequests, metrics.EndError, metrics.EndEOF, metrics.EndClient}
	relistReasons = []string{metrics.RelistInitial, metrics.RelistExpired, metrics.RelistError}
)

func zeros(keys []string) map[string]int64 {
	m := make(map[string]int64, len(keys))
	for _, k := range keys {
		m[k] = 0
	}
	return m
}

// tally counts one probe's outcomes for the report: per path, the counts
// and every latency. A check is short, so keeping every latency is cheap,
// and gives exact quantiles and the true maximum, which the histograms'
// buckets cannot.
type tally struct {
	mu          sync.Mutex
	paths       map[pathKey]*pathTally
	writes      int64
	writeErrors int64
}

// pathKey names one path of a probe.
type pathKey struct {
	path, apiserver string
}

type pathTally struct {
	report    pathReport
	latencies []time.Duration
	// heard: the path told something, so it ran.
	heard bool
}

// newTally starts the tally of a probe, with a row for each configured
// path, which must report; a path pinned to an apiserver gets one when it
// first tells something.
func newTally(cfg probe.Config) *tally {
	t := &tally{paths: map[pathKey]*pathTally{}}
	for _, p := range cfg.Paths {
		t.row(p, "")
	}
	return t
}

func (t *tally) row(path, apiserver string) *pathTally {
	k := pathKey{path, apiserver}
	if t.paths[k] == nil {
		t.paths[k] = &pathTally{report: pathReport{Path: path, APIServer: apiserver,
			Missed: zeros(missedReasons), Lost: zeros(missedReasons), WatchEnds: zeros(endReasons), Relists: zeros(relistReasons)}}
	}
	return t.paths[k]
}

func (t *tally) Outcome(o probe.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o.Path == nil {
		if o.Kind == probe.Answered {
			t.writes++
			if o.Err != nil {
				t.writeErrors++
			}
		}
		return
	}
	row := t.row(o.Path.Name, o.Path.APIServer)
	row.heard = true
	r := &row.report
	switch o.Kind {
	case probe.Arrived:
		r.Observed++
		row.latencies = append(row.latencies, o.Latency)
		if o.Late {
			r.Late++
		}
	case probe.Missed:
		r.Missed[o.Reason]++
	case probe.Lost:
		r.Lost[o.Reason]++
	case probe.Duplicate:
		r.Duplicates++
	case probe.Replayed:
		r.Replays++
	case probe.OutOfOrder:
		r.OutOfOrder++
	case probe.StreamEnded:
		r.WatchEnds[o.Reason]++
	case probe.Relisted:
		r.Relists[o.Reason]++
	case probe.Bookmark:
		r.Bookmarks++
	case probe.RequestFailed:
		r.RequestsFailed++
	case probe.ResumeChecked:
		rr := r.resume()
		age := model.Duration(o.Limit).String()
		if rr.Checks[age] == nil {
			rr.Checks[age] = zeros(metrics.ResumeOutcomes)
		}
		rr.Checks[age][o.Reason]++
		if v := o.Resume; v != nil && v.Outcome == metrics.ResumeIncomplete {
			ir := inexactReplay{Age: age, From: v.From, Missing: nonNil(v.Missing), Duplicated: nonNil(v.Duplicated), OutOfOrder: nonNil(v.OutOfOrder)}
			if v.Err != nil {
				ir.Error = v.Err.Error()
			}
			rr.Inexact = append(rr.Inexact, ir)
			if len(rr.Inexact) > inexactKept {
				rr.Inexact = slices.Delete(rr.Inexact, 0, len(rr.Inexact)-inexactKept)
			}
		}
	case probe.ResumeWindow:
		w := o.Limit.Seconds()
		r.resume().WindowSeconds = &w
	}
}

// inexactKept bounds the inexact replays a path's report lists: the latest.
const inexactKept = 20

// buildReport judges what the probes' tallies hold against the objective.
func buildReport(tallies map[string]*tally, b *board, cfgs []probe.Config, kf *checkFlags, server, replica string, started time.Time, elapsed time.Duration, interrupted bool) (*checkReport, error) {
	r := &checkReport{
		SchemaVersion:   checkSchemaVersion,
		Version:         version.Version,
		Server:          server,
		Replica:         replica,
		Started:         started.UTC().Truncate(time.Millisecond),
		DurationSeconds: math.Round(elapsed.Seconds()*1000) / 1000,
		Interrupted:     interrupted,
		Objective:       objective{LatencySeconds: kf.latency.Seconds(), Target: kf.target, AllowedAnomalies: kf.allowed},
		OK:              true,
		Problems:        []string{},
		MarkersLeft:     []markerRef{},
	}
	if interrupted {
		r.OK = false
		r.Problems = append(r.Problems, "interrupted before the check completed")
	}
	allowed := int64(kf.allowed)
	for _, cfg := range cfgs {
		counts := b.counts(cfg.Name)
		judged, ok := counts.judged, counts.ok
		pr := probeReport{
			Name: cfg.Name, Kind: cfg.Kind, Namespace: cfg.Namespace,
			IntervalSeconds: time.Duration(cfg.Interval).Seconds(), DeadlineSeconds: time.Duration(cfg.Deadline).Seconds(),
			Cycles: judged, SuccessfulCycles: ok, OK: true, Problems: []string{}, Paths: []pathReport{},
		}
		t := tallies[cfg.Name]
		t.mu.Lock()
		defer t.mu.Unlock()
		pr.Writes, pr.WriteErrors = t.writes, t.writeErrors
		problem := func(format string, args ...any) {
			pr.OK = false
			pr.Problems = append(pr.Problems, fmt.Sprintf(format, args...))
		}
		if judged == 0 {
			problem("no cycle was judged: run longer than one interval (%s) and deadline (%s)", cfg.Interval, cfg.Deadline)
		}
		if pr.WriteErrors > allowed {
			problem("%d write errors, more than the %d allowed", pr.WriteErrors, allowed)
		}
		// A path that never started tells nothing: the report would be
		// silent about it rather than fail.
		for _, path := range cfg.Paths {
			if !t.paths[pathKey{path, ""}].heard {
				problem("path %s reported nothing: it never started", path)
			}
		}
		var keys []pathKey
		for k, row := range t.paths {
			if row.heard {
				keys = append(keys, k)
			}
		}
		if cfg.APIServers.Enabled() && !slices.ContainsFunc(keys, func(k pathKey) bool { return k.path == metrics.PathAPIServer }) {
			if cfg.APIServers.Discover {
				problem("apiservers: no apiserver path ran (discovery found none, or list or watch on endpointslices in default is refused)")
			} else {
				problem("apiservers: no apiserver path ran, although apiservers.endpoints lists %d", len(cfg.APIServers.Endpoints))
			}
		}
		slices.SortFunc(keys, func(a, b pathKey) int {
			return cmp.Or(cmp.Compare(pathOrder(cfg, a.path), pathOrder(cfg, b.path)), cmp.Compare(a.path, b.path), cmp.Compare(a.apiserver, b.apiserver))
		})
		for _, k := range keys {
			row := t.paths[k]
			ds := slices.Clone(row.latencies)
			slices.Sort(ds)
			path := judgePath(&row.report, ds, kf)
			if !path.OK {
				pr.OK = false
			}
			pr.Paths = append(pr.Paths, path)
		}
		if !pr.OK {
			r.OK = false
			for _, p := range pr.Problems {
				r.Problems = append(r.Problems, fmt.Sprintf("probe %s: %s", cfg.Name, p))
			}
			for _, path := range pr.Paths {
				for _, p := range path.Problems {
					r.Problems = append(r.Problems, fmt.Sprintf("probe %s, path %s: %s", cfg.Name, path.label(), p))
				}
			}
		}
		r.Probes = append(r.Probes, pr)
	}
	return r, nil
}

// addMarkersLeft records the markers the probes could not delete, and the
// namespaces that could not be listed to find out: either way the user
// must clean up, and the check did not complete as it should.
func (r *checkReport) addMarkersLeft(left []markerRef, listErrs []error, replica string) {
	r.MarkersLeft = append(r.MarkersLeft, left...)
	type place struct{ kind, namespace string }
	count := map[place]int{}
	var order []place
	for _, m := range left {
		k := place{m.Kind, m.Namespace}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	for _, k := range order {
		_, resource := markerResource(k.kind)
		r.OK = false
		r.Problems = append(r.Problems, fmt.Sprintf("%d %s marker(s) left in namespace %s; delete them with: kubectl delete %s -n %s -l %s=%s",
			count[k], k.kind, k.namespace, resource, k.namespace, probe.LabelReplica, replica))
	}
	for _, err := range listErrs {
		r.OK = false
		r.Problems = append(r.Problems, fmt.Sprintf("cannot tell whether markers were left (look with kubectl get -l %s=%s): %v", probe.LabelReplica, replica, err))
	}
}

func pathOrder(cfg probe.Config, path string) int {
	if i := slices.Index(cfg.Paths, path); i >= 0 {
		return i
	}
	return len(cfg.Paths)
}

// judgePath fills in what the counters do not say: latencies, the share
// within the objective, anomalies, and the verdict.
func judgePath(pr *pathReport, ds []time.Duration, kf *checkFlags) pathReport {
	p := *pr
	p.Problems = []string{}
	if len(ds) > 0 {
		p.Latency = &latencySummary{
			P50: rank(ds, 0.50).Seconds(), P90: rank(ds, 0.90).Seconds(), P99: rank(ds, 0.99).Seconds(), Max: ds[len(ds)-1].Seconds(),
		}
	}
	for _, d := range ds {
		if d <= kf.latency {
			p.WithinObjective++
		}
	}
	var missed int64
	for _, n := range p.Missed {
		missed += n
	}
	// A late event is counted both observed and missed.
	p.Expected = p.Observed + missed - p.Late
	p.Anomalies = missed + p.Duplicates + p.OutOfOrder
	p.OK = true
	switch {
	case p.Expected == 0 && p.APIServer != "":
		// A path pinned to an apiserver that joined during the check owes
		// nothing until its first stream is live: nothing to judge yet.
	case p.Expected == 0:
		p.OK = false
		p.Problems = append(p.Problems, "no event was expected: no write succeeded")
	default:
		ratio := float64(p.WithinObjective) / float64(p.Expected)
		p.Ratio = &ratio
		if ratio < kf.target {
			p.OK = false
			p.Problems = append(p.Problems, fmt.Sprintf("%d of %d events (%s) arrived within %s, below the target %s", p.WithinObjective, p.Expected, percent(ratio), kf.latency, percent(kf.target)))
		}
	}
	if p.Anomalies > int64(kf.allowed) {
		p.OK = false
		p.Problems = append(p.Problems, fmt.Sprintf("anomalies: %d (%d missed, %d duplicated, %d out of order), more than the %d allowed", p.Anomalies, missed, p.Duplicates, p.OutOfOrder, kf.allowed))
	}
	// A resumed watch that misses or repeats what was written is a delivery
	// fault like a missed event; an expired one is the history's end.
	if p.Resume != nil {
		if n := p.Resume.count(metrics.ResumeIncomplete); n > int64(kf.allowed) {
			p.OK = false
			p.Problems = append(p.Problems, fmt.Sprintf("resume: %d replays not exact, more than the %d allowed%s", n, kf.allowed, describeInexact(p.Resume.Inexact)))
		}
	}
	return p
}

// describeInexact lists the inexact replays for a problem line.
func describeInexact(rs []inexactReplay) string {
	var parts []string
	for _, r := range rs {
		var what []string
		for _, l := range []struct {
			name string
			rvs  []string
		}{{"missing", r.Missing}, {"duplicated", r.Duplicated}, {"out of order", r.OutOfOrder}} {
			if len(l.rvs) > 0 {
				what = append(what, l.name+" "+strings.Join(l.rvs, ", "))
			}
		}
		if r.Error != "" {
			what = append(what, r.Error)
		}
		parts = append(parts, fmt.Sprintf("at %s from resourceVersion %s: %s", r.Age, r.From, strings.Join(what, "; ")))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; and ") + ")"
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// rank is the nearest-rank q-quantile of sorted ds: the smallest value
// with at least q of the values at or below it.
func rank(ds []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(i, 0)]
}

func percent(r float64) string {
	return fmt.Sprintf("%.2f%%", 100*r)
}

func (p pathReport) label() string {
	if p.APIServer != "" {
		return p.Path + " (" + p.APIServer + ")"
	}
	return p.Path
}

func (r *checkReport) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeText writes the report for a person: per probe a table with a
// column per path.
func (r *checkReport) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "watchprobe check against %s (replica %s): %d probe(s), %s\n",
		r.Server, r.Replica, len(r.Probes), time.Duration(r.DurationSeconds*float64(time.Second)).Round(100*time.Millisecond))
	obj := fmt.Sprintf("objective: at least %s of the events on each path within %s, at most %d anomalies per path",
		percent(r.Objective.Target), seconds(r.Objective.LatencySeconds), r.Objective.AllowedAnomalies)
	for _, pr := range r.Probes {
		fmt.Fprintf(&b, "\nprobe %s (%s in %s, interval %s, deadline %s): %d cycles judged, %d successful; %d writes, %d failed\n",
			pr.Name, pr.Kind, pr.Namespace, seconds(pr.IntervalSeconds), seconds(pr.DeadlineSeconds), pr.Cycles, pr.SuccessfulCycles, pr.Writes, pr.WriteErrors)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		row := func(name string, cell func(p pathReport) string) {
			cells := []string{"  " + name}
			for _, p := range pr.Paths {
				cells = append(cells, cell(p))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		row("", func(p pathReport) string { return p.label() })
		for _, q := range []struct {
			name string
			get  func(*latencySummary) float64
		}{
			{"latency p50", func(l *latencySummary) float64 { return l.P50 }},
			{"latency p90", func(l *latencySummary) float64 { return l.P90 }},
			{"latency p99", func(l *latencySummary) float64 { return l.P99 }},
			{"latency max", func(l *latencySummary) float64 { return l.Max }},
		} {
			row(q.name, func(p pathReport) string {
				if p.Latency == nil {
					return "-"
				}
				return secs(q.get(p.Latency))
			})
		}
		row("observed", func(p pathReport) string { return fmt.Sprint(p.Observed) })
		row("within "+seconds(r.Objective.LatencySeconds).String(), func(p pathReport) string {
			if p.Ratio == nil {
				return "-"
			}
			return fmt.Sprintf("%d/%d (%s)", p.WithinObjective, p.Expected, percent(*p.Ratio))
		})
		for _, reason := range missedReasons {
			row("missed "+reason, func(p pathReport) string { return fmt.Sprint(p.Missed[reason]) })
		}
		for _, reason := range missedReasons {
			row("lost "+reason, func(p pathReport) string { return fmt.Sprint(p.Lost[reason]) })
		}
		row("duplicates", func(p pathReport) string { return fmt.Sprint(p.Duplicates) })
		row("replays", func(p pathReport) string { return fmt.Sprint(p.Replays) })
		row("out of order", func(p pathReport) string { return fmt.Sprint(p.OutOfOrder) })
		row("late", func(p pathReport) string { return fmt.Sprint(p.Late) })
		row("watch ends", func(p pathReport) string { return nonZero(p.WatchEnds, endReasons) })
		row("relists", func(p pathReport) string { return nonZero(p.Relists, relistReasons) })
		row("bookmarks", func(p pathReport) string { return fmt.Sprint(p.Bookmarks) })
		row("failed requests", func(p pathReport) string { return fmt.Sprint(p.RequestsFailed) })
		if slices.ContainsFunc(pr.Paths, func(p pathReport) bool { return p.Resume != nil }) {
			row("resume window", func(p pathReport) string {
				if p.Resume == nil || p.Resume.WindowSeconds == nil {
					return "-"
				}
				return model.Duration(seconds(*p.Resume.WindowSeconds)).String()
			})
			row("resume checks", func(p pathReport) string {
				if p.Resume == nil {
					return "-"
				}
				counts := map[string]int64{}
				for _, o := range metrics.ResumeOutcomes {
					counts[o] = p.Resume.count(o)
				}
				return nonZero(counts, metrics.ResumeOutcomes)
			})
		}
		row("objective", func(p pathReport) string {
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
