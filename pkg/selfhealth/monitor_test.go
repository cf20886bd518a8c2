package selfhealth

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// A wake-up later than the threshold records a starved stretch from the
// tick before it, counts its lateness as starved time and moves Covered;
// one within the threshold only moves Covered. The threshold is the
// exported gauge.
func TestWakeUps(t *testing.T) {
	m := metrics.RegisterSelfHealth(prometheus.NewRegistry(), metrics.Options{}, func() (metrics.CPUThrottling, bool) { return metrics.CPUThrottling{}, false })
	mon, err := New(20*time.Millisecond, m)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.StarvedThreshold); got != 0.02 {
		t.Errorf("threshold gauge %g, want 0.02", got)
	}
	at := func(d time.Duration) time.Time { return mon.base.Add(d) }
	mon.woke(at(0), 5*time.Millisecond, at(15*time.Millisecond))
	if !mon.Covered().Equal(at(15*time.Millisecond)) || mon.Starved(at(0), at(14*time.Millisecond)) {
		t.Errorf("a wake-up 5 ms late: covered %v, starved %v; want covered at it and no starvation", mon.Covered().Sub(mon.base), mon.Starved(at(0), at(14*time.Millisecond)))
	}
	mon.woke(at(15*time.Millisecond), 50*time.Millisecond, at(75*time.Millisecond))
	if !mon.Starved(at(20*time.Millisecond), at(25*time.Millisecond)) {
		t.Error("a window between the tick and its wake-up 50 ms late is not starved")
	}
	if got := testutil.ToFloat64(m.StarvedSeconds); got != 0.05 {
		t.Errorf("starved seconds %g, want 0.05", got)
	}
	if !mon.Covered().Equal(at(75 * time.Millisecond)) {
		t.Errorf("covered %v, want 75ms", mon.Covered().Sub(mon.base))
	}
}

// A threshold below the scheduler's own jitter is refused, naming it.
func TestThresholdValidated(t *testing.T) {
	if _, err := New(500*time.Microsecond, nil); err == nil || !strings.Contains(err.Error(), "500µs") {
		t.Errorf("New(500µs) = %v, want an error naming the threshold", err)
	}
}
