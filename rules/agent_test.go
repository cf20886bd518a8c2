package rules

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/watchprobe/watchprobe/internal/repotest"
)

// The node agents' rules (agent.alerts): one node degraded of ten is its
// ticket, four of ten the cluster's page with no tickets, a starved agent
// is not degraded for what starvation makes, one that just started is no
// verdict, restarts raise nothing, and a down or absent agent target, or
// an agent that writes nothing, is missing (watchprobe.agent.rules_test.yml). They render with the agents
// (agent.enabled) or agent.alerts.withoutAgents, never by default; the
// absent-target form only with the agents, where the chart knows they
// are expected.
func TestPromtoolTestRulesAgents(t *testing.T) {
	promtoolTest(t, "watchprobe.agent.rules_test.yml", renderRules(t, "--set", "agent.enabled=true", "--set", "prometheusRule.runbookUrlBase="+testRunbooks))
	// Every alert of the shipped agent rules has a case in which it fires
	// and one in which it must not.
	rules, tests := repotest.Read(t, "watchprobe.agent.rules.yml"), repotest.Read(t, "watchprobe.agent.rules_test.yml")
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\S+)`).FindAllStringSubmatch(rules, -1)
	for _, m := range alerts {
		fires := regexp.MustCompile(`alertname: ` + m[1] + `\n\s+exp_alerts:\n\s+- exp_labels`).MatchString(tests)
		silent := regexp.MustCompile(`alertname: ` + m[1] + `\n\s+exp_alerts: \[\]`).MatchString(tests)
		if !fires || !silent {
			t.Errorf("%s: a firing case %v, a silent case %v", m[1], fires, silent)
		}
	}
	if len(alerts) != 3 {
		t.Errorf("%d alerts in watchprobe.agent.rules.yml, want the node agents' three", len(alerts))
	}

	if rules := renderRules(t); bytes.Contains(rules, []byte("watchprobe_agent_")) {
		t.Error("the chart's default rules have the node agents' rules, without agent.enabled")
	}
	if rules := renderRules(t, "--set", "agent.enabled=true", "--set", "agent.alerts.enabled=false"); bytes.Contains(rules, []byte("watchprobe_agent_")) {
		t.Error("agent.alerts.enabled=false rendered the node agents' rules")
	}
	without := renderRules(t, withAgentRules...)
	if !bytes.Contains(without, []byte("alert: WatchprobeNodesWatchDegraded")) {
		t.Error("agent.alerts.withoutAgents rendered no node agents' alerts")
	}
	if bytes.Contains(without, []byte(`absent(up{job="watchprobe-agent"})`)) {
		t.Error("without agent.enabled, WatchprobeAgentsMissing fires where no agent target is there at all")
	}
	// The values reach the rules.
	custom := string(renderRules(t, "--set", "agent.enabled=true", "--set-json", "agent.alerts.manyFraction=0.5", "--set", "agent.alerts.minNodes=5",
		"--set", "agent.alerts.window=20m", "--set", "agent.scrapeJob=agents", "--set", "agent.alerts.nodesWatchDegraded.severity=ticket"))
	for _, want := range []string{">= 0.5 * sum without (zone) (zone:watchprobe_agents_reporting:count20m)", "(zone:watchprobe_agents_degraded:count20m) >= 5\n",
		"record: node:watchprobe_agent_degraded:20m", "watchprobe_agent_writes_total offset 20m", `up{job="agents"} == 0`} {
		if !strings.Contains(custom, want) {
			t.Errorf("the rules rendered with custom agent.alerts values lack %q", want)
		}
	}
	for _, r := range alertRules(t, []byte(custom)) {
		if r.Alert == "WatchprobeNodesWatchDegraded" && r.Labels["severity"] != "warning" {
			t.Errorf("WatchprobeNodesWatchDegraded with severity ticket has labels %v", r.Labels)
		}
	}
}
