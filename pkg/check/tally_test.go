package check

import (
	"testing"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// A cycle with a miss settles at its deadline, after newer ones: the
// cycles settled through stop at the oldest unsettled one, and catch up
// when it settles.
func TestTallyCyclesSettledThrough(t *testing.T) {
	tl := newTally(reportConfig("watch"))
	for _, step := range []struct {
		cycle uint64
		ok    bool
		want  Cycles
	}{
		{1, true, Cycles{Judged: 1, OK: 1, Through: 1}},
		{3, true, Cycles{Judged: 2, OK: 2, Through: 1}},
		{4, true, Cycles{Judged: 3, OK: 3, Through: 1}},
		{2, false, Cycles{Judged: 4, OK: 3, Through: 4}},
	} {
		tl.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: step.cycle, OK: step.ok})
		if got := tl.counts(); got != step.want {
			t.Errorf("after cycle %d: %+v, want %+v", step.cycle, got, step.want)
		}
	}
}

// A cycle that settled without a verdict (a write of it unmeasurable) is
// settled, so that a check of so many cycles ends, and counted unjudged.
func TestTallyUnjudgedCycle(t *testing.T) {
	tl := newTally(reportConfig("watch"))
	tl.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 2, Reason: metrics.UnmeasurableStarved})
	tl.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 1, OK: true})
	if got, want := tl.counts(), (Cycles{Judged: 1, OK: 1, Unjudged: 1, Through: 2}); got != want {
		t.Errorf("cycles %+v, want %+v", got, want)
	}
}
