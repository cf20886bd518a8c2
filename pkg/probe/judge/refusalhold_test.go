package judge

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// refusalHeld is the watch path refused by the exporter's own RBAC from
// t0 (refusals at 0.1, 0.2 and 0.3 s, which ask for a check) and a write
// sent at 0.5 s, due at 1.5 s, delivered on the informer path: its verdict
// on the watch path is the check's to give.
func refusalHeld(t *testing.T) (*Tracker, *metrics.PathSeries, func() [4]float64) {
	t.Helper()
	tr, s := newTestTracker(t)
	ps := s.Paths[metrics.PathWatch]
	tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0)
	refuse(tr, watchIdx, refusedAfter, t0.Add(100*time.Millisecond))
	writeOne(tr, WriteKey{"a", 1}, t0.Add(500*time.Millisecond))
	counts := func() [4]float64 {
		return [4]float64{
			testutil.ToFloat64(ps.Gauge(metrics.PathRefused, metrics.PathForbidden)),
			probetest.MissedTotal(ps), probetest.LostTotal(ps),
			testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)),
		}
	}
	return tr, ps, counts
}

// The same history judged with the check's answer before or after the
// write's deadline: the verdict is the answer's, not its latency's. Until
// the check answers, the watch path's miss is held, neither counted nor
// cleared; a check refused on every connection makes the write
// unmeasurable there, one served (or inconclusive) makes it missed, and
// the lost horizon then loses it as ever.
func TestRefusalCheckLatencyDecidesNothing(t *testing.T) {
	ms := time.Millisecond
	type want struct{ refused, missed, lost, unmeasurable float64 }
	for _, tc := range []struct {
		name     string
		answered time.Duration
		answer   func(tr *Tracker, began, now time.Time)
		want     want
	}{
		{"refused before the deadline", 1000 * ms, refusedCheck, want{1, 0, 0, 1}},
		{"refused after the deadline", 1900 * ms, refusedCheck, want{1, 0, 0, 1}},
		{"refused well after the deadline", 2500 * ms, refusedCheck, want{1, 0, 0, 1}},
		{"served after the deadline", 1900 * ms, servedCheck, want{0, 1, 1, 0}},
		{"inconclusive after the deadline", 1900 * ms, failedCheck, want{0, 1, 1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _, counts := refusalHeld(t)
			for now := t0.Add(400 * ms); now.Before(t0.Add(3 * time.Second)); now = now.Add(100 * ms) {
				if now.Equal(t0.Add(tc.answered)) {
					if c := counts(); now.After(t0.Add(1500*ms)) && c[1] != 0 {
						t.Fatalf("missed %g on the watch path before its refusal check answered, want 0: held", c[1])
					}
					tc.answer(tr, t0.Add(400*ms), now)
				}
				tr.sweep(now)
			}
			tr.sweep(t0.Add(2 * time.Hour)) // past the lost horizon
			c := counts()
			probetest.WantCounts(t, []probetest.Count{
				{"path_refused", c[0], tc.want.refused},
				{"missed", c[1], tc.want.missed},
				{"lost", c[2], tc.want.lost},
				{"unmeasurable (path_refused)", c[3], tc.want.unmeasurable},
			})
		})
	}
}

func refusedCheck(tr *Tracker, began, now time.Time) {
	tr.RefusalChecked(metrics.RequestWatch, began, false, now)
}

func servedCheck(tr *Tracker, began, now time.Time) {
	tr.RefusalChecked(metrics.RequestWatch, began, true, now)
}

func failedCheck(tr *Tracker, began, now time.Time) {
	tr.RefusalCheckFailed(metrics.RequestWatch, began, errors.New("dial tcp 127.0.0.1:6443: connect: connection refused"), now)
}

// A check that never answers holds the miss no longer than the lost
// horizon: then the write is missed and lost on the path, as any write
// it never delivered.
func TestRefusalHoldEndsAtTheHorizon(t *testing.T) {
	tr, _, counts := refusalHeld(t)
	tr.sweep(t0.Add(3 * time.Second))
	if c := counts(); c != [4]float64{} {
		t.Fatalf("path_refused, missed, lost, unmeasurable = %v while the check is outstanding, want all 0", c)
	}
	// A check run drains until nothing is pending: the held miss is.
	if n := tr.Pending(); n != 1 {
		t.Errorf("%d pending while a miss waits for its refusal check, want 1", n)
	}
	tr.sweep(t0.Add(2 * time.Hour))
	if c := counts(); c != [4]float64{0, 1, 1, 0} {
		t.Fatalf("path_refused, missed, lost, unmeasurable = %v past the horizon, the check never answered, want [0 1 1 0]", c)
	}
	if n := tr.Pending(); n != 0 {
		t.Errorf("%d pending once the held miss was lost, want 0", n)
	}
}

// A check begun before the refusals began answers nothing about them;
// a run of refusals that another failure ends still has its check to
// answer (asked at its third refusal): the held miss waits for it, and a
// check begun since the run began that found it refused makes the write
// unmeasurable. A run that ended before asking for a check leaves
// nothing to wait for: the held miss is counted at the next sweep.
func TestRefusalHoldNeedsAnAnswerToItsRun(t *testing.T) {
	tr, _, counts := refusalHeld(t)
	tr.sweep(t0.Add(1600 * time.Millisecond))
	refusedCheck(tr, t0.Add(50*time.Millisecond), t0.Add(1700*time.Millisecond)) // began before the run
	tr.sweep(t0.Add(1800 * time.Millisecond))
	if c := counts(); c != [4]float64{} {
		t.Fatalf("path_refused, missed, lost, unmeasurable = %v after a check begun before the refusals, want all 0", c)
	}
	tr.requestFailed(watchIdx, metrics.RequestWatch, errors.New("connection refused"), t0.Add(1900*time.Millisecond))
	tr.sweep(t0.Add(2 * time.Second))
	if c := counts(); c != [4]float64{} {
		t.Fatalf("path_refused, missed, lost, unmeasurable = %v after the run of refusals ended, its check outstanding, want all 0", c)
	}
	refusedCheck(tr, t0.Add(400*time.Millisecond), t0.Add(2100*time.Millisecond))
	tr.sweep(t0.Add(2 * time.Hour))
	if c := counts(); c != [4]float64{0, 0, 0, 1} {
		t.Fatalf("path_refused, missed, lost, unmeasurable = %v once the ended run's check found it refused, want [0 0 0 1]", c)
	}

	// One refusal, then another failure: no check was asked.
	ms := time.Millisecond
	tr, s := newTestTracker(t)
	ps := s.Paths[metrics.PathWatch]
	tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0)
	tr.requestFailed(watchIdx, metrics.RequestWatch, denyWatch, t0.Add(100*ms))
	writeOne(tr, WriteKey{"a", 1}, t0.Add(200*ms))
	tr.sweep(t0.Add(1300 * ms))
	if got := probetest.MissedTotal(ps); got != 0 {
		t.Fatalf("missed %g after one refusal, want 0: held", got)
	}
	tr.requestFailed(watchIdx, metrics.RequestWatch, errors.New("connection refused"), t0.Add(1400*ms))
	tr.sweep(t0.Add(1500 * ms))
	if got := probetest.MissedTotal(ps); got != 1 {
		t.Fatalf("missed %g once a run that asked no check ended, want 1", got)
	}
}

// The same events in either order: a check of the run, begun since it
// began and refused on every connection, and another failure that ends
// the run. The verdict is the check's either way.
func TestRefusalCheckAnswerVsRunEndOrder(t *testing.T) {
	ms := time.Millisecond
	blip := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	for _, checkFirst := range []bool{true, false} {
		tr, _, counts := refusalHeld(t)
		tr.sweep(t0.Add(1600 * ms)) // held
		if checkFirst {
			refusedCheck(tr, t0.Add(400*ms), t0.Add(1700*ms))
			tr.requestFailed(watchIdx, metrics.RequestWatch, blip, t0.Add(1710*ms))
		} else {
			tr.requestFailed(watchIdx, metrics.RequestWatch, blip, t0.Add(1700*ms))
			tr.sweep(t0.Add(1705 * ms))
			refusedCheck(tr, t0.Add(400*ms), t0.Add(1710*ms))
		}
		tr.sweep(t0.Add(2 * time.Second))
		tr.sweep(t0.Add(2 * time.Hour))
		if c := counts(); c[1] != 0 || c[2] != 0 || c[3] != 1 {
			t.Errorf("check answered first=%v: path_refused, missed, lost, unmeasurable = %v, want none missed or lost, 1 unmeasurable", checkFirst, c)
		}
	}
}

// A check that is neither served nor refused on every connection leaves
// the refusal unconfirmed, and says so where the path's error shows (the
// status page's paths down, the probe's sync error), until a check
// answers otherwise or the path is live again.
func TestRefusalUnconfirmedIsShown(t *testing.T) {
	tr, _, _ := refusalHeld(t)
	unconfirmed := "refusal unconfirmed: the check failed: dial tcp 127.0.0.1:6443: connect: connection refused"
	shown := func() (down, pathErr string) {
		if d := tr.DownPaths(); len(d) == 1 {
			down = d[0]
		}
		if err := tr.PathErr(watchIdx); err != nil {
			pathErr = err.Error()
		}
		return down, pathErr
	}
	failedCheck(tr, t0.Add(400*time.Millisecond), t0.Add(time.Second))
	down, pathErr := shown()
	if !strings.HasPrefix(down, "watch: ") || !strings.Contains(down, unconfirmed) || !strings.Contains(down, denyWatch.Error()) {
		t.Errorf("paths down %q after an inconclusive check, want the watch path's 403 and %q", tr.DownPaths(), unconfirmed)
	}
	if !strings.Contains(pathErr, unconfirmed) || !strings.Contains(pathErr, denyWatch.Error()) {
		t.Errorf("the watch path's error %q after an inconclusive check, want its 403 and %q", pathErr, unconfirmed)
	}
	refusedCheck(tr, t0.Add(2*time.Second), t0.Add(2*time.Second))
	if down, pathErr := shown(); strings.Contains(down, "unconfirmed") || strings.Contains(pathErr, "unconfirmed") ||
		!strings.Contains(down, "watch: refused (forbidden): ") {
		t.Errorf("paths down %q, path error %q once a check confirmed the refusal, want it refused, not unconfirmed", down, pathErr)
	}
}

// A path pinned to an apiserver that goes away while its refusal awaits
// its check concludes the misses held for it as the path stood: not
// confirmed, missed there and lost as unavailable, so that missed = late +
// lost holds for as long as its series stay.
func TestRemovedPathConcludesItsRefusalHolds(t *testing.T) {
	tr, s := newTestTracker(t)
	slot, ps := addTestPath(tr, "10.0.0.1:6443", t0.Add(-time.Hour))
	tr.live(slot, t0.Add(-time.Hour))
	tr.streamEnded(slot, metrics.EndEOF, time.Hour, nil, t0)
	refuse(tr, slot, refusedAfter, t0.Add(100*time.Millisecond))
	c := tr.NewCycle()
	tr.Ack(tr.Expect(c, WriteKey{"a", 1}, metrics.EventAdded, noTrace, at(500*time.Millisecond)), 0, nil, t0.Add(500*time.Millisecond))
	for _, i := range []int{informer, watchIdx} {
		tr.observe(i, metrics.EventAdded, marker("a", 1), t0.Add(501*time.Millisecond))
	}
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
	if m, l := probetest.MissedTotal(ps), probetest.LostTotal(ps); m != 0 || l != 0 {
		t.Fatalf("pinned path missed %g, lost %g while its refusal awaits its check, want 0 and 0", m, l)
	}
	tr.RemovePath(slot, t0.Add(3*time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"pinned missed", probetest.MissedTotal(ps), 1},
		{"pinned lost (unavailable)", testutil.ToFloat64(ps.Counter(metrics.EventsLost, metrics.MissedUnavailable)), 1},
		{"pinned unmeasurable", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)), 0},
	})
	wantMissedAccounted(t, tr, s)
	tr.sweep(t0.Add(2 * time.Hour))
	if m, l := probetest.MissedTotal(ps), probetest.LostTotal(ps); m != 1 || l != 1 {
		t.Errorf("pinned path missed %g, lost %g after the horizon, want 1 and 1: one verdict", m, l)
	}
}

// A write due before the path's third refusal (the path backs off: the
// informer's third comes 2.4 to 4.8 s after the outage began) while the
// outage is nothing but refusals: its miss is held, and the check, once
// asked and refused, makes it unmeasurable; one served makes it missed,
// and with none the lost horizon ends the hold.
func TestRefusalHeldBeforeTheThirdRefusal(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		answer func(tr *Tracker, began, now time.Time)
		want   [4]float64
	}{
		{"refused", refusedCheck, [4]float64{1, 0, 0, 1}},
		{"served", servedCheck, [4]float64{0, 1, 1, 0}},
		{"no check by the lost horizon", nil, [4]float64{0, 1, 1, 0}},
	} {
		tr, s := newTestTracker(t)
		ps := s.Paths[metrics.PathWatch]
		tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0)
		tr.requestFailed(watchIdx, metrics.RequestWatch, denyWatch, t0.Add(100*ms))
		writeOne(tr, WriteKey{"a", 1}, t0.Add(200*ms)) // due 1.2s
		tr.requestFailed(watchIdx, metrics.RequestWatch, denyWatch, t0.Add(900*ms))
		for now := t0.Add(300 * ms); now.Before(t0.Add(1400 * ms)); now = now.Add(100 * ms) {
			tr.sweep(now)
		}
		if got := probetest.MissedTotal(ps); got != 0 {
			t.Fatalf("%s: missed %g after two refusals, want 0: held", tc.name, got)
		}
		if tc.answer != nil {
			tr.requestFailed(watchIdx, metrics.RequestWatch, denyWatch, t0.Add(2500*ms))
			tc.answer(tr, t0.Add(2600*ms), t0.Add(2700*ms))
		}
		tr.sweep(t0.Add(3 * time.Second))
		tr.sweep(t0.Add(2 * time.Hour))
		c := [4]float64{
			testutil.ToFloat64(ps.Gauge(metrics.PathRefused, metrics.PathForbidden)),
			probetest.MissedTotal(ps), probetest.LostTotal(ps),
			testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)),
		}
		if c != tc.want {
			t.Errorf("%s: [path_refused missed lost unmeasurable(path_refused)] = %v, want %v", tc.name, c, tc.want)
		}
	}
}

// The run's first check is served (it reached an apiserver whose stale
// authorization cache still serves), the path goes on being refused, and
// a write is sent after that check: the next check, asked by the next
// refusal, decides. Refused on every connection: the write is
// unmeasurable; served again: missed, at that answer, not the horizon.
func TestRefusalHeldPastAServedCheck(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		answer func(tr *Tracker, began, now time.Time)
		want   [4]float64
	}{
		{"next check refused", refusedCheck, [4]float64{1, 0, 0, 1}},
		{"next check served", servedCheck, [4]float64{0, 1, 0, 0}},
	} {
		tr, s := newTestTracker(t)
		ps := s.Paths[metrics.PathWatch]
		tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0)
		refuse(tr, watchIdx, refusedAfter, t0.Add(100*ms))
		servedCheck(tr, t0.Add(400*ms), t0.Add(450*ms))
		writeOne(tr, WriteKey{"a", 1}, t0.Add(2000*ms)) // due 3s
		for now := t0.Add(500 * ms); now.Before(t0.Add(12 * time.Second)); now = now.Add(100 * ms) {
			if now.Equal(t0.Add(1000*ms)) || now.Equal(t0.Add(5000*ms)) || now.Equal(t0.Add(10300*ms)) {
				tr.requestFailed(watchIdx, metrics.RequestWatch, denyWatch, now)
			}
			if now.Equal(t0.Add(10500 * ms)) {
				if got := probetest.MissedTotal(ps); got != 0 {
					t.Fatalf("%s: missed %g before the next check answered, want 0: held", tc.name, got)
				}
				tc.answer(tr, t0.Add(10400*ms), now)
			}
			tr.sweep(now)
		}
		c := [4]float64{
			testutil.ToFloat64(ps.Gauge(metrics.PathRefused, metrics.PathForbidden)),
			probetest.MissedTotal(ps), probetest.LostTotal(ps),
			testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)),
		}
		if c != tc.want {
			t.Errorf("%s: [path_refused missed lost unmeasurable(path_refused)] = %v at 12s, want %v", tc.name, c, tc.want)
		}
	}
}
