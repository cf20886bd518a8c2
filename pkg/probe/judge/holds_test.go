package judge

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// sendHeldDelete sends the delete of marker m (created and delivered on every
// path of tr) in a cycle of its own, answered at 13 ms with the marker
// held by a finalizer, marked deleting at resourceVersion 11 and delivered
// so on every path.
func sendHeldDelete(tr *Tracker, paths int) {
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(10*time.Millisecond))
	for i := range paths {
		tr.observe(i, metrics.EventAdded, markerAt("m", 1, 10), t0.Add(2*time.Millisecond))
		tr.observe(i, metrics.EventModified, heldAt("m", 1, 11, "holder"), t0.Add(11*time.Millisecond))
	}
	tr.AckHeld(w, heldAt("m", 1, 11, "holder"), t0.Add(13*time.Millisecond))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
}

// Once the finalizers holding a delete go, a path's DELETED shows the
// marker gone: every other path owes its DELETED within the lost horizon
// (1 minute here) from that arrival, and one that never delivers it has
// lost it, missed and lost at once (the deletion's own instant, which a
// deadline would count from, is unknown). A DELETED within the horizon
// settles it, however long after the other path's; while nothing shows
// the marker gone nothing is owed, however long the finalizers hold.
func TestHeldDeleteOwedOnceGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		// watch delivers the deletion's DELETED this long after the
		// informer's, never if negative.
		watch time.Duration
		lost  float64
	}{
		{"the watch path never delivers it", -1, 1},
		{"the watch path delivers it within the horizon", 50 * time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, s := newTestTracker(t)
			rec := hearing(tr)
			sendHeldDelete(tr, 2)
			gone := t0.Add(10 * time.Minute)
			tr.observe(informer, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), gone)
			tr.sweep(gone.Add(30 * time.Second))
			if tc.watch >= 0 {
				tr.observe(watchIdx, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), gone.Add(tc.watch))
			}
			tr.sweep(gone.Add(61 * time.Second))
			tr.sweep(gone.Add(time.Hour))
			for _, p := range []string{metrics.PathInformer, metrics.PathWatch} {
				ps := s.Paths[p]
				lost := 0.0
				if p == metrics.PathWatch {
					lost = tc.lost
				}
				probetest.WantCounts(t, []probetest.Count{
					{p + " delete_blocked", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableDeleteBlocked)), 1},
					{p + " missed", probetest.MissedTotal(ps), lost},
					{p + " lost", probetest.LostTotal(ps), lost},
					{p + " lost silent", testutil.ToFloat64(ps.Counter(metrics.EventsLost, metrics.MissedSilent)), lost},
					{p + " late", testutil.ToFloat64(ps.Counter(metrics.EventsLate)), 0},
					{p + " observed deletes", testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)), 0},
				})
			}
			for _, o := range rec.kinds(Lost) {
				if o.Marker != "m" || o.Seq != 2 || o.Event != metrics.EventDeleted || o.Path.Name != metrics.PathWatch {
					t.Errorf("lost %s/%d %s on %s, want the held delete m/2's DELETED on the watch path", o.Marker, o.Seq, o.Event, o.Path.Name)
				}
			}
		})
	}

	t.Run("never released", func(t *testing.T) {
		tr, s := newTestTracker(t)
		sendHeldDelete(tr, 2)
		tr.sweep(t0.Add(time.Hour))
		tr.sweep(t0.Add(3 * time.Hour))
		for _, p := range []string{metrics.PathInformer, metrics.PathWatch} {
			ps := s.Paths[p]
			probetest.WantCounts(t, []probetest.Count{
				{p + " missed", probetest.MissedTotal(ps), 0},
				{p + " lost", probetest.LostTotal(ps), 0},
			})
		}
	})
}

// The cleaner finding a held marker absent (its delete answered 404)
// shows it gone on every path's behalf: a path that delivers no DELETED
// within the lost horizon from then has lost it.
func TestHeldDeleteGoneByTheCleaner(t *testing.T) {
	tr, s := newTestTracker(t)
	sendHeldDelete(tr, 2)
	gone := t0.Add(10 * time.Minute)
	tr.MarkerGone("m", gone)
	tr.observe(informer, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), gone.Add(time.Second))
	tr.sweep(gone.Add(61 * time.Second))
	for p, lost := range map[string]float64{metrics.PathInformer: 0, metrics.PathWatch: 1} {
		ps := s.Paths[p]
		probetest.WantCounts(t, []probetest.Count{
			{p + " missed", probetest.MissedTotal(ps), lost},
			{p + " lost", probetest.LostTotal(ps), lost},
		})
	}
}

// A selector path's DELETED of a held marker may be another client's
// label strip of it, which the etcd path delivers as a change, not a
// deletion: it obliges the other selector paths, never the etcd path,
// which owes the DELETED only once it or the cleaner shows the marker
// gone.
func TestHeldDeleteSelectorEvidence(t *testing.T) {
	for _, etcdDelivers := range []bool{false, true} {
		tr, sink := newEtcdTracker()
		s := sink.series
		sendHeldDelete(tr, 3)
		gone := t0.Add(10 * time.Minute)
		tr.observe(informer, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), gone)
		if etcdDelivers {
			tr.observe(etcdIdx, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), gone.Add(time.Second))
		}
		tr.sweep(gone.Add(2 * time.Minute))
		for p, lost := range map[string]float64{metrics.PathInformer: 0, metrics.PathWatch: 1, metrics.PathEtcd: 0} {
			ps := s.Paths[p]
			probetest.WantCounts(t, []probetest.Count{
				{fmt.Sprintf("etcd delivers %v: %s lost", etcdDelivers, p), probetest.LostTotal(ps), lost},
				{fmt.Sprintf("etcd delivers %v: %s missed", etcdDelivers, p), probetest.MissedTotal(ps), lost},
			})
		}
	}
}

// The etcd path owes a held marker's DELETED from the first evidence that
// obliges it (here the cleaner's, 50 s after the informer's DELETED),
// not from a selector path's earlier one.
func TestHeldDeleteEtcdOwesFromItsEvidence(t *testing.T) {
	tr, sink := newEtcdTracker()
	s := sink.series
	sendHeldDelete(tr, 3)
	gone := t0.Add(10 * time.Minute)
	tr.observe(informer, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), gone)
	tr.MarkerGone("m", gone.Add(50*time.Second))
	tr.observe(watchIdx, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), gone.Add(55*time.Second))
	tr.sweep(gone.Add(61 * time.Second))
	if got := probetest.LostTotal(s.Paths[metrics.PathEtcd]); got != 0 {
		t.Errorf("etcd lost %g within the horizon from the cleaner's evidence, want 0", got)
	}
	tr.sweep(gone.Add(111 * time.Second))
	for p, lost := range map[string]float64{metrics.PathInformer: 0, metrics.PathWatch: 0, metrics.PathEtcd: 1} {
		ps := s.Paths[p]
		probetest.WantCounts(t, []probetest.Count{
			{p + " lost", probetest.LostTotal(ps), lost},
			{p + " missed", probetest.MissedTotal(ps), lost},
		})
	}
}

// A held marker's DELETED is lost only once the self-monitor shows the
// exporter stamped whatever came by the horizon: starved at the horizon,
// the verdict waits for it to have resumed, and a DELETED stamped late
// for that starvation settles it.
func TestHeldDeleteLossWaitsForTheMonitor(t *testing.T) {
	for _, arrives := range []bool{false, true} {
		tr, s, mon := monitored(t)
		mon.cover(time.Hour)
		sendHeldDelete(tr, 2)
		gone := 10 * time.Minute
		tr.observe(informer, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), t0.Add(gone))
		horizon := gone + time.Minute
		mon.starve(horizon-time.Second, horizon+5*time.Second)
		mon.cover(horizon)
		tr.sweep(t0.Add(horizon + 10*time.Second))
		if got := probetest.LostTotal(s.Paths[metrics.PathWatch]); got != 0 {
			t.Errorf("arrives %v: watch lost %g before the monitor covered the horizon, want 0", arrives, got)
		}
		mon.cover(horizon + 4*time.Second)
		tr.sweep(t0.Add(horizon + 4*time.Second))
		if got := probetest.LostTotal(s.Paths[metrics.PathWatch]); got != 0 {
			t.Errorf("arrives %v: watch lost %g before the exporter resumed, want 0", arrives, got)
		}
		if arrives {
			tr.observe(watchIdx, metrics.EventDeleted, heldAt("m", 1, 12, "holder"), t0.Add(horizon+4*time.Second))
		}
		mon.cover(horizon + time.Minute)
		tr.sweep(t0.Add(horizon + time.Minute))
		want := 1.0
		if arrives {
			want = 0
		}
		if got := probetest.LostTotal(s.Paths[metrics.PathWatch]); got != want {
			t.Errorf("arrives %v: watch lost %g, want %g", arrives, got, want)
		}
	}
}
