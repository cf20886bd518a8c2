package judge

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// When every path is late (etcd stalls), the apiserver's share still
// pairs each late arrival with the etcd path's late arrival, in either
// order: the apiservers' share of an etcd stall is the difference, not
// the stall.
func TestAPIServerLagPairsAllLate(t *testing.T) {
	rec := &lagsByWrite{}
	tr, _ := newEtcdTracker(rec) // deadline 1 s
	ms := time.Millisecond
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
	w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventModified, noTrace, at(10*ms))
	tr.Ack(w, 0, nil, t0.Add(11*ms))
	tr.sweep(t0.Add(2 * time.Second))
	if n := tr.ledger.settled.n; n != 2 {
		t.Fatalf("%d writes settled before the late arrivals, want 2", n)
	}
	// m/1: an apiserver path first, then etcd, then the other.
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(6900*ms))
	tr.observe(etcdIdx, metrics.EventAdded, marker("m", 1), t0.Add(7000*ms))
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(7050*ms))
	// m/2: etcd first.
	tr.observe(etcdIdx, metrics.EventModified, marker("m", 2), t0.Add(6900*ms))
	tr.observe(watchIdx, metrics.EventModified, marker("m", 2), t0.Add(7000*ms))
	tr.observe(informer, metrics.EventModified, marker("m", 2), t0.Add(7150*ms))
	tr.CloseCycle(c)
	want := map[string]map[WriteKey]time.Duration{
		metrics.PathWatch:    {{"m", 1}: -100 * ms, {"m", 2}: 100 * ms},
		metrics.PathInformer: {{"m", 1}: 50 * ms, {"m", 2}: 250 * ms},
	}
	for path, lags := range want {
		if got := rec.lags[path]; !maps.Equal(got, lags) {
			t.Errorf("%s: lags by write %v, want %v", path, got, lags)
		}
	}
}

var denyWatch = apierrors.NewForbidden(configmaps, "", errors.New(`user "probe" cannot watch resource "configmaps"`))

// refuse has path i's requests refused n times from from, 100 ms apart.
func refuse(tr *Tracker, i, n int, from time.Time) {
	for k := range n {
		tr.requestFailed(i, metrics.RequestWatch, denyWatch, from.Add(time.Duration(k)*100*time.Millisecond))
	}
}

// confirm records a check of request over fresh connections, begun at
// at, refused on every connection.
func confirm(tr *Tracker, request string, at time.Time) {
	tr.RefusalChecked(request, at, false, at)
}

// writeOne sends and answers write key at sent, in a cycle of its own,
// delivered on the informer path at once.
func writeOne(tr *Tracker, key WriteKey, sent time.Time) {
	c := tr.NewCycle()
	tr.Ack(tr.Expect(c, key, metrics.EventAdded, noTrace, func() time.Time { return sent }), 0, nil, sent)
	tr.observe(informer, metrics.EventAdded, marker(key.Name, key.Seq), sent.Add(time.Millisecond))
	tr.CloseCycle(c)
}

// A path is refused only by refusals that persist: one 403 on a reconnect
// during an outage of the control plane's (an apiserver restarting before
// its authorization caches synced) leaves the writes due missed as
// unavailable, and a path whose requests alternate between refusals and
// other failures (a crash-looping apiserver) never shows refused. Refused
// persistently, a write sent since is unmeasurable, one sent before the
// refusals began, while the path failed otherwise, is missed.
func TestPathRefusalMustPersist(t *testing.T) {
	tr, s := newTestTracker(t)
	ps := s.Paths[metrics.PathWatch]
	gauge := func() float64 { return testutil.ToFloat64(ps.Gauge(metrics.PathRefused, metrics.PathForbidden)) }
	unmeasurable := func() float64 {
		return testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused))
	}
	missed := func() float64 { return testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedUnavailable)) }
	connRefused := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")

	tr.streamEnded(watchIdx, metrics.EndError, time.Hour, errors.New("EOF"), t0.Add(-10*time.Second))
	tr.requestFailed(watchIdx, metrics.RequestList, connRefused, t0.Add(-9*time.Second))
	writeOne(tr, WriteKey{"a", 1}, t0)
	refuse(tr, watchIdx, 1, t0.Add(900*time.Millisecond))
	tr.sweep(t0.Add(2 * time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"one 403 in an outage: path_refused", gauge(), 0},
		{"one 403 in an outage: missed unavailable", missed(), 1},
		{"one 403 in an outage: unmeasurable", unmeasurable(), 0},
	})

	// Alternating: never refusedAfter in a row.
	for k := range 4 {
		refuse(tr, watchIdx, refusedAfter-1, t0.Add(time.Duration(3+k)*time.Second))
		tr.requestFailed(watchIdx, metrics.RequestList, connRefused, t0.Add(time.Duration(3+k)*time.Second+500*time.Millisecond))
		if got := gauge(); got != 0 {
			t.Fatalf("path_refused = %g with refusals alternating with connection refused, want 0", got)
		}
	}
	writeOne(tr, WriteKey{"b", 2}, t0.Add(10*time.Second))
	tr.sweep(t0.Add(12 * time.Second))
	// Refused from 11 s on: the write sent at 10 s, while the path failed
	// otherwise, is missed; the one sent at 20 s is not measurable.
	refuse(tr, watchIdx, refusedAfter, t0.Add(11*time.Second))
	confirm(tr, metrics.RequestWatch, t0.Add(12*time.Second))
	writeOne(tr, WriteKey{"c", 3}, t0.Add(20*time.Second))
	tr.sweep(t0.Add(22 * time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"persistent: path_refused", gauge(), 1},
		{"persistent: missed unavailable", missed(), 2},
		{"persistent: unmeasurable", unmeasurable(), 1},
	})
}

// A refusal that one apiserver gives while another apiserver path of the
// probe has the same request served is that apiserver's fault, not the
// exporter's configuration: the path is down, not refused, and the writes
// due are missed there. A stream open since before the refusals began is
// no evidence (it was authorized before any change since); one served
// after they began takes the refusal back, and so does a later check over
// fresh connections that was served.
func TestPathRefusedByOneAPIServer(t *testing.T) {
	tr, s := newTestTracker(t)
	pinned, pps := addTestPath(tr, "10.0.0.1:6443", t0.Add(-time.Hour))
	tr.live(pinned, t0.Add(-time.Hour))
	gauge := func() float64 { return testutil.ToFloat64(pps.Gauge(metrics.PathRefused, metrics.PathForbidden)) }

	// Refused on the pinned path while the others' streams are those
	// opened an hour ago: refused once fresh connections confirm it.
	tr.streamEnded(pinned, metrics.EndEOF, time.Hour, nil, t0.Add(-10*time.Second))
	refuse(tr, pinned, refusedAfter, t0.Add(-10*time.Second))
	if got := gauge(); got != 0 {
		t.Fatalf("path_refused on the pinned path = %g before any check over fresh connections, want 0", got)
	}
	confirm(tr, metrics.RequestWatch, t0.Add(-9*time.Second))
	if got := gauge(); got != 1 {
		t.Fatalf("path_refused on the pinned path = %g with no other apiserver served since, want 1", got)
	}
	// The watch path's stream resumes through the other apiservers: the
	// pinned path's refusal is its apiserver's.
	tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0.Add(-5*time.Second))
	tr.live(watchIdx, t0.Add(-5*time.Second))
	if got := gauge(); got != 0 {
		t.Fatalf("path_refused on the pinned path = %g once the watch path was served, want 0", got)
	}
	refuse(tr, pinned, refusedAfter, t0.Add(-4*time.Second))
	if got := gauge(); got != 0 {
		t.Fatalf("path_refused on the pinned path = %g refused again, the watch path served, want 0", got)
	}
	c := tr.NewCycle()
	answered(tr, c, WriteKey{"m", 1}, metrics.EventAdded)
	tr.observe(informer, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.observe(watchIdx, metrics.EventAdded, marker("m", 1), t0.Add(time.Millisecond))
	tr.CloseCycle(c)
	tr.sweep(t0.Add(2 * time.Second))
	probetest.WantCounts(t, []probetest.Count{
		{"pinned missed unavailable", testutil.ToFloat64(pps.Counter(metrics.EventsMissed, metrics.MissedUnavailable)), 1},
		{"pinned unmeasurable", testutil.ToFloat64(pps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)), 0},
		{"watch path_refused", testutil.ToFloat64(s.Paths[metrics.PathWatch].Gauge(metrics.PathRefused, metrics.PathForbidden)), 0},
	})
}

// What takes a refusal back is a request served by another apiserver
// after the refusals began, whatever became of the path that sent it: a
// relist's LIST, or a stream that opened and has ended since, is as much
// the apiservers' answer as a stream open now. Only the same request
// counts (RBAC grants list and watch apart), and the newest evidence
// decides: a check over fresh connections refused on every one after it
// confirms the refusal again, and a check served after that takes it back.
func TestPathRefusalServedElsewhereSinceItBegan(t *testing.T) {
	tr, s := newTestTracker(t)
	gauge := func() float64 {
		return testutil.ToFloat64(s.Paths[metrics.PathWatch].Gauge(metrics.PathRefused, metrics.PathForbidden))
	}
	// Both paths lose their streams; the watch path's watches are
	// refused, confirmed over fresh connections.
	tr.streamEnded(informer, metrics.EndEOF, time.Hour, nil, t0)
	tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0)
	refuse(tr, watchIdx, refusedAfter, t0.Add(time.Second))
	confirm(tr, metrics.RequestWatch, t0.Add(2*time.Second))
	if got := gauge(); got != 1 {
		t.Fatalf("path_refused = %g refused and confirmed, want 1", got)
	}
	// The informer relists by LIST: a list served says nothing of watch.
	tr.relisted(informer, metrics.RelistError, metrics.ModeList, t0.Add(3*time.Second))
	tr.relistDone(informer, metrics.ModeList, time.Millisecond, t0.Add(3*time.Second))
	if got := gauge(); got != 1 {
		t.Fatalf("path_refused = %g after a list served elsewhere, want 1: the watch is refused", got)
	}
	// Its watch opens and its stream ends again, all after the watch
	// path's refusals began: a watch served elsewhere since.
	tr.live(informer, t0.Add(4*time.Second))
	tr.streamEnded(informer, metrics.EndError, time.Millisecond, errors.New("EOF"), t0.Add(4*time.Second+time.Millisecond))
	tr.requestFailed(informer, metrics.RequestList, errors.New("connection refused"), t0.Add(5*time.Second))
	refuse(tr, watchIdx, 1, t0.Add(6*time.Second))
	if got := gauge(); got != 0 {
		t.Fatalf("path_refused = %g with a watch served elsewhere since the refusals began, its stream gone since, want 0", got)
	}
	// A check refused on every fresh connection after that: refused again.
	confirm(tr, metrics.RequestWatch, t0.Add(7*time.Second))
	if got := gauge(); got != 1 {
		t.Fatalf("path_refused = %g, confirmed after the last watch served elsewhere, want 1", got)
	}
	// A check served after that: the refusal is one apiserver's.
	tr.RefusalChecked(metrics.RequestWatch, t0.Add(8*time.Second), true, t0.Add(8*time.Second))
	if got := gauge(); got != 0 {
		t.Fatalf("path_refused = %g with the watch served over a fresh connection since, want 0", got)
	}
	// The writes sent meanwhile are missed there, not unmeasurable.
	writeOne(tr, WriteKey{"a", 1}, t0.Add(9*time.Second))
	tr.sweep(t0.Add(11 * time.Second))
	ps := s.Paths[metrics.PathWatch]
	probetest.WantCounts(t, []probetest.Count{
		{"watch missed unavailable", testutil.ToFloat64(ps.Counter(metrics.EventsMissed, metrics.MissedUnavailable)), 1},
		{"watch unmeasurable (path_refused)", testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)), 0},
	})
}

// A path's refusals are never its own verdict: each one past the first
// few asks for a check over fresh connections (ConfirmRefusal), naming the
// request refused, and until one confirms it the path is down, not
// refused. A check begun before the refusals began confirms nothing.
func TestPathRefusalAsksForAConfirmation(t *testing.T) {
	h := &heard{}
	paths := config.DefaultPaths
	sink := newTestSink(paths)
	tr := New(testSettings(paths), sink, h)
	for i := range paths {
		tr.live(i, t0.Add(-time.Hour))
	}
	gauge := func() float64 {
		return testutil.ToFloat64(sink.series.Paths[metrics.PathWatch].Gauge(metrics.PathRefused, metrics.PathForbidden))
	}
	tr.streamEnded(watchIdx, metrics.EndEOF, time.Hour, nil, t0)
	confirm(tr, metrics.RequestWatch, t0) // before the refusals
	refuse(tr, watchIdx, refusedAfter+1, t0.Add(time.Second))
	var asked []Outcome
	for _, o := range h.outcomes {
		if o.Kind == ConfirmRefusal {
			asked = append(asked, o)
		}
	}
	if len(asked) != 2 {
		t.Fatalf("%d checks asked for after %d refusals, want 2", len(asked), refusedAfter+1)
	}
	for _, o := range asked {
		if o.Request != metrics.RequestWatch || o.Reason != metrics.PathForbidden || o.Path.Name != metrics.PathWatch {
			t.Errorf("asked to check %+v, want the watch path's watch, forbidden", o)
		}
	}
	if got := gauge(); got != 0 {
		t.Fatalf("path_refused = %g with no check since the refusals began, want 0", got)
	}
	confirm(tr, metrics.RequestList, t0.Add(2*time.Second))
	if got := gauge(); got != 0 {
		t.Fatalf("path_refused = %g with only the list checked, want 0: the watch is refused", got)
	}
	confirm(tr, metrics.RequestWatch, t0.Add(2*time.Second))
	if got := gauge(); got != 1 {
		t.Fatalf("path_refused = %g once confirmed, want 1", got)
	}
}

// An informer relist whose list lacks a marker that still exists reports
// it as a tombstone holding its last state, the probe's own write: no
// evidence that another client took it out of the selector. The marker's
// delete stays owed there, and its miss shows the relist's fault. With the
// etcd path showing another client's change past that state, the
// tombstone is taken for a selector leave.
func TestRelistTombstoneIsNoLeave(t *testing.T) {
	for _, stripped := range []bool{false, true} {
		tr, sink := newEtcdTracker()
		ms := time.Millisecond
		c := createdAt10(tr, informer, watchIdx, etcdIdx)
		if stripped {
			tr.observe(etcdIdx, metrics.EventModified, markerAt("m", 1, 11), t0.Add(50*ms))
		}
		tr.relisted(informer, metrics.RelistExpired, "list", t0.Add(90*ms))
		tr.deliver(informer, t0.Add(100*ms), PathEvent{Event: metrics.EventDeleted, Obj: markerAt("m", 1, 10), Listed: true})
		tr.live(informer, t0.Add(100*ms))
		w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
		tr.Ack(w, 0, nil, t0.Add(210*ms))
		tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 12), t0.Add(220*ms))
		tr.observe(etcdIdx, metrics.EventDeleted, markerAt("m", 1, 12), t0.Add(220*ms))
		tr.sweep(t0.Add(5 * time.Second))
		tr.CloseCycle(c)
		ps := sink.series.Paths[metrics.PathInformer]
		want, missed := 0.0, 1.0
		if stripped {
			want, missed = 1, 0
		}
		probetest.WantCounts(t, []probetest.Count{
			{fmt.Sprintf("stripped %v: informer foreign", stripped), testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), want},
			{fmt.Sprintf("stripped %v: informer left_selector", stripped), testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), want},
			{fmt.Sprintf("stripped %v: informer missed", stripped), probetest.MissedTotal(ps), missed},
		})
	}
}

// Another client strips the marker's label just before the probe's
// delete: the informer delivers the leave before the delete is sent, the
// watch path after, whether before or after the delete's answer. The
// watch path's DELETED at the leave's resourceVersion is the leave, not
// the delete's: counted foreign, the delete unmeasurable there, never
// timed.
func TestLabelStripRacingTheDelete(t *testing.T) {
	for _, beforeAnswer := range []bool{true, false} {
		paths := []string{metrics.PathInformer, metrics.PathWatch}
		sink := newTestSink(paths)
		tr := New(testSettings(paths), sink)
		for i := range paths {
			tr.live(i, t0.Add(-time.Hour))
		}
		ms := time.Millisecond
		c := createdAt10(tr, informer, watchIdx)
		tr.observe(informer, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(100*ms))
		w := tr.Expect(c, WriteKey{"m", 2}, metrics.EventDeleted, noTrace, at(200*ms))
		if beforeAnswer {
			tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(205*ms))
			tr.Ack(w, 0, nil, t0.Add(210*ms))
		} else {
			tr.Ack(w, 0, nil, t0.Add(210*ms))
			tr.observe(watchIdx, metrics.EventDeleted, markerAt("m", 1, 11), t0.Add(215*ms))
		}
		tr.sweep(t0.Add(5 * time.Second))
		tr.CloseCycle(c)
		for _, p := range paths {
			ps := sink.series.Paths[p]
			probetest.WantCounts(t, []probetest.Count{
				{fmt.Sprintf("before the answer %v: %s observed deletes", beforeAnswer, p), testutil.ToFloat64(ps.Counter(metrics.EventsObserved, metrics.EventDeleted)), 0},
				{fmt.Sprintf("before the answer %v: %s left_selector", beforeAnswer, p), testutil.ToFloat64(ps.Counter(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector)), 1},
				{fmt.Sprintf("before the answer %v: %s foreign", beforeAnswer, p), testutil.ToFloat64(ps.Counter(metrics.ForeignChanges)), 1},
				{fmt.Sprintf("before the answer %v: %s missed", beforeAnswer, p), probetest.MissedTotal(ps), 0},
			})
		}
	}
}
