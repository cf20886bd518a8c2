package judge

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/watchprobe/watchprobe/internal/exportertest"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// heard is a Sink that keeps the outcomes it hears.
type heard struct{ outcomes []Outcome }

func (h *heard) Outcome(o Outcome) { h.outcomes = append(h.outcomes, o) }

// hearing adds to tr a sink that keeps what it hears.
func hearing(tr *Tracker) *heard {
	h := &heard{}
	tr.sinks = append(tr.sinks, h)
	return h
}

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

// An outcome's Anomaly names the series the metrics sink counts it in,
// at one for the outcome: the names a cycle's anomalies are read by are
// the table's, not spellings of their own. Every kind of anomaly that
// counts in a family is among the cases.
func TestAnomalyNamesItsSeries(t *testing.T) {
	watch := &PathInfo{Name: metrics.PathWatch}
	pinned := &PathInfo{Name: metrics.PathAPIServer, APIServer: "10.0.0.1:6443"}
	failed := errors.New("refused")
	ctl := metrics.ControllerDeployment
	cases := []Outcome{
		{Kind: Arrived, Path: watch, Event: metrics.EventAdded, Late: true},
		{Kind: Missed, Path: pinned, Reason: metrics.MissedSilent},
		{Kind: Lost, Path: watch, Reason: metrics.MissedRelist},
		{Kind: Duplicate, Path: watch},
		{Kind: OutOfOrder, Path: pinned},
		{Kind: AfterFailedWrite, Path: watch},
		{Kind: ForeignChange, Path: watch, Manager: "labeller"},
		{Kind: Unmeasurable, Path: pinned, Reason: metrics.UnmeasurableStarved},
		{Kind: StreamEnded, Path: watch, Reason: metrics.EndExpired},
		{Kind: RequestFailed, Path: watch, Request: metrics.RequestWatch, Code: 503},
		{Kind: Relisted, Path: pinned, Reason: metrics.RelistExpired, Mode: metrics.ModeWatchList},
		{Kind: Throttled, Path: watch, Request: metrics.RequestList},
		{Kind: Throttled, Request: metrics.WriteRequests[0]},
		{Kind: Answered, Verb: metrics.VerbUpdate, Err: failed, Code: 500},
		{Kind: ResumeChecked, Path: watch, Limit: time.Minute, Reason: metrics.ResumeIncomplete},
		{Kind: ControllerChanged, Controller: ctl, Verb: metrics.VerbUpdate, Err: failed},
		{Kind: Reacted, Controller: ctl, Late: true},
		{Kind: ReactionMissed, Controller: ctl, Reason: metrics.ReactionReasons[0]},
		{Kind: ReactionLost, Controller: ctl, Reason: metrics.ReactionReasons[0]},
	}
	for k, f := range counts {
		anomaly := Outcome{Kind: Kind(k)}.anomaly() != nil
		if f != nil && anomaly && !slices.ContainsFunc(cases, func(o Outcome) bool { return o.Kind == Kind(k) }) {
			t.Errorf("kind %d is an anomaly counted in %s, but no case here", k, f.Name)
		}
	}
	for _, o := range cases {
		name := o.Anomaly()
		if name == "" {
			t.Errorf("kind %d: no anomaly named", o.Kind)
			continue
		}
		reg := prometheus.NewRegistry()
		s := NewMetricsSink(metrics.NewProbe(reg), "p", []string{metrics.PathWatch}, []string{metrics.PathWatch}, []string{ctl},
			map[string]time.Duration{"1m": time.Minute}, RetiredSeries{Grace: time.Hour})
		s.Outcome(Outcome{Kind: PathAdded, Path: pinned})
		s.Outcome(o)
		families, err := exportertest.Gather(reg)
		if err != nil {
			t.Fatal(err)
		}
		if v, found := seriesValue(families, name); v != 1 {
			t.Errorf("kind %d: %s is %g (found %v), want 1", o.Kind, name, v, found)
		}
		s.Stop()
	}
}

// seriesValue is the value of the counter a name as Anomaly writes it
// selects: the family without its prefix, the labels but probe and the
// empty ones.
func seriesValue(families map[string]*dto.MetricFamily, name string) (float64, bool) {
	for fname, mf := range families {
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "probe" && l.GetValue() != "" {
					kv = append(kv, l.GetName(), l.GetValue())
				}
			}
			if seriesKey(strings.TrimPrefix(fname, "watchprobe_"), kv...) == name {
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// A family a check's report counts under a key of its own is a path's,
// and some kind's outcomes count in it: the tally hears them.
func TestReportedFamiliesAreCounted(t *testing.T) {
	for _, f := range metrics.Families {
		if f.Report == "" {
			continue
		}
		if f.Scope != metrics.ScopePath || f.Type != metrics.Counter {
			t.Errorf("%s: a report counts a path's counters only", f.Name)
		}
		if !slices.Contains(counts[:], f) {
			t.Errorf("%s: reported as %s, but no kind of outcome counts in it", f.Name, f.Report)
		}
	}
}
