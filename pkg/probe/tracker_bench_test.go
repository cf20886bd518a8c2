package probe

import (
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// what every watch event costs the exporter.
func BenchmarkObserve(b *testing.B) {
	t := &testing.T{}
	tr, _ := newTestTracker(t)
	objs := benchObjects(b.N)
	c := tr.newCycle()
	for i := range b.N {
		tr.ack(tr.expect(c, writeKey{"m", uint64(i + 1)}, metrics.EventModified, noSpan, at(0)), nil)
	}
	arrival := t0.Add(time.Millisecond)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		tr.observe(informer, metrics.EventModified, objs[i], arrival)
	}
}

// BenchmarkWriteLifecycle is one write through its whole life in steady
// state: registered, acknowledged, seen on both paths, settled, and later
// forgotten by the sweep.
func BenchmarkWriteLifecycle(b *testing.B) {
	t := &testing.T{}
	tr, _ := newTestTracker(t)
	tr.retain = 0 // forget settled writes at the next sweep, as in steady state
	objs := benchObjects(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := tr.newCycle()
		w := tr.expect(c, writeKey{"m", uint64(i + 1)}, metrics.EventModified, noSpan, at(0))
		tr.ack(w, nil)
		tr.observe(informer, metrics.EventModified, objs[i], t0.Add(time.Millisecond))
		tr.observe(watchIdx, metrics.EventModified, objs[i], t0.Add(time.Millisecond))
		tr.closeCycle(c)
		if i%64 == 0 {
			tr.sweep(t0.Add(time.Second))
		}
	}
}
