package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/watchprobe/watchprobe/internal/golden"
	"github.com/watchprobe/watchprobe/pkg/check"
)

// The text report of pkg/check's golden report is exactly the golden one,
// so that a change to its shape is seen in review. `go test -run
// TestCheckReportGolden -update` rewrites it.
func TestCheckReportGolden(t *testing.T) {
	js, err := os.ReadFile("../../pkg/check/testdata/report.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var r check.Report
	if err := json.Unmarshal(js, &r); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := writeText(&text, &r); err != nil {
		t.Fatal(err)
	}
	const file = "testdata/check-report.golden.txt"
	if _, same := golden.Check(t, file, text.Bytes()); !same {
		t.Errorf("the report differs from %s (rerun with -update if the change is meant):\n%s", file, &text)
	}
}

// A path pinned to an apiserver that joined too late to be owed any write
// says why it is empty.
func TestCheckReportPinnedPathOwedNothing(t *testing.T) {
	r := &check.Report{Probes: []check.ProbeReport{{Name: "configmaps", Paths: []check.PathReport{
		{Path: "apiserver", APIServer: "10.0.0.2:6443", OK: true},
	}}}, OK: true}
	var text bytes.Buffer
	if err := writeText(&text, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "owed nothing yet") {
		t.Errorf("the text report does not say why the path is empty:\n%s", &text)
	}
}

// The agents' section lists every node not ok, and at most agentRowsOK ok
// ones, saying how many more the JSON lists; an unreadable Lease's error
// is shown; no agent at all says so.
func TestCheckReportAgents(t *testing.T) {
	a := &check.AgentsReport{Namespace: "watchprobe-agents", Totals: check.AgentTotals{Nodes: agentRowsOK + 7, OK: agentRowsOK + 5, Degraded: 1, Unreadable: 1}}
	a.Nodes = append(a.Nodes,
		check.AgentReport{Node: "bad", Zone: "z1", Verdict: check.AgentDegraded, Healthy: true, Missed: 2},
		check.AgentReport{Node: "odd", Verdict: check.AgentUnreadable, Error: "no annotation watchprobe.io/agent-status"})
	for i := range agentRowsOK + 5 {
		a.Nodes = append(a.Nodes, check.AgentReport{Node: fmt.Sprintf("good-%02d", i), Zone: "z1", Verdict: check.AgentOK, Healthy: true})
	}
	var text bytes.Buffer
	if err := writeText(&text, &check.Report{OK: true, Agents: a}); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{
		"node agents in watchprobe-agents: 27 nodes, 25 ok, 1 degraded, 0 stale, 1 unreadable\n",
		"  bad ", "  odd ", fmt.Sprintf("  good-%02d ", agentRowsOK-1),
		"  and 5 more ok nodes (the JSON report lists every node)\n",
		"  odd unreadable: no annotation watchprobe.io/agent-status\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the text report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, fmt.Sprintf("good-%02d", agentRowsOK)) {
		t.Errorf("the text report lists more than %d ok nodes:\n%s", agentRowsOK, out)
	}

	text.Reset()
	if err := writeText(&text, &check.Report{OK: true, Agents: &check.AgentsReport{Namespace: "watchprobe-agents", Nodes: []check.AgentReport{}}}); err != nil {
		t.Fatal(err)
	}
	if want := "node agents in watchprobe-agents: none (no Lease labelled watchprobe.io/component=agent)\n"; !strings.Contains(text.String(), want) {
		t.Errorf("the text report lacks %q:\n%s", want, &text)
	}
}
