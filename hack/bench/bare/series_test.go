//go:build series

package main

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

func read(t *testing.T, o any) (count uint64, sum float64) {
	t.Helper()
	var m dto.Metric
	if err := o.(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h != nil {
		return h.GetSampleCount(), h.GetSampleSum()
	}
	return uint64(m.GetCounter().GetValue()), 0
}

func marker(name string, seq uint64) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotationSeq: strconv.FormatUint(seq, 10)}}}
}

// cycle is one marker cycle as the writer stamps it: a delete is stamped
// with seq 0, and its event carries the last update's seq.
var cycle = []struct {
	ev       watch.EventType
	stamped  uint64
	carrying uint64
}{{watch.Added, 1, 1}, {watch.Modified, 2, 2}, {watch.Deleted, 0, 2}}

var eventTypes = []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted}

// Each write's latency is timed from its send stamp, once per path: a
// write arriving again is not timed again, nor one never sent, nor another
// probe's; a failed write is counted but not timed; a write seen on every
// path is no longer awaited.
func TestSeriesTimeWhatTheExporterWould(t *testing.T) {
	clock := time.Unix(1000, 0)
	k := newExporterSeries(metrics.NewProbe(prometheus.NewRegistry()), 2, func() time.Time { return clock })
	// Write i takes i+1 ms and arrives i+5 ms (watch) and i+7 ms (informer)
	// after it was sent, so that no event type or verb is taken for another.
	for i, w := range cycle {
		ms := func(n int) time.Duration { return time.Duration(n+i) * time.Millisecond }
		k.sent(1, "m", w.stamped)
		k.wrote(1, w.ev, ms(1), nil)
		k.arrived(1, metrics.PathWatch, w.ev, marker("m", w.carrying), clock.Add(ms(5)))
		k.arrived(1, metrics.PathWatch, w.ev, marker("m", w.carrying), clock.Add(time.Hour)) // again
		k.arrived(1, metrics.PathInformer, w.ev, marker("m", w.carrying), clock.Add(ms(7)))
		clock = clock.Add(time.Second)
	}
	k.arrived(1, metrics.PathWatch, watch.Modified, marker("m", 9), clock) // never sent
	k.arrived(0, metrics.PathWatch, watch.Added, marker("m", 1), clock)    // another probe's
	k.sent(1, "f", 3)
	k.wrote(1, watch.Added, time.Second, errors.New("refused"))

	p1, p0 := k.probes[1].series, k.probes[0].series
	for i, ev := range eventTypes {
		for path, want := range map[string]float64{metrics.PathWatch: float64(5+i) / 1000, metrics.PathInformer: float64(7+i) / 1000} {
			if n, sum := read(t, p1.Paths[path].Observer(metrics.EventLatency, ev)); n != 1 || sum < want-1e-9 || sum > want+1e-9 {
				t.Errorf("%s path, %s: %d latencies summing to %gs, want 1 of %gs", path, ev, n, sum, want)
			}
			if n, _ := read(t, p1.Paths[path].Counter(metrics.EventsObserved, ev)); n != 1 {
				t.Errorf("%s path, %s: %d observed, want 1", path, ev, n)
			}
		}
		if n, _ := read(t, p0.Paths[metrics.PathWatch].Counter(metrics.EventsObserved, ev)); n != 0 {
			t.Errorf("probe 0, %s: %d observed, want none", ev, n)
		}
	}
	for i, verb := range []string{metrics.VerbCreate, metrics.VerbUpdate, metrics.VerbDelete} {
		want := uint64(1)
		if verb == metrics.VerbCreate {
			want = 2 // one failed
		}
		if n, _ := read(t, p1.Counter(metrics.Writes, verb)); n != want {
			t.Errorf("%d %s writes counted, want %d", n, verb, want)
		}
		if n, sum := read(t, p1.Observer(metrics.WriteDuration, verb)); n != 1 || sum < float64(1+i)/1000-1e-9 || sum > float64(1+i)/1000+1e-9 {
			t.Errorf("%d %s durations summing to %gs, want the one successful write's %dms", n, verb, sum, 1+i)
		}
	}
	if got := len(k.probes[1].sent); got != 1 {
		t.Errorf("%d writes still awaited, want 1 (the failed create)", got)
	}
}

// The bare client's own watch and informer handlers feed the series, the
// informer's delete as a tombstone after a relist.
func TestSeriesFedByBothPaths(t *testing.T) {
	k := newExporterSeries(metrics.NewProbe(prometheus.NewRegistry()), 1, time.Now)
	bare := &client{series: k}
	w := watch.NewFake()
	done := make(chan struct{})
	go func() { defer close(done); bare.consume(context.Background(), w, "", 0) }()
	for _, c := range cycle {
		k.sent(0, "m", c.stamped)
		obj := marker("m", c.carrying)
		w.Action(c.ev, obj)
		var informerObj any = obj
		if c.ev == watch.Deleted {
			informerObj = cache.DeletedFinalStateUnknown{Key: "ns/m", Obj: obj}
		}
		bare.informerArrived(0, c.ev, informerObj)
	}
	w.Stop()
	<-done
	for _, ev := range eventTypes {
		for _, path := range []string{metrics.PathWatch, metrics.PathInformer} {
			if n, _ := read(t, k.probes[0].series.Paths[path].Observer(metrics.EventLatency, ev)); n != 1 {
				t.Errorf("%s path, %s: %d latencies, want 1", path, ev, n)
			}
		}
	}
}

// A write that never arrives on every path is forgotten after forgetAfter,
// at the next write of its probe.
func TestSeriesForgetWritesThatNeverArrive(t *testing.T) {
	clock := time.Unix(1000, 0)
	k := newExporterSeries(metrics.NewProbe(prometheus.NewRegistry()), 1, func() time.Time { return clock })
	k.sent(0, "lost", 1)
	clock = clock.Add(forgetAfter)
	k.sent(0, "next", 1)
	if _, ok := k.probes[0].sent[sentKey{"lost", 1}]; !ok {
		t.Fatal("a write was forgotten at forgetAfter, before it was over")
	}
	clock = clock.Add(time.Millisecond)
	k.sent(0, "later", 1)
	if _, ok := k.probes[0].sent[sentKey{"lost", 1}]; ok {
		t.Error("a write that never arrived is still awaited after forgetAfter")
	}
	if len(k.probes[0].sent) != 2 {
		t.Errorf("%d writes awaited, want the 2 recent ones", len(k.probes[0].sent))
	}
}
