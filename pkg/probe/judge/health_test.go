package judge

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// history is what happens on the informer path of a test's tracker, in
// order, each step at the instant it names.
type history []func(*Tracker)

func (h history) on(tr *Tracker) {
	for _, step := range h {
		step(tr)
	}
}

// The steps of a history: the informer's stream ends for reason after a
// minute, the informer goes live, begins a relist, or fails a request.

func ended(reason string, at time.Time) func(*Tracker) {
	return func(tr *Tracker) { tr.streamEnded(informer, reason, time.Minute, nil, at) }
}

func wentLive(at time.Time) func(*Tracker) {
	return func(tr *Tracker) { tr.live(informer, at) }
}

func relisting(reason, mode string, at time.Time) func(*Tracker) {
	return func(tr *Tracker) { tr.relisted(informer, reason, mode, at) }
}

func failing(request string, err error, at time.Time) func(*Tracker) {
	return func(tr *Tracker) { tr.requestFailed(informer, request, err, at) }
}

// A reasonCase is a history of the informer path and the reason it
// explains a write's verdict by.
type reasonCase struct {
	name string
	path history
	want string
}

// wantOnlyReason checks that ps counted one write in family f, for reason
// want, and none for any other reason; what names f in the errors.
func wantOnlyReason(t *testing.T, ps *metrics.PathSeries, f *metrics.Family, what, want string) {
	t.Helper()
	for _, reason := range metrics.MissedReasons {
		n := 0.0
		if reason == want {
			n = 1
		}
		if got := testutil.ToFloat64(ps.Counter(f, reason)); got != n {
			t.Errorf("%s (%s) = %g, want %g", what, reason, got, n)
		}
	}
}

// A miss is explained only by what overlapped the window in which the event
// was due: an outage in which the path's requests failed, a relist (after
// which only final state arrives), or no stream open at all when it was due. A stream that ended and resumed from its
// resourceVersion loses nothing, so a miss across it is silent.
func TestMissedReason(t *testing.T) {
	ms := func(d time.Duration) time.Time { return t0.Add(d * time.Millisecond) }
	for _, tc := range []reasonCase{
		{"streaming all along", nil, metrics.MissedSilent},
		{"ended and resumed", history{ended(metrics.EndTimeout, ms(10)), wentLive(ms(20))}, metrics.MissedSilent},
		{"cut and resumed", history{ended(metrics.EndEOF, ms(10)), wentLive(ms(20))}, metrics.MissedSilent},
		{"relisted in the window", history{ended(metrics.EndExpired, ms(10)), relisting(metrics.RelistExpired, metrics.ModeWatchList, ms(300)), wentLive(ms(400))}, metrics.MissedRelist},
		{"relisting when sent", history{relisting(metrics.RelistError, metrics.ModeList, ms(-100)), wentLive(ms(50))}, metrics.MissedRelist},
		{"relist done before the write", history{relisting(metrics.RelistError, metrics.ModeList, ms(-300)), wentLive(ms(-200))}, metrics.MissedSilent},
		{"relist after the deadline, before the sweep", history{ended(metrics.EndExpired, ms(1100)), relisting(metrics.RelistExpired, metrics.ModeList, ms(1200))}, metrics.MissedSilent},
		{"ended, not resumed when due", history{ended(metrics.EndEOF, ms(10)), wentLive(ms(1050))}, metrics.MissedUnavailable},
		{"ended, still out at the sweep", history{ended(metrics.EndEOF, ms(10))}, metrics.MissedUnavailable},
		{"requests failing", history{ended(metrics.EndEOF, ms(10)), failing(metrics.RequestWatch, errors.New("connection refused"), ms(20))}, metrics.MissedUnavailable},
		{"relisting, but its requests failing", history{ended(metrics.EndExpired, ms(10)), relisting(metrics.RelistExpired, metrics.ModeList, ms(20)), failing(metrics.RequestList, errors.New("forbidden"), ms(30))}, metrics.MissedUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, s := newTestTracker(t)
			deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
			tc.path.on(tr)
			tr.sweep(ms(1500))
			wantOnlyReason(t, s.Paths[metrics.PathInformer], metrics.EventsMissed, "missed", tc.want)
		})
	}
}

// A path is stalled when acknowledged writes go unanswered past the bound,
// and no longer as soon as anything arrives, a bookmark included.
func TestStall(t *testing.T) {
	tr, s := newTestTracker(t)
	deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
	tr.sweep(t0.Add(4 * time.Second))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Gauge(metrics.WatchStalled)); got != 0 {
		t.Fatalf("stalled before the bound: %g", got)
	}
	tr.sweep(t0.Add(6 * time.Second))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Gauge(metrics.WatchStalled)); got != 1 {
		t.Errorf("informer stalled = %g, want 1", got)
	}
	if got := testutil.ToFloat64(s.Paths[metrics.PathWatch].Gauge(metrics.WatchStalled)); got != 0 {
		t.Errorf("watch stalled = %g, want 0: it answered", got)
	}
	tr.bookmark(informer, t0.Add(7*time.Second))
	if got := testutil.ToFloat64(s.Paths[metrics.PathInformer].Gauge(metrics.WatchStalled)); got != 0 {
		t.Errorf("informer still stalled after a bookmark")
	}
}

// A path added mid-run owes nothing for writes sent before its first stream
// is live: its initial list holds them, and the watch from the list's
// version never delivers them. A path that never goes live owes every
// write sent once syncTimeout has passed, so an apiserver that never
// answers still shows as misses.
func TestAddedPathOwesOnlyOnceLive(t *testing.T) {
	tr, _ := newTestTracker(t)
	slowSlot, slow := addTestPath(tr, "10.0.0.1:6443", t0)
	_, dead := addTestPath(tr, "10.0.0.2:6443", t0)
	c := tr.NewCycle()
	send := func(seq uint64, at time.Duration) {
		w := tr.Expect(c, WriteKey{"m", seq}, metrics.EventModified, noTrace, func() time.Time { return t0.Add(at) })
		tr.Ack(w, 0, nil, t0.Add(at))
		tr.observe(informer, metrics.EventModified, marker("m", seq), t0.Add(at+time.Millisecond))
		tr.observe(watchIdx, metrics.EventModified, marker("m", seq), t0.Add(at+time.Millisecond))
	}
	send(1, 100*time.Millisecond) // while both are still listing
	tr.live(slowSlot, t0.Add(time.Second))
	send(2, 2*time.Second)             // the slow path is live now
	send(3, SyncTimeout+5*time.Second) // the dead one has had its chance
	tr.sweep(t0.Add(SyncTimeout + time.Minute))
	if got := probetest.MissedTotal(slow); got != 2 {
		t.Errorf("slow path missed %g, want 2 (the writes after it went live)", got)
	}
	if got := probetest.MissedTotal(dead); got != 1 {
		t.Errorf("dead path missed %g, want 1 (the write after syncTimeout)", got)
	}
}

// A lost write's reason is what the path went through between its send
// and the horizon: a relist (after which only final state comes), or no
// stream at all; a stream that stayed up and did not deliver is silent.
func TestLostReason(t *testing.T) {
	sec := func(d time.Duration) time.Time { return t0.Add(d * time.Second) }
	for _, tc := range []reasonCase{
		{"streaming all along", nil, metrics.MissedSilent},
		{"resumed after an end", history{ended(metrics.EndTimeout, sec(20)), wentLive(sec(21))}, metrics.MissedSilent},
		{"relisted after the deadline", history{ended(metrics.EndExpired, sec(20)), relisting(metrics.RelistExpired, metrics.ModeWatchList, sec(20)), wentLive(sec(21))}, metrics.MissedRelist},
		{"down at the horizon", history{ended(metrics.EndEOF, sec(30))}, metrics.MissedUnavailable},
		// A resume from the resourceVersion owes what the stream missed:
		// failures before it explain no loss once it is live again.
		{"requests failed, then resumed", history{ended(metrics.EndEOF, sec(30)), failing(metrics.RequestWatch, errors.New("connection refused"), sec(31)), wentLive(sec(40))}, metrics.MissedSilent},
		// Live again too shortly before the horizon to have replayed it.
		{"resumed within the deadline of the horizon", history{ended(metrics.EndEOF, sec(30)), wentLive(t0.Add(59500 * time.Millisecond))}, metrics.MissedUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, s := newTestTracker(t)
			deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
			tr.sweep(sec(2))
			tc.path.on(tr)
			tr.sweep(sec(61))
			wantOnlyReason(t, s.Paths[metrics.PathInformer], metrics.EventsLost, "lost", tc.want)
			wantMissedAccounted(t, tr, s)
		})
	}
}

// A stall is a stream that is open and silent: a path whose requests fail
// is down, not stalled, however long writes go unanswered, and a path that
// starts again has stallAfter to answer. A stream that ends and resumes
// from its resourceVersion is the same silent stream: its stall goes on.
func TestStallOnlyWhileLive(t *testing.T) {
	tr, s := newTestTracker(t) // stall after 5s
	inf := s.Paths[metrics.PathInformer]
	tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, t0.Add(-time.Second))
	tr.requestFailed(informer, metrics.RequestList, errors.New("forbidden"), t0)
	deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
	tr.sweep(t0.Add(30 * time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"informer stalled while down", testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)), 0},
		{"informer up", testutil.ToFloat64(inf.Gauge(metrics.PathUp)), 0},
	})
	tr.live(informer, t0.Add(40*time.Second))
	tr.sweep(t0.Add(44 * time.Second))
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 0 {
		t.Errorf("stalled %g within stallAfter of the path's start", got)
	}
	tr.sweep(t0.Add(46 * time.Second))
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 1 {
		t.Errorf("stalled = %g, want 1: the stream has been open and silent past stallAfter", got)
	}
	tr.streamEnded(informer, metrics.EndTimeout, time.Minute, nil, t0.Add(47*time.Second))
	tr.live(informer, t0.Add(47100*time.Millisecond))
	tr.sweep(t0.Add(48 * time.Second))
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 1 {
		t.Errorf("stalled = %g after a resume from the resourceVersion, want still 1", got)
	}
	tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, t0.Add(49*time.Second))
	tr.requestFailed(informer, metrics.RequestWatch, errors.New("connection refused"), t0.Add(49*time.Second))
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 0 {
		t.Errorf("stalled = %g once its requests fail, want 0: the path is down", got)
	}
}

// A stalled path that relists is down until the relist is live, and no
// longer stalled: what it missed while stalled is the relist's.
func TestRelistEndsStall(t *testing.T) {
	tr, s := newTestTracker(t) // stall after 5s
	inf := s.Paths[metrics.PathInformer]
	deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
	tr.sweep(t0.Add(6 * time.Second))
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 1 {
		t.Fatalf("stalled = %g, want 1: the informer has been live and silent past stallAfter", got)
	}
	tr.relisted(informer, metrics.RelistExpired, metrics.ModeList, t0.Add(7*time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"informer stalled once relisting", testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)), 0},
		{"informer up while relisting", testutil.ToFloat64(inf.Gauge(metrics.PathUp)), 0},
	})
}

// A silent stream cut and resumed every few seconds, faster than
// stallAfter, is still stalled: each resume is the same stream to a client.
func TestStallAcrossShortStreams(t *testing.T) {
	tr, s := newTestTracker(t) // stall after 5s
	inf := s.Paths[metrics.PathInformer]
	deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
	for sec := time.Duration(2); sec <= 8; sec += 2 {
		tr.streamEnded(informer, metrics.EndEOF, 2*time.Second, nil, t0.Add(sec*time.Second))
		tr.live(informer, t0.Add(sec*time.Second+10*time.Millisecond))
		tr.sweep(t0.Add(sec*time.Second + 1500*time.Millisecond))
	}
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 1 {
		t.Errorf("stalled = %g, want 1: nothing arrived for 8 s on streams resumed every 2 s", got)
	}
}

// A path that has never been live (its first list still under way, or
// refused) misses what is due as unavailable, whether or not it went live
// before the deadline: it was not there to receive it, which is not a
// relist that lost events.
func TestMissedBeforeFirstLiveUnavailable(t *testing.T) {
	ms := func(d time.Duration) time.Time { return t0.Add(d * time.Millisecond) }
	for _, tc := range []struct {
		name string
		path history
	}{
		{"initial relist under way when due", history{relisting(metrics.RelistInitial, metrics.ModeWatchList, ms(-100))}},
		{"went live between send and due", history{relisting(metrics.RelistInitial, metrics.ModeWatchList, ms(-100)), wentLive(ms(500))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newTestSink(config.DefaultPaths)
			tr := New(testSettings(config.DefaultPaths), sink)
			s := sink.series
			tr.live(watchIdx, t0.Add(-time.Hour))
			tc.path.on(tr)
			deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
			tr.sweep(ms(1500))
			ps := s.Paths[metrics.PathInformer]
			probetest.WantCounts(t, []probetest.Count{
				{"missed unavailable", testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedUnavailable)), 1},
				{"missed relist", testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedRelist)), 0},
			})
			// And lost as unavailable too, once the horizon has passed.
			tr.sweep(t0.Add(2 * time.Minute))
			probetest.WantCounts(t, []probetest.Count{
				{"lost unavailable", testutil.ToFloat64(ps.Counter(metrics.EventsLost, metrics.MissedUnavailable)), 1},
				{"lost relist", testutil.ToFloat64(ps.Counter(metrics.EventsLost, metrics.MissedRelist)), 0},
			})
		})
	}
}

// A reconnect that takes longer than stallAfter, with writes acknowledged
// meanwhile, is no stall: time without a stream is not silence of one, and
// the resumed stream has the deadline to replay what it owes.
func TestNoStallRightAfterASlowResume(t *testing.T) {
	tr, s := newTestTracker(t) // stall after 5s, deadline 1s
	inf := s.Paths[metrics.PathInformer]
	tr.streamEnded(informer, metrics.EndEOF, time.Minute, nil, t0.Add(-time.Second))
	deliveredOnlyOn(tr, watchIdx, metrics.EventAdded, time.Millisecond)
	tr.live(informer, t0.Add(10*time.Second)) // a plain resume after 11 s
	tr.sweep(t0.Add(10*time.Second + time.Millisecond))
	tr.sweep(t0.Add(12 * time.Second))
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 0 {
		t.Errorf("stalled = %g 2 s after a slow resume, want 0", got)
	}
	tr.sweep(t0.Add(15*time.Second + time.Millisecond))
	if got := testutil.ToFloat64(inf.Gauge(metrics.WatchStalled)); got != 1 {
		t.Errorf("stalled = %g, want 1: live and silent for 5 s since the resume", got)
	}
}

// Outages are kept for as long as a write they explain may still be
// judged: a relist around a write answered late, and lost only at its
// horizon, still explains the loss however long ago it ended.
func TestOutagesKeptUntilJudged(t *testing.T) {
	tr, s := newTestTracker(t, retaining(10*time.Second, 10*time.Second)) // deadline 1s
	tr.relisted(informer, metrics.RelistExpired, metrics.ModeList, t0.Add(-500*time.Millisecond))
	tr.live(informer, t0.Add(200*time.Millisecond))
	c := tr.NewCycle()
	w := tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, noTrace, at(0))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(2500*time.Millisecond))
	tr.Ack(w, 0, nil, t0.Add(3*time.Second)) // a slow answer: a webhook
	tr.CloseCycle(c)
	tr.streamEnded(informer, metrics.EndTimeout, time.Minute, nil, t0.Add(5*time.Second))
	tr.live(informer, t0.Add(5*time.Second+time.Millisecond)) // a plain resume
	for sec := time.Duration(4); sec <= 14; sec++ {
		tr.sweep(t0.Add(sec * time.Second))
	}
	ps := s.Paths[metrics.PathInformer]
	probetest.WantCounts(t, []probetest.Count{
		{"informer missed relist", testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedRelist)), 1},
		{"informer lost relist", testutil.ToFloat64(ps.Counter(metrics.EventsLost, metrics.MissedRelist)), 1},
		{"informer lost silently", testutil.ToFloat64(ps.Counter(metrics.EventsLost, metrics.MissedSilent)), 0},
	})
}
