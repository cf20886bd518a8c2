package check

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/agent"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// agentLease is a node agent's Lease as the apiserver would hold it:
// status as its annotation ("" for none), written as the time of its
// field manager's managedFields entry (zero for no entry), and an older
// entry of another manager that must not count.
func agentLease(node, status string, written time.Time) coordinationv1.Lease {
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: "watchprobe-agents",
		Labels: map[string]string{agent.LabelComponent: agent.ComponentAgent}}}
	if status != "" {
		l.Annotations = map[string]string{agent.AnnotationStatus: status}
	}
	later := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	l.ManagedFields = append(l.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl-annotate", Operation: metav1.ManagedFieldsOperationUpdate, Time: &later})
	if !written.IsZero() {
		w := metav1.NewTime(written)
		l.ManagedFields = append(l.ManagedFields, metav1.ManagedFieldsEntry{Manager: agent.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &w})
	}
	return l
}

func statusOf(s agent.Status) string { return s.Encode() }

var healthyAgent = agent.Status{Healthy: true, Zone: "z1", Interval: agent.Duration(10 * time.Second), Deadline: agent.Duration(5 * time.Second), Writes: 100,
	P50: agent.Duration(3 * time.Millisecond), P90: agent.Duration(6 * time.Millisecond), Max: agent.Duration(9 * time.Millisecond)}

// Each agent's verdict from its Lease alone: degraded by any count of its
// status that says so, stale only by the apiserver's stamps (3 of its own
// intervals and the deadline behind the newest agent's write, a stale
// status's counts never degraded), unreadable without a status or a stamp
// of the agent's field manager (another manager's does not date it); the
// nodes ordered degraded, refused, stale, unreadable, ok, then by name; the totals
// count them.
func TestJudgeAgents(t *testing.T) {
	now := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	with := func(f func(*agent.Status)) string {
		s := healthyAgent
		f(&s)
		return statusOf(s)
	}
	slow := with(func(s *agent.Status) { s.Interval = agent.Duration(time.Minute) })
	leases := []coordinationv1.Lease{
		agentLease("n-ok", statusOf(healthyAgent), now),
		// 3 intervals and the deadline behind: still writing.
		agentLease("n-ok-behind", statusOf(healthyAgent), now.Add(-35*time.Second)),
		agentLease("n-stale", statusOf(healthyAgent), now.Add(-36*time.Second)),
		// A slower agent is allowed its own 3 intervals.
		agentLease("n-slow", slow, now.Add(-3*time.Minute)),
		agentLease("n-stale-degraded", with(func(s *agent.Status) { s.Missed, s.Recent.Missed = 1, 1 }), now.Add(-time.Hour)),
		agentLease("n-missed", with(func(s *agent.Status) {
			s.Missed, s.Lost, s.Recent, s.WatchConn = 2, 1, agent.Counts{Missed: 2, Lost: 1}, "10.0.1.7:41234 -> 10.0.0.1:6443"
		}), now),
		agentLease("n-stall", with(func(s *agent.Status) { s.Stalls, s.Recent.Stalls = 1, 1 }), now),
		agentLease("n-unhealthy", with(func(s *agent.Status) { s.Healthy = false }), now),
		// Unhealthy for its own refused requests: not the node's.
		agentLease("n-refused", with(func(s *agent.Status) { s.Healthy, s.Refused = false, true }), now),
		// Write errors, relists, unmeasurable writes, a stream that ended
		// and resumed with nothing missed, and troubles older than the
		// window degrade nothing.
		agentLease("n-busy", with(func(s *agent.Status) {
			s.WriteErrors, s.Relists, s.Unmeasurable, s.StreamEnds, s.Missed, s.Stalls = 3, 2, 5, 4, 7, 1
		}), now),
		agentLease("n-none", "", now),
		agentLease("n-garbled", `{"healthy":`, now),
		agentLease("n-undated", statusOf(healthyAgent), time.Time{}),
	}
	r := judgeAgents("watchprobe-agents", leases)
	type nv struct{ node, verdict string }
	var got []nv
	for _, n := range r.Nodes {
		got = append(got, nv{n.Node, n.Verdict})
	}
	want := []nv{
		{"n-missed", AgentDegraded}, {"n-stall", AgentDegraded}, {"n-unhealthy", AgentDegraded},
		{"n-refused", AgentRefused},
		{"n-stale", AgentStale}, {"n-stale-degraded", AgentStale},
		{"n-garbled", AgentUnreadable}, {"n-none", AgentUnreadable}, {"n-undated", AgentUnreadable},
		{"n-busy", AgentOK}, {"n-ok", AgentOK}, {"n-ok-behind", AgentOK}, {"n-slow", AgentOK},
	}
	if !slices.Equal(got, want) {
		t.Errorf("verdicts\n%v\nwant\n%v", got, want)
	}
	if want := (AgentTotals{Nodes: 13, OK: 4, Degraded: 3, Stale: 2, Unreadable: 3, Refused: 1}); r.Totals != want {
		t.Errorf("totals %+v, want %+v", r.Totals, want)
	}
	byNode := map[string]AgentReport{}
	for _, n := range r.Nodes {
		byNode[n.Node] = n
	}
	if m := byNode["n-missed"]; m.Zone != "z1" || m.Missed != 2 || m.Lost != 1 || m.Writes != 100 || m.IntervalSeconds != 10 || !m.Healthy ||
		m.WatchConn != "10.0.1.7:41234 -> 10.0.0.1:6443" || m.Latency == nil || *m.Latency != (AgentLatency{P50: 0.003, P90: 0.006, Max: 0.009}) {
		t.Errorf("n-missed's counts %+v", m)
	}
	if s := byNode["n-stale"]; s.Written == nil || !s.Written.Equal(now.Add(-36*time.Second)) || s.BehindSeconds == nil || *s.BehindSeconds != 36 {
		t.Errorf("n-stale: written %v, behind %v: want the agent's own stamp, 36s behind n-ok's", s.Written, s.BehindSeconds)
	}
	for node, want := range map[string]string{
		"n-none":    "no annotation " + agent.AnnotationStatus,
		"n-garbled": "annotation " + agent.AnnotationStatus + ":",
		"n-undated": "no write of field manager " + agent.FieldManager,
	} {
		if got := byNode[node].Error; !strings.HasPrefix(got, want) {
			t.Errorf("%s: error %q, want it to start %q", node, got, want)
		}
	}
	if u := byNode["n-undated"]; u.Written != nil || u.BehindSeconds != nil {
		t.Errorf("n-undated: written %v, behind %v: want neither", u.Written, u.BehindSeconds)
	}
}

// No Lease, no verdict: an empty section, all totals 0.
func TestJudgeAgentsNone(t *testing.T) {
	r := judgeAgents("watchprobe-agents", nil)
	if r.Nodes == nil || len(r.Nodes) != 0 || r.Totals != (AgentTotals{}) {
		t.Errorf("%+v", r)
	}
}

// A degraded agent is a note unless the options make it a problem; stale
// and unreadable ones are notes; a note from the listing is kept.
func TestReportAgents(t *testing.T) {
	now := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	degraded := healthyAgent
	degraded.Stalls, degraded.Recent.Stalls = 1, 1
	a := judgeAgents("watchprobe-agents", []coordinationv1.Lease{
		agentLease("n1", statusOf(healthyAgent), now),
		agentLease("n2", statusOf(degraded), now),
		agentLease("n3", statusOf(healthyAgent), now.Add(-time.Hour)),
	})
	for _, fail := range []bool{false, true} {
		f := newReportFixture()
		t1 := f.probe(reportConfig(metrics.PathWatch))
		deliver(t1, path(metrics.PathWatch, ""), 3)
		cycles(t1, true, true, true)
		f.c.agents, f.c.opts.AgentsFailOnDegraded = a, fail
		r := f.report()
		got := asJSON(t, r)
		degradedLine := "node agents: 1 of 3 nodes degraded (n2): "
		staleLine := "node agents: 1 of 3 nodes stale (n3): "
		hasPrefix := func(lines []string, p string) bool {
			return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, p) })
		}
		if got.Agents == nil || got.Agents.Totals != (AgentTotals{Nodes: 3, OK: 1, Degraded: 1, Stale: 1}) {
			t.Errorf("fail on degraded %v: agents %+v", fail, got.Agents)
		}
		if !hasPrefix(got.Notes, staleLine) {
			t.Errorf("fail on degraded %v: notes %q lack %q", fail, got.Notes, staleLine)
		}
		if hasPrefix(got.Problems, degradedLine) != fail || hasPrefix(got.Notes, degradedLine) == fail || got.OK == fail || (r.Verdict() == Fails) != fail {
			t.Errorf("fail on degraded %v: ok %v, verdict %v, problems %q, notes %q", fail, got.OK, r.Verdict(), got.Problems, got.Notes)
		}
	}

	f := newReportFixture()
	t1 := f.probe(reportConfig(metrics.PathWatch))
	deliver(t1, path(metrics.PathWatch, ""), 3)
	cycles(t1, true, true, true)
	f.c.agentsNote = "node agents not read: why"
	r := f.report()
	if !r.OK || r.Agents != nil || !slices.Equal(r.Notes, []string{"node agents not read: why"}) {
		t.Errorf("ok %v, agents %+v, notes %q: want ok, no section, the note", r.OK, r.Agents, r.Notes)
	}
}
