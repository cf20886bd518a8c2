package charts

import (
	"strings"
	"testing"
)

// renderSet renders the chart with --set-json values over the defaults.
func renderSet(t *testing.T, setJSON ...string) (string, error) {
	t.Helper()
	args := []string{"template", "wp", chartDir, "--namespace", "monitoring"}
	for _, v := range setJSON {
		args = append(args, "--set-json", v)
	}
	return helm(t, args...)
}

// podSpec is the Deployment's pod spec rendered with setJSON.
func podSpec(t *testing.T, setJSON ...string) map[string]any {
	t.Helper()
	out, err := renderSet(t, setJSON...)
	if err != nil {
		t.Fatal(err)
	}
	return field(t, one(t, decodeObjects(t, out), "Deployment"), "spec", "template", "spec").(map[string]any)
}

// No priority class unless set: the cluster's default, as before; set, the
// pods carry it.
func TestKnobPriorityClassName(t *testing.T) {
	if pc, ok := podSpec(t)["priorityClassName"]; ok {
		t.Errorf("priorityClassName %v by default, want none", pc)
	}
	if pc := podSpec(t, `priorityClassName="monitoring"`)["priorityClassName"]; pc != "monitoring" {
		t.Errorf("priorityClassName %v, want monitoring", pc)
	}
}

// imagePullSecrets take names or references, global ones first; none are
// rendered when none are given; a reference without a name is refused.
func TestKnobImagePullSecrets(t *testing.T) {
	if s, ok := podSpec(t)["imagePullSecrets"]; ok {
		t.Errorf("imagePullSecrets %v by default, want none", s)
	}
	got := podSpec(t, `imagePullSecrets=["by-name", {"name": "by-ref"}]`, `global.imagePullSecrets=["global", {"name": "global-ref"}]`)["imagePullSecrets"]
	want := []any{map[string]any{"name": "global"}, map[string]any{"name": "global-ref"}, map[string]any{"name": "by-name"}, map[string]any{"name": "by-ref"}}
	if !equalJSON(got, want) {
		t.Errorf("imagePullSecrets %v, want %v", got, want)
	}
	for _, bad := range []string{`imagePullSecrets=[{"nam": "x"}]`, `imagePullSecrets=[""]`, `imagePullSecrets=[3]`} {
		if _, err := renderSet(t, bad); err == nil || !strings.Contains(err.Error(), "/imagePullSecrets/0") {
			t.Errorf("%s: %v, want the schema to refuse /imagePullSecrets/0", bad, err)
		}
	}
}
