package check

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/version"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// SchemaVersion is the version of the JSON report's schema
// (docs/check-report.schema.json). Adding a field keeps it; renaming,
// removing or changing the meaning of one bumps it.
const SchemaVersion = 1

// Report is what a check found, and its verdict. Its JSON form is the
// schema's; a text report shows the same.
type Report struct {
	SchemaVersion int    `json:"schema_version"`
	Version       string `json:"version"`
	Server        string `json:"server"`
	// ServerVersion is the kube-apiserver's release (/version's
	// gitVersion), "" when it could not be read.
	ServerVersion   string          `json:"server_version,omitempty"`
	Replica         string          `json:"replica"`
	Started         time.Time       `json:"started"`
	DurationSeconds float64         `json:"duration_seconds"`
	Interrupted     bool            `json:"interrupted"`
	Objective       ObjectiveReport `json:"objective"`
	OK              bool            `json:"ok"`
	Problems        []string        `json:"problems"`
	// Notes say what the check could not measure as it would on a
	// tested release, or measured otherwise, and why: an untested
	// version, a feature the server lacks. They fail nothing.
	Notes  []string      `json:"notes,omitempty"`
	Probes []ProbeReport `json:"probes"`
	// MarkersLeft are the check's markers still in the cluster after its
	// probes stopped: an apiserver too slow or failing to delete them.
	MarkersLeft []Marker `json:"markers_left"`
	// Agents is what the node agents' Leases said at the check's end;
	// absent when not read (Notes say why).
	Agents *AgentsReport `json:"agents,omitempty"`

	// markersUnknown: a namespace could not be listed to find the markers
	// left. It is not in the JSON form, whose problems say so in words.
	markersUnknown bool
}

// ObjectiveReport is the Objective as the report states it.
type ObjectiveReport struct {
	LatencySeconds   float64 `json:"latency_seconds"`
	Target           float64 `json:"target"`
	AllowedAnomalies int     `json:"allowed_anomalies"`
}

// ProbeReport is one probe's part of the report.
type ProbeReport struct {
	Name             string  `json:"name"`
	Kind             string  `json:"kind"`
	Namespace        string  `json:"namespace"`
	IntervalSeconds  float64 `json:"interval_seconds"`
	DeadlineSeconds  float64 `json:"deadline_seconds"`
	Cycles           int     `json:"cycles"`
	SuccessfulCycles int     `json:"successful_cycles"`
	// UnjudgedCycles settled without a verdict: the exporter was starved
	// of CPU where it could have moved one of their writes' verdicts.
	UnjudgedCycles int          `json:"unjudged_cycles,omitempty"`
	Writes         int64        `json:"writes"`
	WriteErrors    int64        `json:"write_errors"`
	OK             bool         `json:"ok"`
	Problems       []string     `json:"problems"`
	Paths          []PathReport `json:"paths"`
	// Controllers are present for a probe with controllers set.
	Controllers []ControllerReport `json:"controllers,omitempty"`
	// Freshness and StaleReads are present for a probe with freshness
	// set: each resource's checks per apiserver, and each apiserver's
	// reads of the markers.
	Freshness  []FreshnessReport  `json:"freshness,omitempty"`
	StaleReads []StaleReadsReport `json:"stale_reads,omitempty"`
	// WritesRefused are the writes the probe's own namespace, permissions
	// or policies refused, by cause (every cause, at 0 when none);
	// WriteErrors are those the control plane failed.
	WritesRefused map[string]int64 `json:"writes_refused"`
	// WatchList is present for a probe with watch_list set: each
	// resource's syncs per apiserver.
	WatchList []WatchListReport `json:"watch_list,omitempty"`
}

// addProblems fails the probe with a part's problems, if it has any, and
// says whether it had none.
func (pr *ProbeReport) addProblems(problems []string) (ok bool) {
	if len(problems) == 0 {
		return true
	}
	pr.OK = false
	pr.Problems = append(pr.Problems, problems...)
	return false
}

// ControllerReport is how one controller of kube-controller-manager
// answered the probe's changes to its marker object.
type ControllerReport struct {
	Controller string `json:"controller"`
	// Changes the apiserver acknowledged, each owing a reaction.
	Changes      int64 `json:"changes"`
	ChangeErrors int64 `json:"change_errors"`
	Reacted      int64 `json:"reacted"`
	// Missed, Late and Lost as for events: each miss later late or lost,
	// a miss within lost_after of the check's end neither yet.
	Missed int64 `json:"missed"`
	Late   int64 `json:"late"`
	Lost   int64 `json:"lost"`
	// Latency of every reaction, null when none arrived; Share the
	// controller's share of those whose change the probe saw first.
	Latency  *LatencySummary `json:"latency_seconds"`
	Share    *LatencySummary `json:"share_seconds"`
	OK       bool            `json:"ok"`
	Problems []string        `json:"problems"`
}

// PathReport is what one path of a probe delivered.
type PathReport struct {
	Path      string `json:"path"`
	APIServer string `json:"apiserver,omitempty"`
	// Latency is null when no event arrived.
	Latency  *LatencySummary `json:"latency_seconds"`
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
	Lost      map[string]int64 `json:"lost"`
	Late      int64            `json:"late"`
	WatchEnds map[string]int64 `json:"watch_ends"`
	Relists   map[string]int64 `json:"relists"`
	Anomalies int64            `json:"anomalies"`
	// Refused is why the apiserver refused the path's latest list or watch
	// request, when it was refused and the path was not live again by the
	// check's end: forbidden or not_found.
	Refused string `json:"refused,omitempty"`
	// Counts are the path's totals, by each key of PathCounts (duplicates,
	// replays, ...): in the JSON form, each a field of the path's.
	Counts map[string]int64 `json:"-"`
	// Resume is present on a path the probe's resume checks ran on.
	Resume   *ResumeReport `json:"resume,omitempty"`
	OK       bool          `json:"ok"`
	Problems []string      `json:"problems"`
}

// ResumeReport is what a path's resume checks found.
type ResumeReport struct {
	// WindowSeconds is the largest age that replayed exactly in the
	// path's latest round that judged every age; null when no round did.
	WindowSeconds *float64 `json:"window_seconds"`
	// Checks counts the checks by configured age, then outcome.
	Checks map[string]map[string]int64 `json:"checks"`
	// Inexact lists the latest checks whose replay was not exact.
	Inexact []InexactReplay `json:"inexact"`
}

// InexactReplay is one resume check whose replay was not exact, with the
// events involved: resourceVersions, or a delete's marker.
type InexactReplay struct {
	Age        string   `json:"age"`
	From       string   `json:"from"`
	Missing    []string `json:"missing"`
	Duplicated []string `json:"duplicated"`
	OutOfOrder []string `json:"out_of_order"`
	Error      string   `json:"error,omitempty"`
}

// Count is how many checks had outcome, over every age.
func (r *ResumeReport) Count(outcome string) int64 {
	var n int64
	for _, byOutcome := range r.Checks {
		n += byOutcome[outcome]
	}
	return n
}

// LatencySummary holds exact order statistics of every latency recorded
// (nearest rank), in seconds.
type LatencySummary struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Marker names one marker. Finalizers, when set, are other clients'
// finalizers that hold its deletion, and HeldBy the clients that set them
// (from its managedFields), when known.
type Marker struct {
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Name       string   `json:"name"`
	Finalizers []string `json:"finalizers,omitempty"`
	HeldBy     []string `json:"held_by,omitempty"`
}

// The reasons a report always lists, in this order, zero or not.
var (
	MissedReasons = []string{metrics.MissedRelist, metrics.MissedUnavailable, metrics.MissedSilent}
	EndReasons    = []string{metrics.EndTimeout, metrics.EndClosedEarly, metrics.EndExpired, metrics.EndTooManyRequests, metrics.EndError, metrics.EndEOF, metrics.EndClient}
	RelistReasons = []string{metrics.RelistInitial, metrics.RelistExpired, metrics.RelistError}
)

// Verdict is what a check's report comes to.
type Verdict int

const (
	// Holds: the objective holds.
	Holds Verdict = iota
	// Fails: it does not.
	Fails
	// Incomplete: the check did not complete as it should, whatever the
	// counts say: interrupted, or markers left in the cluster (or no way
	// to tell).
	Incomplete
)

// Verdict is what the report comes to; only the check that made the
// report can tell whether markers may have been left unseen.
func (r *Report) Verdict() Verdict {
	switch {
	case r.Interrupted, len(r.MarkersLeft) > 0, r.markersUnknown:
		return Incomplete
	case r.OK:
		return Holds
	}
	return Fails
}

// report judges what the probes' tallies hold against the objective.
func (c *Check) report(started time.Time, elapsed time.Duration, interrupted bool) *Report {
	obj := c.opts.Objective
	r := &Report{
		SchemaVersion:   SchemaVersion,
		Version:         version.Version,
		Server:          c.opts.Config.Host,
		Replica:         c.opts.Replica,
		Started:         started.UTC().Truncate(time.Millisecond),
		DurationSeconds: math.Round(elapsed.Seconds()*1000) / 1000,
		Interrupted:     interrupted,
		Objective:       ObjectiveReport{LatencySeconds: obj.Latency.Seconds(), Target: obj.Target, AllowedAnomalies: obj.Allowed},
		OK:              true,
		Problems:        []string{},
		MarkersLeft:     []Marker{},
	}
	if c.server.Major != 0 {
		r.ServerVersion = c.server.String()
		if why := c.server.Untested(); why != "" {
			r.Notes = append(r.Notes, why)
		}
	}
	watchListRefused := false
	if interrupted {
		r.OK = false
		r.Problems = append(r.Problems, "interrupted before the check completed")
	}
	for _, cfg := range c.opts.Probes {
		pr := c.tallies[cfg.Name].report(cfg, obj)
		c.fresh[cfg.Name].addTo(&pr)
		c.syncs[cfg.Name].addTo(&pr)
		for _, w := range pr.WatchList {
			watchListRefused = watchListRefused || w.Refused[metrics.WatchListRejected] > 0
		}
		if !pr.OK {
			r.OK = false
			for _, p := range pr.Problems {
				r.Problems = append(r.Problems, fmt.Sprintf("probe %s: %s", cfg.Name, p))
			}
			for _, path := range pr.Paths {
				for _, p := range path.Problems {
					r.Problems = append(r.Problems, fmt.Sprintf("probe %s, path %s: %s", cfg.Name, path.Label(), p))
				}
			}
			for _, ctl := range pr.Controllers {
				for _, p := range ctl.Problems {
					r.Problems = append(r.Problems, fmt.Sprintf("probe %s, controller %s: %s", cfg.Name, ctl.Controller, p))
				}
			}
		}
		r.Probes = append(r.Probes, pr)
	}
	release := "this kube-apiserver"
	if r.ServerVersion != "" {
		release = "kube-apiserver " + r.ServerVersion
	}
	switch {
	case watchListRefused:
		r.Notes = append(r.Notes, fmt.Sprintf("WatchList refused: %s refuses watches with sendInitialEvents (its WatchList feature gate is off, the default in 1.31 and 1.33), so its WatchList syncs were counted refused, not timed, and informers, the informer path's included, list with LIST instead", release))
	case c.server.Major != 0 && !c.server.WatchListByDefault():
		r.Notes = append(r.Notes, fmt.Sprintf("WatchList off by default: %s serves WatchList only where its WatchList feature gate was turned on (off by default in 1.31 and 1.33); where it is off, informers, the informer path's included, list with LIST", release))
	}
	r.addAgents(c.agents, c.agentsNote, c.opts.AgentsFailOnDegraded)
	return r
}

// report judges one probe's tally.
func (t *tally) report(cfg config.Config, obj Objective) ProbeReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	pr := ProbeReport{
		Name: cfg.Name, Kind: cfg.Kind, Namespace: cfg.Namespace,
		IntervalSeconds: time.Duration(cfg.Interval).Seconds(), DeadlineSeconds: time.Duration(cfg.Deadline).Seconds(),
		Cycles: t.cycles.Judged, SuccessfulCycles: t.cycles.OK, UnjudgedCycles: t.cycles.Unjudged, OK: true, Problems: []string{}, Paths: []PathReport{},
		Writes: t.writes, WriteErrors: t.writeErrors, WritesRefused: maps.Clone(t.writesRefused),
	}
	problem := func(format string, args ...any) {
		pr.OK = false
		pr.Problems = append(pr.Problems, fmt.Sprintf(format, args...))
	}
	switch {
	case pr.Cycles == 0 && pr.UnjudgedCycles > 0:
		problem("no cycle was judged: the exporter was starved of CPU in each of the %d cycles that settled, so their writes were unmeasurable (exporter_starved); run it where it gets CPU (no CPU limit, a larger request, a less busy node)", pr.UnjudgedCycles)
	case pr.Cycles == 0:
		problem("no cycle was judged: run longer than one interval (%s) and deadline (%s)", cfg.Interval, cfg.Deadline)
	}
	if pr.WriteErrors > int64(obj.Allowed) {
		problem("%d write errors, more than the %d allowed", pr.WriteErrors, obj.Allowed)
	}
	// A refused write measured nothing: the check cannot say what it was
	// asked to, whatever the anomalies allowed.
	for _, cause := range metrics.RefusalCauses {
		if n := pr.WritesRefused[cause]; n > 0 {
			by := ""
			if t.refusedBy[cause] != "" {
				by = " by " + t.refusedBy[cause]
			}
			problem("%d writes refused as %s%s, the probe's own namespace, permissions or policies: %s", n, cause, by, judge.RefusalFix(cause))
		}
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
		path := judgePath(&row.report, ds, obj)
		if !path.OK {
			pr.OK = false
		}
		pr.Paths = append(pr.Paths, path)
	}
	for _, name := range cfg.Controllers {
		ctl := judgeController(t.controllers[name], obj)
		if !ctl.OK {
			pr.OK = false
		}
		pr.Controllers = append(pr.Controllers, ctl)
	}
	return pr
}

// judgeController summarizes a controller's reactions and judges them: a
// controller that answered no change, or missed more deadlines than the
// anomalies allowed, fails the check.
func judgeController(ct *controllerTally, obj Objective) ControllerReport {
	c := ct.report
	c.Problems = []string{}
	c.Latency, c.Share = summarize(ct.latencies), summarize(ct.shares)
	c.OK = true
	problem := func(format string, args ...any) {
		c.OK = false
		c.Problems = append(c.Problems, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Changes == 0 && c.ChangeErrors == 0:
		// The first cycle creates the marker object; changes start with the
		// second.
		problem("no change of its marker object was made: the first cycle creates it and the next ones change it; run at least 2 cycles")
	case c.Changes == 0:
		problem("no change of its marker object succeeded (%d failed)", c.ChangeErrors)
	case c.Reacted == 0:
		problem("answered none of %d changes: is kube-controller-manager running, and leading?", c.Changes)
	}
	if c.Missed > int64(obj.Allowed) {
		problem("%d of %d changes got no answer within the deadline (%d late, %d lost), more than the %d allowed", c.Missed, c.Changes, c.Late, c.Lost, obj.Allowed)
	}
	return c
}

// summarize is the order statistics of ds, nil when empty.
func summarize(ds []time.Duration) *LatencySummary {
	if len(ds) == 0 {
		return nil
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return &LatencySummary{P50: rank(ds, 0.50).Seconds(), P90: rank(ds, 0.90).Seconds(), P99: rank(ds, 0.99).Seconds(), Max: ds[len(ds)-1].Seconds()}
}

// addMarkersLeft records the markers the probes could not delete, and the
// namespaces that could not be listed to find out: either way the user
// must clean up, or see to it that another client's finalizers let go,
// and the check did not complete as it should.
func (r *Report) addMarkersLeft(left []Marker, listErrs []error) {
	r.MarkersLeft = append(r.MarkersLeft, left...)
	type place struct {
		kind, namespace string
		// holders are a held marker's finalizers and their clients.
		holders string
	}
	count := map[place]int{}
	var order []place
	for _, m := range left {
		k := place{kind: m.Kind, namespace: m.Namespace}
		if len(m.Finalizers) > 0 {
			k.holders = strings.Join(m.Finalizers, ", ")
			if len(m.HeldBy) > 0 {
				k.holders += " of " + strings.Join(m.HeldBy, ", ")
			}
		}
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
	}
	for _, k := range order {
		r.OK = false
		if k.holders != "" {
			r.Problems = append(r.Problems, fmt.Sprintf("%d %s marker(s) left in namespace %s, deleted and held by another client's finalizers (%s): they go when it removes them; their deletes were judged unmeasurable",
				count[k], k.kind, k.namespace, k.holders))
			continue
		}
		_, resource := probe.MarkerResource(k.kind)
		r.Problems = append(r.Problems, fmt.Sprintf("%d %s marker(s) left in namespace %s; delete them with: kubectl delete %s -n %s -l %s=%s",
			count[k], k.kind, k.namespace, resource, k.namespace, probe.LabelReplica, r.Replica))
	}
	for _, err := range listErrs {
		r.OK = false
		r.markersUnknown = true
		r.Problems = append(r.Problems, fmt.Sprintf("cannot tell whether markers were left (look with kubectl get -l %s=%s): %v", probe.LabelReplica, r.Replica, err))
	}
}

func pathOrder(cfg config.Config, path string) int {
	if i := slices.Index(cfg.Paths, path); i >= 0 {
		return i
	}
	return len(cfg.Paths)
}

// judgePath fills in what the counts do not say: latencies, the share
// within the objective, anomalies, and the verdict.
func judgePath(pr *PathReport, ds []time.Duration, obj Objective) PathReport {
	p := *pr
	p.Problems = []string{}
	if len(ds) > 0 {
		p.Latency = &LatencySummary{
			P50: rank(ds, 0.50).Seconds(), P90: rank(ds, 0.90).Seconds(), P99: rank(ds, 0.99).Seconds(), Max: ds[len(ds)-1].Seconds(),
		}
	}
	for _, d := range ds {
		if d <= obj.Latency {
			p.WithinObjective++
		}
	}
	var missed int64
	for _, n := range p.Missed {
		missed += n
	}
	// A late event is counted both observed and missed.
	p.Expected = p.Observed + missed - p.Late
	duplicates, outOfOrder := p.Counts[metrics.EventsDuplicate.Report], p.Counts[metrics.EventsOutOfOrder.Report]
	p.Anomalies = missed + duplicates + outOfOrder
	p.OK = true
	switch {
	case p.Refused != "":
		p.OK = false
		p.Problems = append(p.Problems, fmt.Sprintf("its list and watch requests are refused (%s), so the writes sent meanwhile are unmeasurable there: %s", p.Refused, judge.PathRefusalFix(p.Refused)))
	}
	switch {
	case p.Expected == 0 && p.Refused != "":
	case p.Expected == 0 && p.APIServer != "":
		// A path pinned to an apiserver that joined during the check owes
		// nothing until its first stream is live: nothing to judge yet.
	case p.Expected == 0:
		p.OK = false
		p.Problems = append(p.Problems, "no event was expected: no write succeeded")
	default:
		ratio := float64(p.WithinObjective) / float64(p.Expected)
		p.Ratio = &ratio
		if ratio < obj.Target {
			p.OK = false
			p.Problems = append(p.Problems, fmt.Sprintf("%d of %d events (%s) arrived within %s, below the target %s", p.WithinObjective, p.Expected, Percent(ratio), obj.Latency, Percent(obj.Target)))
		}
	}
	if p.Anomalies > int64(obj.Allowed) {
		p.OK = false
		p.Problems = append(p.Problems, fmt.Sprintf("anomalies: %d (%d missed, %d duplicated, %d out of order), more than the %d allowed", p.Anomalies, missed, duplicates, outOfOrder, obj.Allowed))
	}
	// A resumed watch that misses or repeats what was written is a delivery
	// fault like a missed event; an expired one is the history's end.
	if p.Resume != nil {
		if n := p.Resume.Count(metrics.ResumeIncomplete); n > int64(obj.Allowed) {
			p.OK = false
			p.Problems = append(p.Problems, fmt.Sprintf("resume: %d replays not exact, more than the %d allowed%s", n, obj.Allowed, describeInexact(p.Resume.Inexact)))
		}
	}
	return p
}

// describeInexact lists the inexact replays for a problem line.
func describeInexact(rs []InexactReplay) string {
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

// rank is the nearest-rank q-quantile of sorted ds: the smallest value
// with at least q of the values at or below it.
func rank(ds []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(i, 0)]
}

// Percent writes a share as the report's problems do: 99.00%.
func Percent(r float64) string {
	return fmt.Sprintf("%.2f%%", 100*r)
}

// Label names the path for a person, with its apiserver if pinned to one.
func (p PathReport) Label() string {
	if p.APIServer != "" {
		return p.Path + " (" + p.APIServer + ")"
	}
	return p.Path
}
