package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// custom are values unlike the defaults in each field, so that a value the
// dashboard did not take from its params shows.
func custom(t *testing.T) params {
	t.Helper()
	runbooks, err := defaultRunbooks()
	if err != nil {
		t.Fatal(err)
	}
	p := defaultParams(runbooks)
	p.objective, p.target, p.replicas, p.nodes, p.scrapeJob, p.pageSeverity = 0.25, 0.999, 3, 3, "wp", "P1"
	if p, err = p.withWindows(burnWindow{"6h", 6}, burnWindow{"30m", 20}); err != nil {
		t.Fatal(err)
	}
	return p
}

// panelJSON is a panel as Grafana reads it, numbers kept as written.
type panelJSON = map[string]any

// decode builds the dashboard for p and returns its panels, those of
// collapsed rows too, in order.
func decode(t *testing.T, p params) []panelJSON {
	t.Helper()
	data, err := build(p)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var d struct{ Panels []panelJSON }
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	var out []panelJSON
	for _, p := range d.Panels {
		out = append(out, p)
		if nested, ok := p["panels"].([]any); ok {
			for _, n := range nested {
				out = append(out, n.(panelJSON))
			}
		}
	}
	return out
}

func titled(t *testing.T, panels []panelJSON, title string) panelJSON {
	t.Helper()
	for _, p := range panels {
		if p["title"] == title {
			return p
		}
	}
	t.Fatalf("no panel %q", title)
	return nil
}

// get walks m along keys (map keys, or list indexes as numbers).
func get(v any, keys ...any) any {
	for _, k := range keys {
		switch k := k.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// threshold is one step as the JSON has it: Value is nil for the base.
type threshold struct {
	Color string
	Value *float64
}

// checkSteps checks a thresholds object's types, its base without a
// value and its steps' values numbers in increasing order, and returns
// them.
func checkSteps(t *testing.T, where string, th any) []threshold {
	t.Helper()
	if get(th, "mode") != "absolute" {
		t.Errorf("%s: thresholds mode %v, want absolute", where, get(th, "mode"))
	}
	raw, _ := get(th, "steps").([]any)
	if len(raw) < 2 {
		t.Errorf("%s: %d threshold steps: one colour says nothing", where, len(raw))
	}
	var out []threshold
	for i, s := range raw {
		color, _ := get(s, "color").(string)
		v := get(s, "value")
		if color == "" {
			t.Errorf("%s: step %d has no colour", where, i)
		}
		if i == 0 {
			if v != nil {
				t.Errorf("%s: the base step has value %v, want null (from minus infinity)", where, v)
			}
			out = append(out, threshold{Color: color})
			continue
		}
		n, ok := v.(json.Number)
		if !ok {
			t.Errorf("%s: step %d value %#v is not a number", where, i, v)
			continue
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			t.Errorf("%s: step %d value %s: %v", where, i, n, err)
			continue
		}
		if len(out) > 1 && *out[len(out)-1].Value >= f {
			t.Errorf("%s: step %d at %v is not above the one before, %v", where, i, f, *out[len(out)-1].Value)
		}
		out = append(out, threshold{Color: color, Value: &f})
	}
	return out
}

// thresholdsOf returns every thresholds object of a panel: its defaults'
// and each override's, by where they are.
func thresholdsOf(p panelJSON) map[string]any {
	out := map[string]any{}
	if th := get(p, "fieldConfig", "defaults", "thresholds"); th != nil {
		out["defaults"] = th
	}
	overrides, _ := get(p, "fieldConfig", "overrides").([]any)
	for _, o := range overrides {
		props, _ := get(o, "properties").([]any)
		for _, prop := range props {
			if get(prop, "id") == "thresholds" {
				out[fmt.Sprintf("override %v", get(o, "matcher", "options"))] = get(prop, "value")
			}
		}
	}
	return out
}

func stepsString(s []threshold) string {
	var parts []string
	for _, st := range s {
		if st.Value == nil {
			parts = append(parts, st.Color)
		} else {
			parts = append(parts, fmt.Sprintf("%s from %v", st.Color, *st.Value))
		}
	}
	return strings.Join(parts, ", ")
}

// Every threshold of the dashboard is well formed (a base step without a
// value, then numbers in increasing order), for the default values and
// others; the latency stats turn yellow at half the objective and red at
// the objective, the values' objective as a number, so that an objective
// of 1 s is yellow from 0.5 s, never from 0.
func TestThresholdsFromTheObjective(t *testing.T) {
	for _, p := range []params{buildDefaultParams(t), custom(t)} {
		t.Run(num(p.objective)+"s", func(t *testing.T) {
			panels := decode(t, p)
			for _, panel := range panels {
				for where, th := range thresholdsOf(panel) {
					checkSteps(t, fmt.Sprintf("%v (%s)", panel["title"], where), th)
				}
			}
			for _, title := range []string{"p99 event latency", "p99 by apiserver over the range"} {
				s := checkSteps(t, title, get(titled(t, panels, title), "fieldConfig", "defaults", "thresholds"))
				if len(s) != 3 || s[0].Color != "green" || s[1].Color != "yellow" || s[2].Color != "red" ||
					!(*s[1].Value > 0) || *s[1].Value != p.objective/2 || *s[2].Value != p.objective {
					t.Errorf("%s: thresholds %s, want green, yellow from %v, red from %v", title, stepsString(s), p.objective/2, p.objective)
				}
			}
			for _, panel := range panels {
				if get(panel, "fieldConfig", "defaults", "custom", "thresholdsStyle", "mode") == "line" {
					s := checkSteps(t, fmt.Sprint(panel["title"]), get(panel, "fieldConfig", "defaults", "thresholds"))
					if len(s) != 2 || *s[1].Value != p.objective {
						t.Errorf("%s: objective line %s, want red from %v", panel["title"], stepsString(s), p.objective)
					}
				}
			}
			burn := checkSteps(t, "burn rate", get(titled(t, panels, "Error budget burn rate"), "fieldConfig", "defaults", "thresholds"))
			if len(burn) != 3 || *burn[1].Value != p.slow.rate || *burn[2].Value != p.fast.rate || burn[2].Color != "red" {
				t.Errorf("burn rate lines %s, want orange from %v, red from %v", stepsString(burn), p.slow.rate, p.fast.rate)
			}
			for _, e := range exprs(titled(t, panels, "Error budget burn rate")) {
				if !strings.Contains(e, "/ (1 - "+num(p.target)+")") {
					t.Errorf("burn rate query %s does not divide by the budget, 1 - %v", e, p.target)
				}
			}
		})
	}
}

func buildDefaultParams(t *testing.T) params {
	t.Helper()
	runbooks, err := defaultRunbooks()
	if err != nil {
		t.Fatal(err)
	}
	return defaultParams(runbooks)
}

func exprs(p panelJSON) []string {
	var out []string
	targets, _ := p["targets"].([]any)
	for _, q := range targets {
		if e, ok := get(q, "expr").(string); ok {
			out = append(out, e)
		}
	}
	return out
}

// The worst-clusters table colours each numeric cell by thresholds of its
// own column: counts from 1, the burn rate at 1 and at the fast page's
// rate, replicas up against the replicas the chart runs, where 0 reads
// "no exporter"; red only in what pages (an alert firing, no exporter).
// The clusters listed include those whose exporter reported in the last
// day and no more.
func TestWorstClustersColoursEachColumn(t *testing.T) {
	p := custom(t)
	table := titled(t, decode(t, p), fleetPanel)
	want := map[string][]threshold{
		"alerts firing":            {{Color: "green"}, {Color: "red", Value: ptr(1)}},
		"burn rate " + p.fast.long: {{Color: "green"}, {Color: "yellow", Value: ptr(1)}, {Color: "orange", Value: ptr(p.fast.rate)}},
		"replicas up":              {{Color: "red"}, {Color: "yellow", Value: ptr(1)}, {Color: "green", Value: ptr(p.replicas)}},
		"lost in range":            {{Color: "green"}, {Color: "yellow", Value: ptr(1)}},
		"stalled":                  {{Color: "green"}, {Color: "yellow", Value: ptr(1)}},
		"paths down":               {{Color: "green"}, {Color: "yellow", Value: ptr(1)}},
	}
	var renamed []string
	for _, v := range get(table, "transformations", 1, "options", "renameByName").(map[string]any) {
		renamed = append(renamed, v.(string))
	}
	slices.Sort(renamed)
	var columns []string
	overrides, _ := get(table, "fieldConfig", "overrides").([]any)
	for _, o := range overrides {
		name, _ := get(o, "matcher", "options").(string)
		if get(o, "matcher", "id") != "byName" {
			t.Errorf("override matched by %v, want byName (a column)", get(o, "matcher", "id"))
		}
		columns = append(columns, name)
		props := map[string]any{}
		for _, prop := range get(o, "properties").([]any) {
			props[get(prop, "id").(string)] = get(prop, "value")
		}
		if get(props["custom.cellOptions"], "type") != "color-background" || get(props["color"], "mode") != "thresholds" {
			t.Errorf("column %q: cell options %v, colour %v: its cells are not coloured by its thresholds", name, props["custom.cellOptions"], props["color"])
		}
		got := checkSteps(t, "column "+name, props["thresholds"])
		if stepsString(got) != stepsString(want[name]) {
			t.Errorf("column %q: thresholds %s, want %s", name, stepsString(got), stepsString(want[name]))
		}
		if name == "replicas up" {
			m, _ := json.Marshal(props["mappings"])
			if !strings.Contains(string(m), `"0":{"color":"red","text":"no exporter"}`) {
				t.Errorf("column replicas up: mappings %s, want 0 as no exporter, red", m)
			}
		}
	}
	slices.Sort(columns)
	if !slices.Equal(columns, renamed) || len(columns) != len(want) {
		t.Errorf("overrides for columns %v, want one for each of %v", columns, renamed)
	}
	if get(table, "fieldConfig", "defaults", "custom", "cellOptions") != nil {
		t.Errorf("the table's default cell options colour the cluster's name too")
	}
	everUp := `max_over_time(up{job="` + p.scrapeJob + `", job=~"$job"}[1d])`
	n := 0
	for _, e := range exprs(table) {
		if strings.Contains(e, everUp) {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d of the table's queries list the clusters whose exporter was up in the last day (%s), want the alerts' and the replicas'", n, everUp)
	}
}

func ptr(v float64) *float64 { return &v }

// The error budget the dashboard shows is the recorded 30-day one, never
// the dashboard's range taken as the SLO period.
func TestErrorBudgetIsThe30DayOne(t *testing.T) {
	panels := decode(t, buildDefaultParams(t))
	for _, title := range []string{"Error budget left (30 d)"} {
		n := 0
		for _, p := range panels {
			if p["title"] != title {
				continue
			}
			n++
			es := exprs(p)
			if !slices.ContainsFunc(es, func(e string) bool {
				return strings.Contains(e, "probe_path:watchprobe_sli_error_budget_remaining:30d{")
			}) {
				t.Errorf("%s (%v): queries %v, want probe_path:watchprobe_sli_error_budget_remaining:30d", title, p["type"], es)
			}
		}
		if n != 2 {
			t.Errorf("%d panels %q, want the verdict and the SLO row's", n, title)
		}
	}
	for _, p := range panels {
		for _, e := range exprs(p) {
			if regexp.MustCompile(`sli_(burn_rate|error_ratio)[^\[]*\[\$__range\]`).MatchString(e) {
				t.Errorf("%s: %s takes the dashboard's range as the SLO period", p["title"], e)
			}
		}
	}
}

// Each verdict says what pages, red only then: its query "paging" is an
// alert firing in its paging form (never one replica's), shown as quiet or
// firing; beside it the worst replica's value, whose colours have no red.
func TestVerdictsRedMeansPaged(t *testing.T) {
	panels := decode(t, buildDefaultParams(t))
	inVerdicts := false
	n := 0
	for _, p := range panels {
		if p["type"] == "row" {
			inVerdicts = p["title"] == "Verdicts"
			continue
		}
		if !inVerdicts {
			continue
		}
		n++
		refs := map[string]string{}
		for _, q := range p["targets"].([]any) {
			refs[get(q, "refId").(string)] = get(q, "expr").(string)
		}
		if e := refs["paging"]; !strings.Contains(e, `ALERTS{alertname="Watchprobe`) || !strings.Contains(e, `alertstate="firing", vantage_points!="one"`) || !strings.Contains(e, " or 0 * group by ") {
			t.Errorf("%s: paging query %q, want the alert firing in its paging form, 0 while quiet", p["title"], e)
		}
		if refs["replica"] == "" {
			t.Errorf("%s: no worst replica's query beside what pages", p["title"])
		}
		def := checkSteps(t, fmt.Sprint(p["title"]), get(p, "fieldConfig", "defaults", "thresholds"))
		if stepsString(def) != "green, red from 1" {
			t.Errorf("%s: thresholds of what pages %s, want green, red from 1", p["title"], stepsString(def))
		}
		for where, th := range thresholdsOf(p) {
			if where == "override replica" {
				for _, s := range checkSteps(t, fmt.Sprint(p["title"]), th) {
					if s.Color == "red" {
						t.Errorf("%s: the worst replica's value turns red (%s): one replica pages nothing", p["title"], stepsString(checkSteps(t, "", th)))
					}
				}
			}
		}
		m, _ := json.Marshal(p["fieldConfig"])
		if !strings.Contains(string(m), `"color":"red","text":"firing"`) || !strings.Contains(string(m), `"color":"green","text":"quiet"`) {
			t.Errorf("%s: what pages is not named firing (red) and quiet (green): %s", p["title"], m)
		}
	}
	if n != 5 {
		t.Errorf("%d verdicts, want 5", n)
	}
}

// Every rate is per minute: a rate of a counter is 60 times the per-second
// rate, in a panel whose unit is per minute; no panel is per second.
func TestRatesPerMinute(t *testing.T) {
	counterRate := regexp.MustCompile(`\brate\(watchprobe_\w+(_total|_bucket)?\{`)
	perSecond := []string{"ops", "reqps", "rps", "wps", "cps", "iops", "pps"}
	for _, p := range decode(t, buildDefaultParams(t)) {
		unit, _ := get(p, "fieldConfig", "defaults", "unit").(string)
		if p["type"] == "heatmap" {
			unit, _ = get(p, "options", "cellValues", "unit").(string)
		}
		if slices.Contains(perSecond, unit) {
			t.Errorf("%s: unit %s, per second", p["title"], unit)
		}
		for _, e := range exprs(p) {
			// A quantile's rates are of a histogram, not shown.
			if strings.Contains(e, "histogram_quantile(") || !counterRate.MatchString(e) {
				continue
			}
			if !strings.HasPrefix(e, "60 * ") || unit != perMinute {
				t.Errorf("%s (unit %q): %s, want 60 times the rate, per minute", p["title"], unit, e)
			}
		}
	}
}

// The chart's copy is the dashboard with placeholders: each replaced by a
// value as the chart's template writes it gives the dashboard the
// generator builds for those values.
func TestChartTemplateTakesTheValues(t *testing.T) {
	runbooks, err := defaultRunbooks()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chartTemplate(runbooks)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []params{defaultParams(runbooks), custom(t)} {
		// Helm's toString of a number is fmt.Sprint of a float64.
		s := strings.NewReplacer(
			"__WATCHPROBE_SCRAPE_JOB__", p.scrapeJob,
			"__WATCHPROBE_PAGE_SEVERITY__", p.pageSeverity,
			"__WATCHPROBE_OBJECTIVE_HALF__", fmt.Sprint(p.objective/2),
			"__WATCHPROBE_OBJECTIVE__", fmt.Sprint(p.objective),
			"__WATCHPROBE_TARGET__", fmt.Sprint(p.target),
			"__WATCHPROBE_FAST_LONG__", p.fast.long,
			"__WATCHPROBE_FAST_BURN__", fmt.Sprint(p.fast.rate),
			"__WATCHPROBE_SLOW_LONG__", p.slow.long,
			"__WATCHPROBE_SLOW_BURN__", fmt.Sprint(p.slow.rate),
			"__WATCHPROBE_REPLICAS__", fmt.Sprint(p.replicas),
			"__WATCHPROBE_NODES__", fmt.Sprint(p.nodes),
		).Replace(string(tmpl))
		want, err := build(p)
		if err != nil {
			t.Fatal(err)
		}
		if s != string(want) {
			t.Errorf("the chart's copy with objective %v, target %v, windows %v and %v, replicas %v, nodes %v, job %s differs from the dashboard for them",
				p.objective, p.target, p.fast, p.slow, p.replicas, p.nodes, p.scrapeJob)
		}
	}
	if got, err := os.ReadFile("../charts/watchprobe/files/watchprobe.json"); err != nil || !bytes.Equal(got, tmpl) {
		t.Errorf("charts/watchprobe/files/watchprobe.json is stale (%v): run `make dashboards` and commit it", err)
	}
	if _, err := defaultParams(runbooks).withWindows(); err == nil || !strings.Contains(err.Error(), "burn-rate window") {
		t.Errorf("no burn-rate window: error %v, want one that names the windows", err)
	}
	if _, err := defaultParams(runbooks).withWindowsFlag("1h"); err == nil || !strings.Contains(err.Error(), "-burn-windows") {
		t.Errorf("-burn-windows 1h: error %v, want one that names the flag and the form", err)
	}
	p := defaultParams(runbooks)
	p.target = 99
	if err := p.validate(); err == nil || !strings.Contains(err.Error(), "-target") {
		t.Errorf("target 99: error %v, want one that names -target", err)
	}
}

// What the dashboard shows as paged (red) is what pages: every ALERTS
// selector asks for the page severity, so that an agreed ticket
// (ProbeFailing, EventsLost, the slow burns) is never red.
func TestPagedIsThePageSeverity(t *testing.T) {
	p := custom(t)
	data, err := build(p)
	if err != nil {
		t.Fatal(err)
	}
	sels := regexp.MustCompile(`ALERTS\{[^}]*\}`).FindAllString(string(data), -1)
	if len(sels) < 6 {
		t.Fatalf("%d ALERTS selectors, want the five paged verdicts and the worst clusters' column", len(sels))
	}
	for _, s := range sels {
		if !strings.Contains(s, `severity=\"P1\"`) {
			t.Errorf("%s: selects alerts of every severity, want severity=\"P1\" (the page severity) only", s)
		}
	}
}
