package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The probe's own environment refusing it is never a page: for each cause
// of a refused write and each reason of a refused path, fed the series the
// exporter exposes then (both replicas, on two nodes, refused alike, as
// they share their configuration; the first 10 minutes healthy), the rules
// fire one warning, WatchprobeMarkersRefused or WatchprobePathRefused, per
// replica, naming the cause, and no other alert, critical or not: no burn
// (the refused writes owe no event), no WatchprobeProbeFailing, no
// WatchprobePathDown; and no critical alert fires at any time. The same with one replica (replicaCount 1), whose every alert is
// at its own severity, the burn's a page.
func TestRefusalsFireOnlyTheirWarning(t *testing.T) {
	var groups []refusalGroup
	for _, cause := range metrics.RefusalCauses {
		groups = append(groups, refusalGroup{
			name:   "writes refused as " + cause + " fire WatchprobeMarkersRefused alone",
			series: refusedWritesSeries(cause),
			firing: map[string]string{"alertname": "WatchprobeMarkersRefused", "cause": cause},
		})
	}
	for _, reason := range metrics.PathRefusals {
		groups = append(groups, refusalGroup{
			name:   "the watch path refused as " + reason + " fires WatchprobePathRefused alone",
			series: refusedPathSeries(reason),
			firing: map[string]string{"alertname": "WatchprobePathRefused", "path": "watch", "reason": reason},
		})
	}
	for _, replicas := range []int{2, 1} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			promtoolTest(t, writeRefusalSuite(t, groups, replicas), renderRules(t, "--set", fmt.Sprintf("replicaCount=%d", replicas),
				"--set", "prometheusRule.runbookUrlBase="+testRunbooks))
		})
	}
}

// refusalGroup is one promtool test group: its input series and the one
// alert that must fire, by the labels that tell it.
type refusalGroup struct {
	name   string
	series map[string]string
	firing map[string]string
}

const (
	refusedFrom  = 10 // minutes healthy before the refusal
	refusalSteps = 70 // minutes in all
)

// healthyThen is a counter that rises by rate a minute for refusedFrom
// minutes, then by after.
func healthyThen(rate, after int) string {
	return fmt.Sprintf("0+%dx%d %d+%dx%d", rate, refusedFrom, rate*refusedFrom+after, after, refusalSteps-refusedFrom-1)
}

// gaugeThen is a gauge at before for refusedFrom minutes, then at after.
func gaugeThen(before, after int) string {
	return fmt.Sprintf("%dx%d %dx%d", before, refusedFrom, after, refusalSteps-refusedFrom-1)
}

var flat = fmt.Sprintf("0x%d", refusalSteps)

// baseSeries are what each replica exposes for probe p with the informer
// and watch paths, 6 cycles a minute (a create, an update, a delete), all
// delivered within a second on both paths, every closed set at zero: the
// healthy exporter, which refusedWritesSeries and refusedPathSeries change.
func baseSeries() map[string]string {
	perReplica := map[string]string{
		`up{job="watchprobe"}`:                                                             fmt.Sprintf("1x%d", refusalSteps),
		`watchprobe_probe_success{job="watchprobe",probe="p"}`:                             gaugeThen(1, 0),
		`watchprobe_config_last_reload_successful{job="watchprobe"}`:                       fmt.Sprintf("1x%d", refusalSteps),
		`watchprobe_markers_pending_deletion{job="watchprobe",probe="p"}`:                  flat,
		`watchprobe_writes_total{job="watchprobe",probe="p",verb="create"}`:                healthyThen(6, 6),
		`watchprobe_writes_total{job="watchprobe",probe="p",verb="update"}`:                healthyThen(6, 6),
		`watchprobe_writes_total{job="watchprobe",probe="p",verb="delete"}`:                healthyThen(6, 6),
		`watchprobe_write_errors_total{job="watchprobe",probe="p",verb="create",code="0"}`: flat,
		`watchprobe_write_errors_total{job="watchprobe",probe="p",verb="update",code="0"}`: flat,
		`watchprobe_write_errors_total{job="watchprobe",probe="p",verb="delete",code="0"}`: flat,
	}
	for _, verb := range []string{"create", "update", "delete"} {
		for _, cause := range metrics.RefusalCauses {
			perReplica[fmt.Sprintf(`watchprobe_writes_refused_total{job="watchprobe",probe="p",verb=%q,cause=%q}`, verb, cause)] = flat
		}
	}
	for _, path := range []string{"informer", "watch"} {
		p := fmt.Sprintf(`job="watchprobe",probe="p",path=%q`, path)
		for _, event := range []string{"added", "modified", "deleted"} {
			perReplica[fmt.Sprintf(`watchprobe_events_observed_total{%s,event=%q}`, p, event)] = healthyThen(6, 6)
			for _, le := range []string{"1", "+Inf"} {
				perReplica[fmt.Sprintf(`watchprobe_event_latency_seconds_bucket{%s,event=%q,le=%q}`, p, event, le)] = healthyThen(6, 6)
			}
		}
		for _, reason := range metrics.MissedReasons {
			perReplica[fmt.Sprintf(`watchprobe_events_missed_total{%s,reason=%q}`, p, reason)] = flat
			perReplica[fmt.Sprintf(`watchprobe_events_lost_total{%s,reason=%q}`, p, reason)] = flat
		}
		for _, reason := range metrics.UnmeasurableReasons {
			perReplica[fmt.Sprintf(`watchprobe_events_unmeasurable_total{%s,reason=%q}`, p, reason)] = flat
		}
		for _, reason := range metrics.PathRefusals {
			perReplica[fmt.Sprintf(`watchprobe_path_refused{%s,reason=%q}`, p, reason)] = flat
		}
		for _, f := range []string{"events_late_total", "events_duplicate_total", "events_out_of_order_total", "watch_stalled"} {
			perReplica[fmt.Sprintf(`watchprobe_%s{%s}`, f, p)] = flat
		}
		perReplica[fmt.Sprintf(`watchprobe_path_up{%s}`, p)] = fmt.Sprintf("1x%d", refusalSteps)
		perReplica[fmt.Sprintf(`watchprobe_requests_failed_total{%s,request="list",code="0"}`, p)] = flat
		perReplica[fmt.Sprintf(`watchprobe_relists_total{%s,reason="initial",mode="watchlist"}`, p)] = fmt.Sprintf("1x%d", refusalSteps)
	}
	return perReplica
}

// refusedWritesSeries: from minute 10 every create is refused for cause,
// so no update or delete follows and nothing is delivered.
func refusedWritesSeries(cause string) map[string]string {
	s := baseSeries()
	s[`watchprobe_writes_total{job="watchprobe",probe="p",verb="update"}`] = healthyThen(6, 0)
	s[`watchprobe_writes_total{job="watchprobe",probe="p",verb="delete"}`] = healthyThen(6, 0)
	s[fmt.Sprintf(`watchprobe_writes_refused_total{job="watchprobe",probe="p",verb="create",cause=%q}`, cause)] = healthyThen(0, 6)
	for k := range s {
		if strings.HasPrefix(k, "watchprobe_events_observed_total") || strings.HasPrefix(k, "watchprobe_event_latency_seconds_bucket") {
			s[k] = healthyThen(6, 0)
		}
	}
	return s
}

// refusedPathSeries: from minute 10 the watch path's lists are refused for
// reason: it is down, refused, and every write is unmeasurable there,
// while the informer goes on delivering.
func refusedPathSeries(reason string) map[string]string {
	s := baseSeries()
	w := `job="watchprobe",probe="p",path="watch"`
	code := map[string]string{metrics.PathForbidden: "403", metrics.PathNotFound: "404"}[reason]
	s[fmt.Sprintf(`watchprobe_path_up{%s}`, w)] = gaugeThen(1, 0)
	s[fmt.Sprintf(`watchprobe_path_refused{%s,reason=%q}`, w, reason)] = gaugeThen(0, 1)
	s[fmt.Sprintf(`watchprobe_requests_failed_total{%s,request="list",code=%q}`, w, code)] = healthyThen(0, 1)
	s[fmt.Sprintf(`watchprobe_events_unmeasurable_total{%s,reason="path_refused"}`, w)] = healthyThen(0, 18)
	for _, event := range []string{"added", "modified", "deleted"} {
		s[fmt.Sprintf(`watchprobe_events_observed_total{%s,event=%q}`, w, event)] = healthyThen(6, 0)
		for _, le := range []string{"1", "+Inf"} {
			s[fmt.Sprintf(`watchprobe_event_latency_seconds_bucket{%s,event=%q,le=%q}`, w, event, le)] = healthyThen(6, 0)
		}
	}
	return s
}

// writeRefusalSuite writes a promtool suite of groups, each fed its
// series from each of replicas and checking, at the end, the firing alerts
// by name and severity (ALERTS), the one expected by its labels, and that
// no critical alert ever fired.
func writeRefusalSuite(t *testing.T, groups []refusalGroup, replicas int) string {
	t.Helper()
	var tests []map[string]any
	end := fmt.Sprintf("%dm", refusalSteps)
	expect := func(expr, labels string) map[string]any {
		return map[string]any{"expr": expr, "eval_time": end, "exp_samples": []map[string]any{{"labels": labels, "value": replicas}}}
	}
	for _, g := range groups {
		var input []map[string]string
		for r := range replicas {
			// Each replica on a node of its own, as the chart spreads
			// them: the refusal is seen from two nodes, and still pages
			// nothing.
			instance := fmt.Sprintf(`instance="%c",node="n%d",`, 'a'+r, r+1)
			for name, values := range g.series {
				input = append(input, map[string]string{"series": strings.Replace(name, "{", "{"+instance, 1), "values": values})
			}
		}
		var sel []string
		for k, v := range g.firing {
			sel = append(sel, fmt.Sprintf("%s=%q", k, v))
		}
		tests = append(tests, map[string]any{"name": g.name, "interval": "1m", "input_series": input, "promql_expr_test": []map[string]any{
			expect(`count by (alertname, severity) (ALERTS{alertstate="firing"})`, fmt.Sprintf(`{alertname=%q,severity="warning"}`, g.firing["alertname"])),
			expect(fmt.Sprintf(`count(ALERTS{alertstate="firing",%s})`, strings.Join(sel, ",")), "{}"),
			// Never firing. A refused path is WatchprobePathDown pending
			// for the minutes before the refusal fills its window, which
			// its `for` outlasts.
			{"expr": fmt.Sprintf(`max_over_time(ALERTS{severity="critical",alertstate="firing"}[%s])`, end), "eval_time": end, "exp_samples": []map[string]any{}},
		}})
	}
	out, err := yaml.Marshal(map[string]any{"rule_files": []string{"watchprobe.rules.yml"}, "evaluation_interval": "1m", "group_eval_order": []string{"watchprobe.sli", "watchprobe.alerts"}, "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "refusals.rules_test.yml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
