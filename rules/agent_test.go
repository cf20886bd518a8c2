package rules

import (
	"bytes"
	"testing"
)

// The node agents' rules (agent.alerts): one node degraded of ten is its
// ticket, four of ten the cluster's page with no tickets, a starved agent
// is not degraded for what starvation makes, one that just started is no
// verdict, restarts raise nothing, and a down or absent agent target is
// missing (watchprobe.agent.rules_test.yml). They render with the agents
// (agent.enabled) or agent.alerts.withoutAgents, never by default; the
// absent-target form only with the agents, where the chart knows they
// are expected.
func TestPromtoolTestRulesAgents(t *testing.T) {
	promtoolTest(t, "watchprobe.agent.rules_test.yml", renderRules(t, "--set", "agent.enabled=true", "--set", "prometheusRule.runbookUrlBase="+testRunbooks))

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
}
