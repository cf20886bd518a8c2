package judge

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// newReactionTracker has one controller, a deadline of 1s and a lost
// horizon of 10s.
func newReactionTracker(t *testing.T) (*Tracker, *heard) {
	t.Helper()
	rec := &heard{}
	tr, _ := newTestTracker(t, func(s *Settings) { s.LostAfter = 10 * time.Second })
	tr.sinks = append(tr.sinks, rec)
	tr.AddControllers([]string{metrics.ControllerDeployment})
	return tr, rec
}

func TestReactionJudgement(t *testing.T) {
	const uid = types.UID("u1")
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

	t.Run("after the answer", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 2, ms(0), ms(5), nil)
		tr.ControllerSeen(0, uid, 2, 1, ms(4)) // the change itself, before its answer
		tr.ControllerSeen(0, uid, 2, 2, ms(30))
		r := rec.kinds(Reacted)
		if len(r) != 1 || r[0].Latency != 30*time.Millisecond || r[0].Share != 26*time.Millisecond || r[0].Late {
			t.Fatalf("reactions %+v, want one of 30ms with a share of 26ms", r)
		}
	})
	t.Run("before the answer", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerSeen(0, uid, 2, 1, ms(3))
		tr.ControllerSeen(0, uid, 2, 2, ms(8))
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 2, ms(0), ms(10), nil)
		if r := rec.kinds(Reacted); len(r) != 1 || r[0].Latency != 8*time.Millisecond || r[0].Share != 5*time.Millisecond {
			t.Fatalf("reactions %+v, want one of 8ms with a share of 5ms", r)
		}
		if tr.Pending() != 0 {
			t.Fatal("a change reacted to is still pending")
		}
	})
	t.Run("a later generation answers the earlier", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 2, ms(0), ms(5), nil)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 3, ms(10), ms(15), nil)
		tr.ControllerSeen(0, uid, 3, 3, ms(40))
		if r := rec.kinds(Reacted); len(r) != 2 || r[0].Latency != 40*time.Millisecond || r[1].Latency != 30*time.Millisecond {
			t.Fatalf("reactions %+v, want 40ms and 30ms", r)
		}
	})
	t.Run("missed then late", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 2, ms(0), ms(5), nil)
		tr.sweep(ms(1000))
		if n := len(rec.kinds(ReactionMissed)); n != 0 {
			t.Fatalf("%d misses at the deadline, not past it", n)
		}
		tr.sweep(ms(1200))
		tr.sweep(ms(1300))
		if m := rec.kinds(ReactionMissed); len(m) != 1 || m[0].Reason != metrics.ReactionUndelivered {
			t.Fatalf("misses %+v after the deadline, want 1, undelivered: the change never reached the probe's watch", m)
		}
		if tr.Pending() != 0 {
			t.Fatal("a missed change still counts as pending for Drained")
		}
		tr.ControllerSeen(0, uid, 2, 2, ms(3000))
		r := rec.kinds(Reacted)
		if len(r) != 1 || !r[0].Late || r[0].Share >= 0 {
			t.Fatalf("reactions %+v, want one late, with no share (the change was never seen)", r)
		}
		if n := len(rec.kinds(ReactionMissed)); n != 1 {
			t.Fatalf("%d misses, want still 1", n)
		}
	})
	t.Run("missed with the change delivered: the controller's", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 2, ms(0), ms(5), nil)
		tr.ControllerSeen(0, uid, 2, 1, ms(8))
		tr.sweep(ms(1300))
		tr.sweep(ms(10_200))
		m, l := rec.kinds(ReactionMissed), rec.kinds(ReactionLost)
		if len(m) != 1 || m[0].Reason != metrics.ReactionController || len(l) != 1 || l[0].Reason != metrics.ReactionController {
			t.Fatalf("misses %+v, lost %+v: want one of each, the controller's", m, l)
		}
	})
	t.Run("late without a sweep", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 2, ms(0), ms(5), nil)
		tr.ControllerSeen(0, uid, 2, 2, ms(1500))
		if m, r := rec.kinds(ReactionMissed), rec.kinds(Reacted); len(m) != 1 || len(r) != 1 || !r[0].Late {
			t.Fatalf("misses %v, reactions %+v: want one of each, late", m, r)
		}
	})
	t.Run("lost", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 2, ms(0), ms(5), nil)
		tr.sweep(ms(2000))
		tr.sweep(ms(10_200))
		if n := len(rec.kinds(ReactionLost)); n != 1 {
			t.Fatalf("%d lost, want 1", n)
		}
		tr.ControllerSeen(0, uid, 2, 2, ms(11_000))
		if n := len(rec.kinds(Reacted)); n != 0 {
			t.Fatalf("%d reactions after the loss, want none", n)
		}
	})
	t.Run("a generation answered before the write was sent", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerSeen(0, uid, 3, 3, ms(5)) // a change whose answer was lost
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 3, ms(10), ms(15), nil)
		tr.sweep(ms(20_000))
		if n := len(rec.kinds(ControllerChanged)) + len(rec.kinds(Reacted)) + len(rec.kinds(ReactionMissed)) + len(rec.kinds(ReactionLost)); n != 0 {
			t.Fatalf("%d outcomes for a write that changed nothing", n)
		}
	})
	t.Run("failed and created owe nothing", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbCreate, uid, 1, ms(0), ms(5), nil)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 0, ms(10), ms(15), errors.New("refused"))
		tr.sweep(ms(20_000))
		if n := len(rec.kinds(ReactionMissed)) + len(rec.kinds(ReactionLost)); n != 0 {
			t.Fatalf("%d misses or losses for writes that owe no reaction", n)
		}
	})
	t.Run("a new object", func(t *testing.T) {
		tr, rec := newReactionTracker(t)
		tr.ControllerWrote(0, metrics.VerbUpdate, uid, 5, ms(0), ms(5), nil)
		tr.ControllerWrote(0, metrics.VerbCreate, "u2", 1, ms(10), ms(15), nil)
		tr.ControllerWrote(0, metrics.VerbUpdate, "u2", 2, ms(20), ms(25), nil)
		tr.ControllerSeen(0, uid, 5, 5, ms(30)) // the old object's last word
		tr.ControllerSeen(0, "u2", 2, 2, ms(40))
		tr.sweep(ms(20_000))
		r := rec.kinds(Reacted)
		if len(r) != 1 || r[0].Seq != 2 || len(rec.kinds(ReactionLost)) != 0 {
			t.Fatalf("reactions %+v, lost %v: want the new object's one, and the old one's change dropped", r, rec.kinds(ReactionLost))
		}
	})
}
