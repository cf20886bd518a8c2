package judge

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// heard is a Sink that keeps the outcomes it hears.
type heard struct{ outcomes []Outcome }

func (h *heard) Outcome(o Outcome) { h.outcomes = append(h.outcomes, o) }

// kinds are the outcomes of kind k heard, in order.
func (h *heard) kinds(k Kind) []Outcome {
	var out []Outcome
	for _, o := range h.outcomes {
		if o.Kind == k {
			out = append(out, o)
		}
	}
	return out
}

// verdicts are the cycle verdicts heard, in order, as "ok 2".
func (h *heard) verdicts() []string {
	var v []string
	for _, o := range h.outcomes {
		if o.Kind == CycleJudged {
			v = append(v, fmt.Sprintf("%s %d", map[bool]string{true: "ok", false: "failed"}[o.OK], o.Cycle))
		}
	}
	return v
}

// latencies are the arrivals' latencies heard on a path.
func (h *heard) latencies(path string) []time.Duration {
	var d []time.Duration
	for _, o := range h.outcomes {
		if o.Kind == Arrived && o.Path.Name == path {
			d = append(d, o.Latency)
		}
	}
	return d
}

// A sink hears every latency the histograms get, on the path they get it,
// and every cycle's verdict, a cycle that settles after a newer one
// included, although probe_success keeps the newer one's.
func TestSinkHearsVerdictsAndLatencies(t *testing.T) {
	tr, s := newTestTracker(t)
	h := &heard{}
	tr.sinks = append(tr.sinks, h)

	// Cycle 1: the watch path never delivers its write.
	c1 := tr.NewCycle()
	answered(tr, c1, WriteKey{"m1", 1}, metrics.EventAdded)
	tr.observe(informer, metrics.EventAdded, marker("m1", 1), t0.Add(3*time.Millisecond))
	tr.CloseCycle(c1)
	// Cycle 2, healthy, settles first.
	c2 := tr.NewCycle()
	w2 := tr.Expect(c2, WriteKey{"m2", 2}, metrics.EventAdded, noTrace, at(100*time.Millisecond))
	tr.Ack(w2, 0, nil, t0.Add(100*time.Millisecond))
	tr.observe(informer, metrics.EventAdded, marker("m2", 2), t0.Add(105*time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m2", 2), t0.Add(107*time.Millisecond))
	tr.CloseCycle(c2)
	tr.sweep(t0.Add(2 * time.Second)) // cycle 1's miss

	if got, want := h.verdicts(), []string{"ok 2", "failed 1"}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("verdicts heard: %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(s.Gauge(metrics.ProbeSuccess)); got != 1 {
		t.Errorf("probe_success = %g, want 1: cycle 2's, the newer", got)
	}
	informerAdded := s.Paths[metrics.PathInformer].Observer(metrics.EventLatency, metrics.EventAdded)
	watchAdded := s.Paths[metrics.PathWatch].Observer(metrics.EventLatency, metrics.EventAdded)
	if got := h.latencies(metrics.PathInformer); len(got) != 2 || got[0] != 3*time.Millisecond || got[1] != 5*time.Millisecond {
		t.Errorf("informer latencies heard: %v, want [3ms 5ms]", got)
	}
	if got := h.latencies(metrics.PathWatch); len(got) != 1 || got[0] != 7*time.Millisecond {
		t.Errorf("watch latencies heard: %v, want [7ms]", got)
	}
	if n := probetest.Histogram(t, informerAdded).GetSampleCount() + probetest.Histogram(t, watchAdded).GetSampleCount(); n != 3 {
		t.Errorf("the histograms hold %d latencies, the sink heard 3", n)
	}
}
