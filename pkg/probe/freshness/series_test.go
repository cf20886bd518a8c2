package freshness

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// scrapes are what a Prometheus scraping a registry once between rounds
// would have stored: per scrape, each freshness series' value by its
// exposition name and labels (a histogram by its count).
type scrapes []map[string]float64

// scrape gathers reg's freshness series as one scrape.
func (s *scrapes) scrape(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	one := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "watchprobe_list_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			name, v := mf.GetName(), 0.0
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				name, v = name+"_count", float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("%s: unexpected type %s", mf.GetName(), mf.GetType())
			}
			one[seriesName(name, m.GetLabel())] = v
		}
	}
	*s = append(*s, one)
}

// seriesName is name{labels} with the labels a scrape adds (job,
// instance), sorted, as promtool's input series take them.
func seriesName(name string, labels []*dto.LabelPair) string {
	l := []string{`instance="wp-0"`, `job="watchprobe"`}
	for _, p := range labels {
		l = append(l, fmt.Sprintf("%s=%q", p.GetName(), p.GetValue()))
	}
	sort.Strings(l)
	return name + "{" + strings.Join(l, ",") + "}"
}

// labelPairs are the label pairs of name, value, ...
func labelPairs(nv ...string) []*dto.LabelPair {
	var out []*dto.LabelPair
	for i := 0; i < len(nv); i += 2 {
		out = append(out, &dto.LabelPair{Name: &nv[i], Value: &nv[i+1]})
	}
	return out
}

// firstNotZero are the counters (and histogram counts) whose first scrape
// did not read 0: a rule's increase cannot see their first count.
func (s scrapes) firstNotZero() []string {
	seen := map[string]bool{}
	var out []string
	for _, one := range s {
		for _, k := range slices.Sorted(maps.Keys(one)) {
			if seen[k] {
				continue
			}
			seen[k] = true
			counter := strings.HasSuffix(k[:strings.Index(k, "{")], "_total") || strings.HasSuffix(k[:strings.Index(k, "{")], "_count")
			if counter && one[k] != 0 {
				out = append(out, fmt.Sprintf("%s first scraped at %v", k, one[k]))
			}
		}
	}
	return out
}

// inputSeries is the scrapes as promtool's input series, one scrape a
// minute from 0m: _ before a series first appears, stale once it is gone.
func (s scrapes) inputSeries() string {
	all := map[string]bool{}
	for _, one := range s {
		for k := range one {
			all[k] = true
		}
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(all)) {
		var vals []string
		state := "_"
		for _, one := range s {
			v, ok := one[k]
			switch {
			case ok:
				vals = append(vals, fmt.Sprint(v))
				state = "stale"
			default:
				vals = append(vals, state)
				if state == "stale" {
					state = "_"
				}
			}
		}
		fmt.Fprintf(&b, "      - series: '%s'\n        values: '%s'\n", k, strings.Join(vals, " "))
	}
	return b.String()
}

// firing is, at each scrape's minute, the apiservers (the apiserver
// label) for which alert should fire.
type firing map[int][]string

// promtoolRules runs the chart's default rules (rules/watchprobe.rules.yml)
// over the scrapes with promtool, and asks that alert fire, at each
// scrape's minute want names, for exactly the apiservers it lists.
func (s scrapes) promtoolRules(t *testing.T, alert string, want firing) {
	t.Helper()
	promtool := localcluster.ToolForTest(t, "promtool")
	rules, err := filepath.Abs("../../../rules/watchprobe.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n%s    promql_expr_test:\n", rules, s.inputSeries())
	for _, at := range slices.Sorted(maps.Keys(want)) {
		fmt.Fprintf(&b, "      - expr: count by (apiserver) (ALERTS{alertname=%q,alertstate=\"firing\"})\n        eval_time: %dm\n        exp_samples:\n", alert, at)
		if len(want[at]) == 0 {
			b.WriteString("          []\n")
		}
		for _, a := range want[at] {
			labels := "{}"
			if a != "" {
				labels = fmt.Sprintf("{apiserver=%q}", a)
			}
			fmt.Fprintf(&b, "          - labels: '%s'\n            value: 1\n", labels)
		}
	}
	path := filepath.Join(t.TempDir(), "scrapes.rules_test.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules over the scrapes: %v\n%s\n%s", err, out, b.String())
	}
}
