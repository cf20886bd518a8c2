package judge

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The hot path of the exporter: a write registered, acknowledged, its event
// matched and recorded on both paths, and the sweep that settles it. Run
// with `make bench` (or go test -bench . -benchmem ./pkg/probe).

func benchObjects(n int) []metav1.Object {
	objs := make([]metav1.Object, n)
	for i := range objs {
		objs[i] = &metav1.ObjectMeta{Name: "m", ResourceVersion: "1", Annotations: map[string]string{AnnotationSeq: strconv.Itoa(i + 1)}}
	}
	return objs
}

// BenchmarkObserve is one arriving event matched to its write and recorded:
// what every watch event costs the exporter, with the two default paths and
// with three more pinned to apiservers.
func BenchmarkObserve(b *testing.B) {
	for _, apiservers := range []int{0, 3} {
		b.Run(fmt.Sprintf("paths=%d", len(config.DefaultPaths)+apiservers), func(b *testing.B) {
			t := &testing.T{}
			tr, _ := newTestTracker(t)
			for n := range apiservers {
				addr := fmt.Sprintf("10.0.0.%d:6443", n+1)
				tr.live(tr.AddPath(metrics.PathAPIServer, addr, t0.Add(-2*time.Hour)), t0.Add(-time.Hour))
			}
			objs := benchObjects(b.N)
			c := tr.NewCycle()
			for i := range b.N {
				tr.Ack(tr.Expect(c, WriteKey{"m", uint64(i + 1)}, metrics.EventModified, noTrace, at(0)), 0, nil, t0)
			}
			arrival := t0.Add(time.Millisecond)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				tr.observe(informer, metrics.EventModified, objs[i], arrival)
			}
		})
	}
}

// BenchmarkWriteLifecycle is one write through its whole life in steady
// state: registered, acknowledged, seen on both paths, settled, and later
// forgotten by the sweep, or kept as a settledWrite for the retention.
func BenchmarkWriteLifecycle(b *testing.B) {
	b.Run("forgotten", func(b *testing.B) { benchmarkWriteLifecycle(b, 0) })
	b.Run("retained", func(b *testing.B) { benchmarkWriteLifecycle(b, time.Hour) })
}

func benchmarkWriteLifecycle(b *testing.B, retain time.Duration) {
	t := &testing.T{}
	tr, _ := newTestTracker(t, retaining(retain, min(retain, time.Minute)))
	objs := benchObjects(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := tr.NewCycle()
		w := tr.Expect(c, WriteKey{"m", uint64(i + 1)}, metrics.EventModified, noTrace, at(0))
		tr.Ack(w, 0, nil, t0)
		tr.observe(informer, metrics.EventModified, objs[i], t0.Add(time.Millisecond))
		tr.observe(watchIdx, metrics.EventModified, objs[i], t0.Add(time.Millisecond))
		tr.CloseCycle(c)
		if i%64 == 0 {
			tr.sweep(t0.Add(time.Second))
		}
	}
}

// BenchmarkSweepWithRetainedWrites is one sweep while 100k settled writes
// are retained (minutes of writes at a high rate): its work under the lock
// must follow the writes that fall due, not the writes retained.
func BenchmarkSweepWithRetainedWrites(b *testing.B) {
	t := &testing.T{}
	tr, _ := newTestTracker(t)
	const retained = 100_000
	objs := benchObjects(retained)
	c := tr.NewCycle()
	step := time.Microsecond
	for i := range retained {
		sent := at(time.Duration(i) * step)
		w := tr.Expect(c, WriteKey{"m", uint64(i + 1)}, metrics.EventModified, noTrace, sent)
		tr.Ack(w, 0, nil, sent())
		tr.observe(informer, metrics.EventModified, objs[i], sent().Add(time.Millisecond))
		tr.observe(watchIdx, metrics.EventModified, objs[i], sent().Add(time.Millisecond))
	}
	// Every retained write is past its deadline and settled, none is old
	// enough to be forgotten.
	now := t0.Add(retained*step + 2*time.Second)
	tr.sweep(now)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now = now.Add(step)
		tr.sweep(now)
	}
	b.StopTimer()
	if n := len(tr.ledger.order) + tr.ledger.settled.n; n != retained {
		b.Fatalf("%d writes retained, want %d", n, retained)
	}
}

// BenchmarkObserveSettled is a delivery of a write already settled and
// compacted, with 100k retained: a duplicate, found by bisection and
// expanded for judgement.
func BenchmarkObserveSettled(b *testing.B) {
	t := &testing.T{}
	tr, _ := newTestTracker(t, retaining(time.Hour, time.Minute))
	const retained = 100_000
	objs := benchObjects(retained)
	c := tr.NewCycle()
	for i := range retained {
		tr.Ack(tr.Expect(c, WriteKey{"m", uint64(i + 1)}, metrics.EventModified, noTrace, at(0)), 0, nil, t0)
		tr.observe(informer, metrics.EventModified, objs[i], t0.Add(time.Millisecond))
		tr.observe(watchIdx, metrics.EventModified, objs[i], t0.Add(time.Millisecond))
	}
	tr.sweep(t0.Add(2 * time.Second))
	if tr.ledger.settled.n != retained {
		b.Fatalf("%d settled, want %d", tr.ledger.settled.n, retained)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tr.observe(informer, metrics.EventModified, objs[i%retained], t0.Add(3*time.Second))
	}
}
