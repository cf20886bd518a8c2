package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/agent"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// The agents' settings in the test: a write every 6 s, judged against a
// 4 s deadline, which a clean path on a loaded machine keeps; the delayed
// node's path holds every chunk from the apiserver 5 s, one after the
// other, so each of its events is late: on its watch's connection the
// chunks (an event every 6 s, a bookmark a minute) seldom queue, on its
// writes' connection a write's answer (several frames) does, and the node
// writes less often. A stall is 12 s of silence while a write is owed;
// client-go's HTTP/2 health check pings a connection silent for 30 s and
// closes it 5 s after an unanswered ping, so a silently dropped watch is
// seen stalled, at most 18 s after the drop, before it is ended.
const (
	interval   = 6 * time.Second
	deadline   = 4 * time.Second
	pathDelay  = 5 * time.Second
	stallAfter = 12 * time.Second
)

// agentNode is an agent running on a node of the test's.
type agentNode struct {
	net  *localcluster.NetNode
	proc *localcluster.NodeProcess
	url  string
}

func (n *agentNode) scrape(t *testing.T) counts {
	t.Helper()
	fams, err := exportertest.ScrapeNative(n.url)
	if err != nil {
		t.Fatalf("scraping the agent on %s: %v\n%s", n.net.Name, err, n.proc.LogTail(20))
	}
	get := func(name string) float64 {
		v, _ := exportertest.Sum(fams, name, map[string]string{"node": n.net.Name})
		return v
	}
	arrived, sum := exportertest.HistogramSum(fams, "watchprobe_agent_event_latency_seconds", map[string]string{"node": n.net.Name})
	return counts{
		writes: get("watchprobe_agent_writes_total"), writeErrors: get("watchprobe_agent_write_errors_total"),
		missed: get("watchprobe_agent_events_missed_total"), lost: get("watchprobe_agent_events_lost_total"),
		stalls: get("watchprobe_agent_stalls_total"), streamEnds: get("watchprobe_agent_stream_ends_total"),
		relists: get("watchprobe_agent_relists_total"), unmeasurable: get("watchprobe_agent_unmeasurable_total"),
		arrived: arrived, latencySum: sum, healthy: get("watchprobe_agent_healthy"), refused: get("watchprobe_agent_refused"),
	}
}

func (n *agentNode) status(t *testing.T) agent.Status {
	t.Helper()
	code, body, err := exportertest.Get(n.url+"/status", "")
	if err != nil || code != 200 {
		t.Fatalf("the agent's status on %s: %d %v", n.net.Name, code, err)
	}
	var s agent.Status
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("the agent's status on %s: %v: %s", n.net.Name, err, body)
	}
	return s
}

type counts struct {
	writes, writeErrors, missed, lost, stalls, streamEnds, relists, unmeasurable, arrived, latencySum, healthy, refused float64
}

// settled: every acknowledged write was delivered or is unmeasurable.
func (c counts) settled() bool { return c.writes > 0 && c.arrived+c.unmeasurable == c.writes }

// waitFor polls the agent until cond holds of its counts, for at most
// within: the agents' own counts are the events waited on.
func (n *agentNode) waitFor(t *testing.T, what string, within time.Duration, cond func(counts) bool) counts {
	t.Helper()
	end := time.Now().Add(within)
	for {
		c := n.scrape(t)
		if cond(c) {
			return c
		}
		if time.Now().After(end) {
			t.Fatalf("the agent on %s: %s did not happen within %s; counts %+v\n%s", n.net.Name, what, within, c, n.proc.LogTail(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Agents on three nodes, one node's path delayed, another's watch
// connection silently dropped inside its namespace as a dead conntrack
// entry drops it: each verdict names its node, the clean node has none,
// and an independent watch over a clean path shows every write committed
// and delivered by the apiserver, so the delay and the stall are the
// nodes' paths.
func TestAgentsNameTheNodeWhosePathFails(t *testing.T) {
	cluster := localcluster.StartForTest(t, localcluster.Options{})
	dir := t.TempDir()
	bin := filepath.Join(dir, "watchprobe-agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	const ns = "watchprobe-agents"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	independent := watchAgents(ctx, t, admin, ns)

	names := []string{"node-clean", "node-delayed", "node-dropped"}
	zones := map[string]string{"node-clean": "zone-a", "node-delayed": "zone-a", "node-dropped": "zone-b"}
	nodes := map[string]*agentNode{}
	for _, name := range names {
		// The Node objects the agents read their zone and owner from.
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{agent.LabelZone: zones[name]}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nn, err := cluster.AddNetNode(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := nn.Close(); err != nil {
				t.Errorf("removing %s: %v", nn, err)
			}
		})
		kubeconfig := filepath.Join(dir, name+".kubeconfig")
		if err := nn.WriteKubeconfig(kubeconfig); err != nil {
			t.Fatal(err)
		}
		if name == "node-delayed" {
			nn.Proxy().Delay(pathDelay)
		}
		addr := nn.IP() + ":9918"
		proc, err := nn.Start("agent", bin, []string{"HTTP2_READ_IDLE_TIMEOUT_SECONDS=30", "HTTP2_PING_TIMEOUT_SECONDS=5"},
			"--node", name, "--namespace", ns, "--kubeconfig", kubeconfig,
			"--min-interval", interval.String(), "--deadline", deadline.String(), "--stall-after", stallAfter.String(),
			"--web.listen-address", addr)
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = &agentNode{net: nn, proc: proc, url: "http://" + addr}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the agent on %s:\n%s", name, proc.LogTail(40))
			}
		})
	}
	for _, name := range names {
		nodes[name].waitFor(t, "three writes delivered", 2*time.Minute, func(c counts) bool { return c.settled() && c.arrived >= 3 })
	}

	// The dropped node: its watch's connection, as the agent names it,
	// silently dropped both ways inside the node's namespace. The writes'
	// connection goes on.
	dropped := nodes["node-dropped"]
	conn := dropped.status(t).WatchConn
	local, _, ok := strings.Cut(conn, " -> ")
	if !ok {
		t.Fatalf("the agent on node-dropped names no watch connection: %q", conn)
	}
	_, port, _ := strings.Cut(local, ":")
	for _, rule := range [][]string{
		{"iptables", "-w", "-A", "OUTPUT", "-p", "tcp", "--sport", port, "-j", "DROP"},
		{"iptables", "-w", "-A", "INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"},
	} {
		if out, err := dropped.net.Exec(rule...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	before := dropped.scrape(t)
	dropped.waitFor(t, "a stall", time.Minute, func(c counts) bool { return c.stalls > before.stalls })
	dropped.waitFor(t, "the dead watch ended, and every write delivered again", 2*time.Minute, func(c counts) bool {
		return c.streamEnds > before.streamEnds && c.settled() && c.writes > before.writes+1
	})
	if now := dropped.status(t).WatchConn; now == conn {
		t.Errorf("the agent on node-dropped still watches over %s", conn)
	}

	// Every node settled, its counts read from one scrape each; the
	// dropped node's path recovered: its newest write on time again.
	final := map[string]counts{}
	for _, name := range names {
		final[name] = nodes[name].waitFor(t, "every write delivered", 2*time.Minute, func(c counts) bool {
			return c.settled() && (name != "node-dropped" || c.healthy == 1)
		})
	}
	for _, name := range names {
		c := final[name]
		t.Logf("%s: %+v (mean latency %.3fs)", name, c, c.latencySum/max(c.arrived, 1))
		if c.lost != 0 || c.writeErrors != 0 || c.relists != 0 || c.refused != 0 {
			t.Errorf("%s: lost %g, write errors %g, relists %g, refused %g; want none", name, c.lost, c.writeErrors, c.relists, c.refused)
		}
	}
	clean, delayed, drop := final["node-clean"], final["node-delayed"], final["node-dropped"]
	if clean.missed != 0 || clean.stalls != 0 || clean.streamEnds != 0 || clean.healthy != 1 {
		t.Errorf("node-clean: missed %g, stalls %g, stream ends %g, healthy %g; want a clean node", clean.missed, clean.stalls, clean.streamEnds, clean.healthy)
	}
	if delayed.missed+delayed.unmeasurable != delayed.writes || delayed.stalls != 0 || delayed.streamEnds != 0 || delayed.healthy != 0 {
		t.Errorf("node-delayed: missed %g + unmeasurable %g of %g writes, stalls %g, stream ends %g, healthy %g; want every write late, no stall, unhealthy",
			delayed.missed, delayed.unmeasurable, delayed.writes, delayed.stalls, delayed.streamEnds, delayed.healthy)
	}
	if mean := time.Duration(delayed.latencySum / delayed.arrived * float64(time.Second)); mean < pathDelay {
		t.Errorf("node-delayed: mean latency %s, want at least the path's delay, %s", mean, pathDelay)
	}
	if s := nodes["node-delayed"].status(t); time.Duration(s.P50) < pathDelay {
		t.Errorf("node-delayed's status: p50 %s, want at least %s", time.Duration(s.P50), pathDelay)
	}
	if drop.stalls != 1 || drop.streamEnds != 1 || drop.missed < 1 || drop.healthy != 1 {
		t.Errorf("node-dropped: stalls %g, stream ends %g, missed %g; want one stall, one broken stream, the writes of the outage missed, and healthy again", drop.stalls, drop.streamEnds, drop.missed)
	}

	// Each agent's series carry its Node's zone, and its Lease is owned
	// by its Node.
	for _, name := range names {
		fams, err := exportertest.ScrapeNative(nodes[name].url)
		if err != nil {
			t.Fatal(err)
		}
		if _, found := exportertest.Sum(fams, "watchprobe_agent_writes_total", map[string]string{"node": name, "zone": zones[name]}); !found {
			t.Errorf("%s: no watchprobe_agent_writes_total with zone %q", name, zones[name])
		}
		lease, err := admin.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if refs := lease.OwnerReferences; len(refs) != 1 || refs[0].Kind != "Node" || refs[0].Name != name {
			t.Errorf("%s's Lease is owned by %+v, want its Node", name, refs)
		}
	}

	// The independent watch, over the test's clean path: every agent's
	// writes committed and delivered by the apiserver, each node's
	// sequence numbers without a gap (no write failed), so what the
	// delayed and the dropped node missed was their paths'.
	for _, name := range names {
		seqs := independent.seqs(name)
		lo, hi := uint64(1<<63), uint64(0)
		for s := range seqs {
			lo, hi = min(lo, s), max(hi, s)
		}
		if float64(len(seqs)) < final[name].writes || uint64(len(seqs)) != hi-lo+1 {
			t.Errorf("%s: the independent watch saw %d writes, numbered %d to %d; the agent counted %g acknowledged", name, len(seqs), lo, hi, final[name].writes)
		}
	}
	for _, name := range names {
		if err := nodes[name].proc.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping the agent on %s: %v", name, err)
		}
	}
}

// agentWatch is the test's own watch of the agents' Leases.
type agentWatch struct {
	mu   sync.Mutex
	seen map[string]map[uint64]bool
}

func (w *agentWatch) seqs(node string) map[uint64]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[node]
}

func watchAgents(ctx context.Context, t *testing.T, client kubernetes.Interface, ns string) *agentWatch {
	t.Helper()
	w, err := client.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	aw := &agentWatch{seen: map[string]map[uint64]bool{}}
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified {
				continue
			}
			m, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			if seq, ok := judge.Seq(m); ok {
				aw.mu.Lock()
				if aw.seen[m.GetName()] == nil {
					aw.seen[m.GetName()] = map[uint64]bool{}
				}
				aw.seen[m.GetName()][seq] = true
				aw.mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.Stop)
	return aw
}
