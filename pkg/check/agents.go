package check

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/agent"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// The verdicts of a node's agent, as the report names them.
const (
	// AgentOK: its latest write says its watch path missed and lost
	// nothing and did not stall in the agent's last agent.StatusWindow,
	// and is healthy.
	AgentOK = "ok"
	// AgentDegraded: its latest write says otherwise (agent.Status.Degraded).
	AgentDegraded = "degraded"
	// AgentStale: its latest write is too far behind the newest agent's
	// to say anything of now: the agent is not writing.
	AgentStale = "stale"
	// AgentUnreadable: its Lease carries no status the check can read, or
	// no write of the agent's field manager to date it.
	AgentUnreadable = "unreadable"
	// AgentRefused: the agent's own requests are refused (its Role, its
	// namespace, a policy): it measures nothing of the node.
	AgentRefused = "refused"
)

// agentOrder lists the verdicts in the report's order: those to act on
// first.
var agentOrder = []string{AgentDegraded, AgentRefused, AgentStale, AgentUnreadable, AgentOK}

// AgentsReport is what the node agents' Leases said when the check ended.
type AgentsReport struct {
	Namespace string        `json:"namespace"`
	Totals    AgentTotals   `json:"totals"`
	Nodes     []AgentReport `json:"nodes"`
}

// AgentTotals count the nodes by verdict.
type AgentTotals struct {
	Nodes      int `json:"nodes"`
	OK         int `json:"ok"`
	Degraded   int `json:"degraded"`
	Stale      int `json:"stale"`
	Unreadable int `json:"unreadable"`
	Refused    int `json:"refused"`
}

// AgentReport is one node's agent as its Lease tells it.
type AgentReport struct {
	Node    string `json:"node"`
	Zone    string `json:"zone"`
	Verdict string `json:"verdict"`
	// Error says why an unreadable Lease is so.
	Error           string  `json:"error,omitempty"`
	Healthy         bool    `json:"healthy"`
	Refused         bool    `json:"refused"`
	IntervalSeconds float64 `json:"interval_seconds"`
	Writes          uint64  `json:"writes"`
	WriteErrors     uint64  `json:"write_errors"`
	Missed          uint64  `json:"missed"`
	Lost            uint64  `json:"lost"`
	Stalls          uint64  `json:"stalls"`
	StreamEnds      uint64  `json:"stream_ends"`
	Relists         uint64  `json:"relists"`
	Unmeasurable    uint64  `json:"unmeasurable"`
	// Recent are the misses, losses and stalls of the agent's last
	// agent.StatusWindow before its latest write, which its verdict is
	// judged by; the counts above are since the agent started.
	Recent AgentCounts `json:"recent"`
	// WatchConn is the agent's watch connection, "local -> remote", as
	// the node's conntrack and ss show it: where to look on the node.
	WatchConn string `json:"watch_conn,omitempty"`
	// Latency is of the events that arrived in the agent's last
	// agent.StatusWindow before its latest write; nil when none did.
	Latency *AgentLatency `json:"latency_seconds"`
	// Written is when the apiserver took the agent's latest write, by the
	// apiserver's clock (its managedFields time, to the second); nil when
	// unknown. Behind is how much earlier that was than the newest agent
	// write.
	Written       *time.Time `json:"written,omitempty"`
	BehindSeconds *float64   `json:"behind_seconds,omitempty"`
}

// AgentCounts are an agent's troubles over a window.
type AgentCounts struct {
	Missed uint64 `json:"missed"`
	Lost   uint64 `json:"lost"`
	Stalls uint64 `json:"stalls"`
}

// AgentLatency is an agent's latency summary, in seconds.
type AgentLatency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	Max float64 `json:"max"`
}

// judgeAgents judges the agents' Leases. A Lease is stale when its
// latest write by agent.FieldManager is older than the newest such write
// among leases by more than 3 of its intervals and its deadline (both
// from its status): the agent would have written again by then. Every time
// compared is the apiserver's managedFields stamp, so neither a node's
// clock nor the checker's enters; the price is that agents which all
// stopped together are none of them stale, and their Written times tell.
func judgeAgents(namespace string, leases []coordinationv1.Lease) *AgentsReport {
	type judged struct {
		r       AgentReport
		written time.Time
		status  agent.Status
	}
	var all []judged
	var newest time.Time
	for _, l := range leases {
		j := judged{r: AgentReport{Node: l.Name}}
		if w, ok := agentWritten(l.ManagedFields); ok {
			j.written = w
			if w.After(newest) {
				newest = w
			}
		}
		v, ok := l.Annotations[agent.AnnotationStatus]
		switch s, err := agent.ParseStatus(v); {
		case !ok:
			j.r.Verdict, j.r.Error = AgentUnreadable, "no annotation "+agent.AnnotationStatus
		case err != nil:
			j.r.Verdict, j.r.Error = AgentUnreadable, err.Error()
		default:
			j.status = s
			j.r.fill(s)
		}
		if j.r.Verdict == "" && j.written.IsZero() {
			j.r.Verdict, j.r.Error = AgentUnreadable, "no write of field manager "+agent.FieldManager+" in its managedFields: its age is unknown"
		}
		all = append(all, j)
	}
	rep := &AgentsReport{Namespace: namespace, Nodes: []AgentReport{}}
	for _, j := range all {
		if !j.written.IsZero() {
			w := j.written.UTC()
			behind := newest.Sub(w).Seconds()
			j.r.Written, j.r.BehindSeconds = &w, &behind
		}
		if j.r.Verdict == "" {
			bound := 3*time.Duration(j.status.Interval) + time.Duration(j.status.Deadline)
			switch {
			case newest.Sub(j.written) > bound:
				j.r.Verdict = AgentStale
			case j.status.Refused:
				j.r.Verdict = AgentRefused
			case j.status.Degraded():
				j.r.Verdict = AgentDegraded
			default:
				j.r.Verdict = AgentOK
			}
		}
		rep.Totals.add(j.r.Verdict)
		rep.Nodes = append(rep.Nodes, j.r)
	}
	slices.SortFunc(rep.Nodes, func(a, b AgentReport) int {
		return cmp.Or(cmp.Compare(slices.Index(agentOrder, a.Verdict), slices.Index(agentOrder, b.Verdict)), cmp.Compare(a.Node, b.Node))
	})
	return rep
}

func (t *AgentTotals) add(verdict string) {
	t.Nodes++
	switch verdict {
	case AgentOK:
		t.OK++
	case AgentDegraded:
		t.Degraded++
	case AgentStale:
		t.Stale++
	case AgentUnreadable:
		t.Unreadable++
	case AgentRefused:
		t.Refused++
	}
}

// fill copies an agent's status into its report.
func (r *AgentReport) fill(s agent.Status) {
	r.Zone, r.Healthy, r.Refused, r.IntervalSeconds = s.Zone, s.Healthy, s.Refused, time.Duration(s.Interval).Seconds()
	r.Recent = AgentCounts{Missed: s.Recent.Missed, Lost: s.Recent.Lost, Stalls: s.Recent.Stalls}
	r.Writes, r.WriteErrors, r.Missed, r.Lost = s.Writes, s.WriteErrors, s.Missed, s.Lost
	r.Stalls, r.StreamEnds, r.Relists, r.Unmeasurable = s.Stalls, s.StreamEnds, s.Relists, s.Unmeasurable
	r.WatchConn = s.WatchConn
	if s.P50 != 0 || s.P90 != 0 || s.Max != 0 {
		r.Latency = &AgentLatency{P50: time.Duration(s.P50).Seconds(), P90: time.Duration(s.P90).Seconds(), Max: time.Duration(s.Max).Seconds()}
	}
}

// agentWritten is the apiserver's time of the agent's latest write: the
// latest managedFields entry of its field manager.
func agentWritten(fields []metav1.ManagedFieldsEntry) (time.Time, bool) {
	var latest time.Time
	for _, f := range fields {
		if f.Manager == agent.FieldManager && f.Time != nil && f.Time.After(latest) {
			latest = f.Time.Time
		}
	}
	return latest, !latest.IsZero()
}

// agentsGrant is the permission the agents' section needs, and where.
func agentsGrant(namespace string) string {
	return fmt.Sprintf("grant list on leases.coordination.k8s.io in namespace %s (a Role and RoleBinding there), or pass --agents.namespace= to skip the agents", namespace)
}

// preflightAgents finds out whether the agents' Leases may be listed:
// if not, the check runs all the same, and its report says so.
func (c *Check) preflightAgents(ctx context.Context, client *kube.Client) {
	ns := c.opts.AgentsNamespace
	if ns == "" {
		return
	}
	switch missing, err := deniedVerbs(ctx, client, ns, "coordination.k8s.io", "leases", []string{"list"}); {
	case err != nil:
		c.opts.Logger.Warn("cannot review this identity's permissions; trying to list the node agents anyway", "err", err)
	case len(missing) > 0:
		c.agentsNote = fmt.Sprintf("node agents not read: this identity may not list the Leases in namespace %s; %s", ns, agentsGrant(ns))
		c.opts.Logger.Warn(c.agentsNote)
	}
}

// readAgents lists the agents' Leases, once, and judges them; a failure
// is a note of the report, never the check's failure.
func (c *Check) readAgents() {
	ns := c.opts.AgentsNamespace
	if ns == "" || c.agentsNote != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := kube.NewClient(c.opts.Config)
	if err != nil {
		c.agentsNote = fmt.Sprintf("node agents not read: %v", err)
		return
	}
	list, err := client.Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: agent.LabelComponent + "=" + agent.ComponentAgent})
	switch {
	case apierrors.IsForbidden(err):
		c.agentsNote = fmt.Sprintf("node agents not read: listing the Leases in namespace %s was forbidden; %s", ns, agentsGrant(ns))
	case err != nil:
		c.agentsNote = fmt.Sprintf("node agents not read: cannot list the Leases in namespace %s: %v", ns, err)
	default:
		c.agents = judgeAgents(ns, list.Items)
	}
}

// addAgents puts the agents' section into the report: the nodes not ok
// are notes, and problems only where the options say degraded nodes fail
// the check. The counters are the agents' since they started, not of the
// check's run: by default they inform, they do not fail it.
func (r *Report) addAgents(a *AgentsReport, note string, failOnDegraded bool) {
	if note != "" {
		r.Notes = append(r.Notes, note)
	}
	if a == nil {
		return
	}
	r.Agents = a
	nodes := func(verdict string) string {
		var names []string
		for _, n := range a.Nodes {
			if n.Verdict == verdict {
				names = append(names, n.Node)
			}
		}
		const shown = 10
		if len(names) > shown {
			return strings.Join(names[:shown], ", ") + fmt.Sprintf(" and %d more", len(names)-shown)
		}
		return strings.Join(names, ", ")
	}
	t := a.Totals
	if t.Degraded > 0 {
		line := fmt.Sprintf("node agents: %d of %d nodes degraded (%s): their agents missed or lost events, or their watches stalled, in their last 10 minutes, or they are unhealthy now", t.Degraded, t.Nodes, nodes(AgentDegraded))
		if failOnDegraded {
			r.OK = false
			r.Problems = append(r.Problems, line)
		} else {
			r.Notes = append(r.Notes, line+"; --agents.fail-on-degraded makes this fail the check")
		}
	}
	if t.Refused > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("node agents: %d of %d nodes' agents refused (%s): their own requests are refused (their Role, their namespace, a policy), so they measure nothing of their nodes; see their logs", t.Refused, t.Nodes, nodes(AgentRefused)))
	}
	if t.Stale > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("node agents: %d of %d nodes stale (%s): their latest write is more than 3 intervals and the deadline older than the newest agent's, so they are not writing; is their agent running?", t.Stale, t.Nodes, nodes(AgentStale)))
	}
	if t.Unreadable > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("node agents: %d of %d Leases unreadable (%s): see each one's error", t.Unreadable, t.Nodes, nodes(AgentUnreadable)))
	}
}
