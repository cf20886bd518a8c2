// Package rules holds watchprobe's Prometheus rules; this test checks them
// with the real promtool, unit tests included.
package rules

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

func TestPromtoolCheckRules(t *testing.T) {
	out, err := exec.Command(localcluster.ToolForTest(t, "promtool"), "check", "rules", "watchprobe.rules.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// Every alert has a case in which it fires and one in which it must not.
func TestPromtoolTestRules(t *testing.T) {
	out, err := exec.Command(localcluster.ToolForTest(t, "promtool"), "test", "rules", "watchprobe.rules_test.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	rules, tests := read(t, "watchprobe.rules.yml"), read(t, "watchprobe.rules_test.yml")
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)`).FindAllStringSubmatch(rules, -1) {
		alert := m[1]
		fires := regexp.MustCompile(`alertname: ` + alert + `\n\s+exp_alerts:\n\s+- exp_labels`).MatchString(tests)
		silent := regexp.MustCompile(`alertname: ` + alert + `\n\s+exp_alerts: \[\]`).MatchString(tests)
		if !fires || !silent {
			t.Errorf("%s: a firing case %v, a silent case %v", alert, fires, silent)
		}
	}
}

// Every alert carries a severity, a summary, a description and a runbook
// link to a section of the README that exists.
func TestAlertsAreDocumented(t *testing.T) {
	rules, readme := read(t, "watchprobe.rules.yml"), read(t, "../README.md")
	blocks := regexp.MustCompile(`(?m)^\s+- alert: `).Split(rules, -1)[1:]
	for _, b := range blocks {
		name := strings.Fields(b)[0]
		for _, want := range []string{"severity: ", "summary: ", "description: ", "runbook_url: "} {
			if !strings.Contains(b, want) {
				t.Errorf("%s lacks %s", name, strings.TrimSuffix(want, ": "))
			}
		}
		anchor := strings.ToLower(name)
		if !strings.Contains(b, "README.md#"+anchor) {
			t.Errorf("%s: runbook_url does not point at README.md#%s", name, anchor)
		}
		if !strings.Contains(readme, "\n#### "+name+"\n") {
			t.Errorf("README has no runbook section \"#### %s\"", name)
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
