package charts

import (
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/internal/golden"
)

// goldenRenders are the values the golden renders are made with: the
// defaults and each ci/ values file, release wp in namespace monitoring.
var goldenRenders = map[string][]string{
	"defaults":       nil,
	"all-enabled":    {"watchprobe/ci/all-enabled-values.yaml"},
	"overrides":      {"watchprobe/ci/overrides-values.yaml"},
	"two-namespaces": {"watchprobe/ci/two-namespaces-values.yaml"},
	"agent":          {"watchprobe/ci/agent-values.yaml"},
}

// A new value renders nothing until it is set: the chart's output for the
// defaults and for each ci/ values file is the committed golden, byte for
// byte, so that adding a hook cannot change an existing install (and a
// change that means to shows in review). `go test ./charts -run
// TestRenderGolden -update` rewrites them. The dashboard's JSON and the
// rules are left out: TestRulesAndDashboardShipped keeps them equal to
// dashboards/watchprobe.json and rules/watchprobe.rules.yml.
func TestRenderGolden(t *testing.T) {
	for name, files := range goldenRenders {
		args := []string{"template", "wp", chartDir, "--namespace", "monitoring"}
		for _, f := range files {
			args = append(args, "-f", f)
		}
		out, err := helm(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		got := withoutGenerated(t, out)
		path := filepath.Join("testdata", "render", name+".yaml")
		if want, same := golden.Check(t, path, []byte(got)); !same {
			t.Errorf("helm template %s differs from %s (-update rewrites it):\n%s", strings.Join(args[1:], " "), path, lineDiff(string(want), got))
		}
	}
}

// withoutGenerated is a render with the dashboard ConfigMap's data and the
// PrometheusRule's spec replaced by a note.
func withoutGenerated(t *testing.T, manifests string) string {
	t.Helper()
	docs := strings.Split(manifests, "\n---\n")
	for i, doc := range docs {
		var obj struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		switch {
		case obj.Kind == "PrometheusRule":
			docs[i] = doc[:strings.Index(doc, "\nspec:")] + "\nspec: {} # the rules: TestRulesAndDashboardShipped"
		case obj.Kind == "ConfigMap" && strings.HasSuffix(obj.Metadata.Name, "-dashboard"):
			docs[i] = doc[:strings.Index(doc, "\ndata:")] + "\ndata: {} # the dashboard: TestRulesAndDashboardShipped"
		}
	}
	return strings.Join(docs, "\n---\n")
}

// lineDiff lists the lines of got that are not in want and the other way
// round, in order: enough to see which object changed.
func lineDiff(want, got string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	w, g := count(want), count(got)
	var out []string
	for _, l := range strings.Split(want, "\n") {
		if g[l] == 0 {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if w[l] == 0 {
			out = append(out, "+ "+l)
		}
	}
	if len(out) > 60 {
		out = append(out[:60], "...")
	}
	return strings.Join(out, "\n")
}
