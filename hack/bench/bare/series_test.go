//go:build series

package main

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The series the reference keeps get what the exporter's would: a write's
// count and duration, and the latency of each arrival of a write it sent,
// on the path it arrived on; an arrival of a write it did not send (another
// replica's, or one forgotten) is not timed.
func TestSeriesObserveWhatTheExporterWould(t *testing.T) {
	k := newSeries(2).(*exporterSeries)
	marker := func(name, seq string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotationSeq: seq}}}
	}
	k.sent(1, "m1", 7, watch.Added)
	k.wrote(1, watch.Added, 3*time.Millisecond)
	time.Sleep(2 * time.Millisecond)
	k.arrived(1, metrics.PathWatch, watch.Added, marker("m1", "7"), time.Now())
	k.arrived(1, metrics.PathInformer, watch.Added, marker("m1", "8"), time.Now()) // not sent
	k.arrived(0, metrics.PathWatch, watch.Added, marker("m1", "7"), time.Now())    // another probe's

	count := func(o any) uint64 {
		var m dto.Metric
		if err := o.(interface{ Write(*dto.Metric) error }).Write(&m); err != nil {
			t.Fatal(err)
		}
		if h := m.GetHistogram(); h != nil {
			return h.GetSampleCount()
		}
		return uint64(m.GetCounter().GetValue())
	}
	p1, p0 := k.probes[1].series, k.probes[0].series
	for name, c := range map[string]struct {
		got  uint64
		want uint64
	}{
		"p1 creates":                 {count(p1.Writes[metrics.VerbCreate].Total), 1},
		"p1 create durations":        {count(p1.Writes[metrics.VerbCreate].Duration), 1},
		"p1 watch added latencies":   {count(p1.Paths[metrics.PathWatch].Latency[metrics.EventAdded]), 1},
		"p1 informer added (unsent)": {count(p1.Paths[metrics.PathInformer].Latency[metrics.EventAdded]), 0},
		"p0 watch added":             {count(p0.Paths[metrics.PathWatch].Latency[metrics.EventAdded]), 0},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d observations, want %d", name, c.got, c.want)
		}
	}
	var m dto.Metric
	_ = p1.Paths[metrics.PathWatch].Latency[metrics.EventAdded].(interface{ Write(*dto.Metric) error }).Write(&m)
	if sum := m.GetHistogram().GetSampleSum(); sum < 0.002 || sum > 10 {
		t.Errorf("latency observed %gs, want the time from the send stamp (at least 2ms)", sum)
	}
}
