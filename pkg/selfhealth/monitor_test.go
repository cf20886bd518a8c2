package selfhealth

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

const msd = time.Millisecond

// A stretch is starved if it may have held a goroutine up longer than the
// threshold, 50 ms by default: a wake-up later than it, throttling longer
// than it per throttled period, or a run-queue wait above 1 ms per time
// slice over the window (an event waits through 50 of them). The figures are those measured on
// this project's machines: beside busy processes at cpu.shares 10, 3.5 ms
// per slice and wake-ups a few milliseconds late; unconstrained, up to
// 0.65 ms per slice and wake-ups up to 20 ms late when the host is busy.
func TestStarvedStretch(t *testing.T) {
	for _, c := range []struct {
		name                  string
		late, throttled, wait time.Duration
		slices                int64
		want                  bool
	}{
		{"unconstrained", 300 * time.Microsecond, 0, 2 * msd, 40, false},
		{"unconstrained on a busy host", 20 * msd, 0, 26 * msd, 40, false},
		{"a pause longer than the threshold", 60 * msd, 0, 0, 0, true},
		{"throttled briefly: half a millisecond moves no stamp by more", 2 * msd, 500 * time.Microsecond, 0, 3, false},
		{"throttled beyond the threshold", 2 * msd, 80 * msd, 0, 3, true},
		{"outweighed: the monitor barely late, every slice waited for", 2 * msd, 0, 140 * msd, 40, true},
		{"no slice read: the wait says nothing", 2 * msd, 0, 0, 0, false},
		{"a wait per slice of exactly the threshold's fiftieth", 0, 0, 40 * msd, 40, false},
	} {
		if got := starvedStretch(50*msd, c.late, c.throttled, c.wait, c.slices); got != c.want {
			t.Errorf("%s: starved %v, want %v", c.name, got, c.want)
		}
	}
}

// The monitor judges each stretch as it wakes: it records a starved one
// from the tick before (a starvation may have begun any time after it),
// averages the run-queue wait over the window, counts the starved time and
// moves Covered; its threshold is the exported gauge.
func TestWakeUps(t *testing.T) {
	m := metrics.RegisterSelfHealth(prometheus.NewRegistry(), metrics.Options{}, func() (metrics.CPUThrottling, bool) { return metrics.CPUThrottling{}, false })
	mon, err := New(50*msd, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.StarvedThreshold); got != 0.05 {
		t.Errorf("threshold gauge %g, want 0.05", got)
	}
	at := func(d time.Duration) time.Time { return mon.base.Add(d) }
	var r reading
	wake := func(prev, now time.Duration, late time.Duration, wait time.Duration, slices int64, throttled time.Duration) {
		r.wait, r.slices, r.throttled = r.wait+wait, r.slices+slices, r.throttled+throttled
		if throttled > 0 {
			r.periods++
		}
		mon.woke(at(prev), at(now), late, r)
	}
	wake(0, 10*msd, 200*time.Microsecond, 100*time.Microsecond, 5, 0)
	if !mon.Covered().Equal(at(10*msd)) || mon.Starved(at(0), at(5*msd)) {
		t.Fatalf("an ordinary stretch: covered %v, starved %v; want covered at its wake-up, not starved", mon.Covered().Sub(mon.base), mon.Starved(at(0), at(5*msd)))
	}
	// Throttled for 5 ms in the next stretch: below the threshold, no
	// starvation.
	wake(10*msd, 20*msd, 5*msd, 0, 1, 5*msd)
	if mon.Starved(at(12*msd), at(14*msd)) {
		t.Error("a window in a stretch throttled for 5 ms, below the threshold, is starved")
	}
	// Long waits per slice, each stretch alone under the bar, together
	// over it within the window.
	wake(200*msd, 210*msd, time.Millisecond, 2*msd, 4, 0)  // 0.5 ms per slice
	wake(210*msd, 220*msd, time.Millisecond, 10*msd, 4, 0) // with it, 1.5 ms per slice
	if mon.Starved(at(201*msd), at(205*msd)) {
		t.Error("a window over before an outweighed stretch began is starved")
	}
	if !mon.Starved(at(212*msd), at(215*msd)) {
		t.Error("a window in an outweighed stretch is not starved")
	}
	if mon.Starved(at(60*msd), at(65*msd)) {
		t.Error("a window far from every starved stretch is starved")
	}
	// Throttled for 60 ms in one period (out of the first's window):
	// starved from the tick before.
	wake(400*msd, 410*msd, 5*msd, 0, 1, 60*msd)
	if !mon.Starved(at(402*msd), at(404*msd)) {
		t.Error("a window in a stretch throttled beyond the threshold is not starved")
	}
	if got := mon.Resumed(at(405 * msd)); got.Sub(mon.base) != 410*msd+mon.margin {
		t.Errorf("resumed after the throttled stretch at %v, want its end and the margin, %v", got.Sub(mon.base), 410*msd+mon.margin)
	}
	if got := testutil.ToFloat64(m.StarvedSeconds); math.Abs(got-0.02) > 1e-9 {
		t.Errorf("starved seconds %g, want 0.02: two starved stretches of 10 ms", got)
	}
	if got := testutil.ToFloat64(m.CPUWait); math.Abs(got-0.0121) > 1e-9 {
		t.Errorf("run-queue wait %g s, want 0.0121", got)
	}
}

// A threshold below the scheduler's own jitter is refused, naming it.
func TestThresholdValidated(t *testing.T) {
	if _, err := New(time.Millisecond, nil, nil); err == nil || !strings.Contains(err.Error(), "1ms") {
		t.Errorf("New(1ms) = %v, want an error naming the threshold", err)
	}
}
