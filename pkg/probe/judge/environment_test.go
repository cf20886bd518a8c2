package judge

import (
	"maps"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// When every path is late (etcd stalls), the apiserver's share still
// pairs each late arrival with the etcd path's late arrival, in either
// order: the apiservers' share of an etcd stall is the difference, not
// the stall.
func TestAPIServerLagPairsAllLate(t *testing.T) {
	paths := []string{metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd}
	sink := newTestSink(paths)
	rec := &lagsByWrite{}
	tr := New(testSettings(paths), sink, rec) // deadline 1 s
	for i := range paths {
		tr.live(i, t0.Add(-time.Hour))
	}
	const etcdIdx = 2
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
