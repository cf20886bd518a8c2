package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

func newTestSink(t *testing.T) (*sink, *metrics.Agent) {
	t.Helper()
	m := metrics.RegisterAgent(prometheus.NewRegistry(), "n1", "z1")
	return newSink(m, time.Unix(0, 0)), m
}

// The sink counts what the judgement concluded, and the health gauge
// follows the newest judged write, the stream and its stalls.
func TestSinkCountsAndHealth(t *testing.T) {
	s, m := newTestSink(t)
	t0 := time.Unix(1000, 0)
	step := func(o judge.Outcome, wantHealthy float64) {
		t.Helper()
		s.Outcome(o)
		if got := testutil.ToFloat64(m.Healthy); got != wantHealthy {
			t.Errorf("after %v seq %d: healthy %g, want %g", o.Kind, o.Seq, got, wantHealthy)
		}
	}
	// Unhealthy until a write arrives on time, the watch up.
	step(judge.Outcome{Kind: judge.Up}, 0)
	step(judge.Outcome{Kind: judge.Answered, Seq: 1}, 0)
	step(judge.Outcome{Kind: judge.Arrived, Seq: 1, At: t0, Latency: 3 * time.Millisecond}, 1)
	step(judge.Outcome{Kind: judge.Answered, Seq: 2}, 1)
	step(judge.Outcome{Kind: judge.Missed, Seq: 2, At: t0.Add(time.Second)}, 0)
	// A newer write on time clears it; the older one's late arrival does
	// not make it unhealthy again, nor its loss.
	step(judge.Outcome{Kind: judge.Answered, Seq: 3}, 0)
	step(judge.Outcome{Kind: judge.Arrived, Seq: 3, At: t0.Add(time.Second), Latency: 5 * time.Millisecond}, 1)
	step(judge.Outcome{Kind: judge.Arrived, Seq: 2, At: t0.Add(2 * time.Second), Latency: 7 * time.Second, Late: true}, 1)
	step(judge.Outcome{Kind: judge.Stalled, At: t0.Add(2 * time.Second)}, 0)
	step(judge.Outcome{Kind: judge.Unstalled}, 1)
	step(judge.Outcome{Kind: judge.StreamEnded, Reason: metrics.EndTimeout}, 1)
	step(judge.Outcome{Kind: judge.StreamEnded, Reason: metrics.EndClient}, 1)
	step(judge.Outcome{Kind: judge.StreamEnded, Reason: metrics.EndEOF}, 1)
	step(judge.Outcome{Kind: judge.Down}, 0)
	step(judge.Outcome{Kind: judge.Relisted, Reason: metrics.RelistInitial}, 0)
	step(judge.Outcome{Kind: judge.Relisted, Reason: metrics.RelistExpired}, 0)
	step(judge.Outcome{Kind: judge.Up}, 1)
	// The newest write got no answer: the node's path is in doubt. One
	// the apiserver answered with an error is the control plane's.
	step(judge.Outcome{Kind: judge.Answered, Seq: 4, Err: errors.New("EOF")}, 0)
	step(judge.Outcome{Kind: judge.Answered, Seq: 5}, 1)
	step(judge.Outcome{Kind: judge.Answered, Seq: 6, Err: errors.New("etcdserver: request timed out"), Code: 500}, 1)
	step(judge.Outcome{Kind: judge.Answered, Seq: 7}, 1)
	step(judge.Outcome{Kind: judge.Unmeasurable, Seq: 5}, 1)
	step(judge.Outcome{Kind: judge.Lost, Seq: 2, Gone: true}, 1)

	for name, c := range map[string]struct {
		got  prometheus.Collector
		want float64
	}{
		"writes": {m.Writes, 5}, "write errors": {m.WriteErrors, 2}, "missed": {m.Missed, 1},
		"lost": {m.Lost, 0}, "stalls": {m.Stalls, 1}, "stream ends": {m.StreamEnds, 1},
		"relists": {m.Relists, 1}, "unmeasurable": {m.Unmeasurable, 1},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("%s: %g, want %g", name, got, c.want)
		}
	}
	st := s.snapshot(t0.Add(3*time.Second), 10*time.Second)
	want := Status{Healthy: true, Interval: Duration(10 * time.Second), Writes: 5, WriteErrors: 2, Missed: 1,
		Stalls: 1, StreamEnds: 1, Relists: 1, Unmeasurable: 1, Recent: Counts{Missed: 1, Stalls: 1},
		P50: Duration(5 * time.Millisecond), P90: Duration(7 * time.Second), Max: Duration(7 * time.Second), Since: time.Unix(0, 0).UTC()}
	if st != want {
		t.Errorf("status\n got %+v\nwant %+v", st, want)
	}
	// The latencies are of the last StatusWindow only.
	if st := s.snapshot(t0.Add(StatusWindow+time.Second+500*time.Millisecond), 10*time.Second); st.P50 != Duration(7*time.Second) || st.Max != Duration(7*time.Second) {
		t.Errorf("after the window: p50 %s max %s, want the one arrival left, 7s", time.Duration(st.P50), time.Duration(st.Max))
	}
	if st := s.snapshot(t0.Add(StatusWindow+3*time.Second), 10*time.Second); st.P50 != 0 || st.Max != 0 || st.Recent != (Counts{}) || st.Missed != 1 || st.Degraded() {
		t.Errorf("with nothing in the window: p50 %s max %s, recent %+v, missed %d, degraded %v; want no latency, no recent trouble, the counters kept, not degraded",
			time.Duration(st.P50), time.Duration(st.Max), st.Recent, st.Missed, st.Degraded())
	}
	if !st.Degraded() {
		t.Errorf("a miss and a stall in the window: not degraded")
	}
}

// A Status goes onto the Lease and back unchanged.
func TestStatusRoundTrip(t *testing.T) {
	in := Status{Healthy: true, Zone: "z", Interval: Duration(100 * time.Second), Writes: 3, Missed: 1, P50: Duration(3 * time.Millisecond),
		WatchConn: "10.0.0.2:4000 -> 10.0.0.1:6443", Since: time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)}
	out, err := ParseStatus(in.Encode())
	if err != nil || out != in {
		t.Fatalf("ParseStatus(%s) = %+v, %v; want %+v", in.Encode(), out, err, in)
	}
	if !strings.Contains(in.Encode(), `"p90":""`) {
		t.Errorf("%s: a zero duration is not written as \"\"", in.Encode())
	}
	if _, err := ParseStatus(`{"p50":"soon"}`); err == nil || !strings.Contains(err.Error(), AnnotationStatus) {
		t.Errorf("a bad duration: %v, want an error naming the annotation", err)
	}
}

// Bad settings are refused, each naming its flag and the fix.
func TestValidateNamesTheFlag(t *testing.T) {
	good := Options{Node: "n1", Namespace: "watchprobe-agents", WriteBudget: 50, MinInterval: 10 * time.Second,
		Deadline: 5 * time.Second, StallAfter: 30 * time.Second, WatchTimeout: 5 * time.Minute}
	if err := good.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		change func(*Options)
		want   string
	}{
		{func(o *Options) { o.Node = "" }, "--node: is required: set it, or NODE_NAME"},
		{func(o *Options) { o.Node = "Node_1" }, `--node: "Node_1" is not a node name`},
		{func(o *Options) { o.Namespace = "A" }, `--namespace: "A" is not a namespace name`},
		{func(o *Options) { o.WriteBudget = 0 }, "--write-budget: 0 must be positive"},
		{func(o *Options) { o.MinInterval = 100 * time.Millisecond }, "--min-interval: 100ms is too short; use at least 1s"},
		{func(o *Options) { o.Deadline = 0 }, "--deadline: 0s must be positive"},
		{func(o *Options) { o.StallAfter = 5 * time.Second }, "--stall-after: 5s must be longer than the deadline (5s)"},
		{func(o *Options) { o.LostAfter = time.Second }, "--lost-after: 1s must be longer than the deadline (5s)"},
		{func(o *Options) { o.WatchTimeout = time.Second }, "--watch-timeout: 1s is too short; use at least 1m"},
	} {
		o := good
		c.change(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}

// Sequence numbers go on from the Lease's, and two agents of one node
// started a millisecond apart write disjoint numbers.
func TestFirstSeq(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	lease := &metav1.ObjectMeta{Annotations: map[string]string{judge.AnnotationSeq: "42"}}
	if got, want := firstSeq(lease, t0), uint64(1_800_000_000_000_000); got != want {
		t.Errorf("an old Lease: %d, want the start's %d", got, want)
	}
	lease.Annotations[judge.AnnotationSeq] = "1800000000000999999"
	if got := firstSeq(lease, t0); got != 1_800_000_000_000_999_999 {
		t.Errorf("a Lease ahead of the clock: %d, want its own number", got)
	}
	if a, b := firstSeq(&metav1.ObjectMeta{}, t0), firstSeq(&metav1.ObjectMeta{}, t0.Add(time.Millisecond)); b-a != 1000 {
		t.Errorf("agents a millisecond apart start %d apart, want 1000", b-a)
	}
}

// The agent's own refusals show as refused, never as a degraded node.
func TestSinkRefused(t *testing.T) {
	s, m := newTestSink(t)
	s.Outcome(judge.Outcome{Kind: judge.Refused, Reason: metrics.PathForbidden})
	if got := testutil.ToFloat64(m.Refused); got != 1 {
		t.Errorf("refused %g after a refused watch, want 1", got)
	}
	if st := s.snapshot(time.Unix(0, 0), time.Second); !st.Refused || st.Healthy || st.Degraded() {
		t.Errorf("status %+v: want refused, unhealthy and not degraded", st)
	}
	s.Outcome(judge.Outcome{Kind: judge.Refused})
	s.Outcome(judge.Outcome{Kind: judge.Answered, Seq: 1, Err: errors.New("forbidden"), Reason: "rbac"})
	if got := testutil.ToFloat64(m.Refused); got != 1 {
		t.Errorf("refused %g after a refused write, want 1", got)
	}
	s.Outcome(judge.Outcome{Kind: judge.Answered, Seq: 2})
	if got := testutil.ToFloat64(m.Refused); got != 0 {
		t.Errorf("refused %g after a write served, want 0", got)
	}
	// Its own Lease gone is no refusal (the agent makes it again); its
	// namespace gone is.
	s.Outcome(judge.Outcome{Kind: judge.Answered, Seq: 3, Err: errors.New("not found"), Code: 404, Reason: metrics.RefusedNotFound})
	if got := testutil.ToFloat64(m.Refused); got != 0 {
		t.Errorf("refused %g after its Lease was found gone, want 0", got)
	}
	s.setupFailed(apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "n1", errors.New("no")))
	if got := testutil.ToFloat64(m.Refused); got != 1 {
		t.Errorf("refused %g after its Lease's creation was forbidden, want 1", got)
	}
	s.setupFailed(errors.New("dial tcp: i/o timeout"))
	if got, errs := testutil.ToFloat64(m.Refused), testutil.ToFloat64(m.WriteErrors); got != 0 || errs != 4 {
		t.Errorf("after an unanswered preparation: refused %g, write errors %g; want 0 and 4 (the two failed writes and both preparations)", got, errs)
	}
}

// The zone read after start registers the series again, at their start.
func TestSinkRelabel(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := newSink(metrics.RegisterAgent(reg, "n1", ""), time.Unix(0, 0))
	s.relabel(reg, "n1", "z9")
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "zone" && l.GetValue() != "z9" {
					t.Errorf("%s has zone %q after the relabel, want z9", f.GetName(), l.GetValue())
				}
			}
		}
	}
	if len(fams) != 11 {
		t.Errorf("%d families, want the agent's 11", len(fams))
	}
}
