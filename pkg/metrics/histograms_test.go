package metrics

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// histograms gathers a registry with one probe on the informer and watch
// paths, one observation in each histogram, and returns its histogram
// families by name.
func histograms(t *testing.T, opts Options) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewProbeWithOptions(reg, opts)
	s := m.ForProbe("p", []string{PathInformer, PathWatch})
	for _, ps := range s.Paths {
		for _, ev := range []string{EventAdded, EventModified, EventDeleted} {
			ps.Observer(EventLatency, ev).Observe(0.0042)
		}
		ps.Observer(WatchDuration).Observe(300)
		ps.Observer(RelistDuration, ModeWatchList).Observe((30 * time.Millisecond).Seconds())
	}
	for _, verb := range []string{VerbCreate, VerbUpdate, VerbDelete} {
		s.Observer(WriteDuration, verb).Observe(0.003)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			out[mf.GetName()] = mf
		}
	}
	return out, text.String()
}

func TestDefaultHistograms(t *testing.T) {
	got, _ := histograms(t, Options{})
	want := map[string]struct {
		classic int
		native  bool
	}{
		"watchprobe_event_latency_seconds":   {len(latencyBuckets), true},
		"watchprobe_write_duration_seconds":  {len(latencyBuckets), true},
		"watchprobe_watch_duration_seconds":  {len(lifetimeBuckets), false},
		"watchprobe_relist_duration_seconds": {len(latencyBuckets), false},
	}
	if len(got) != len(want) {
		t.Errorf("%d histograms, want %d", len(got), len(want))
	}
	for name, w := range want {
		mf := got[name]
		if mf == nil {
			t.Errorf("%s missing", name)
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if len(h.GetBucket()) != w.classic {
				t.Errorf("%s: %d classic buckets, want %d", name, len(h.GetBucket()), w.classic)
			}
			if native := h.Schema != nil; native != w.native {
				t.Errorf("%s: native buckets %v, want %v", name, native, w.native)
			}
			if h.GetSampleCount() != 1 {
				t.Errorf("%s: count %d, want the one observation", name, h.GetSampleCount())
			}
		}
	}
}

// With NativeHistogramsOnly no histogram has a classic bucket, in protobuf
// or in the text format, and the observations land in native buckets.
func TestNativeHistogramsOnly(t *testing.T) {
	got, text := histograms(t, Options{NativeHistogramsOnly: true})
	if len(got) != 4 {
		t.Errorf("%d histograms, want 4", len(got))
	}
	for name, mf := range got {
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if len(h.GetBucket()) != 0 {
				t.Errorf("%s: %d classic buckets, want none", name, len(h.GetBucket()))
			}
			if h.Schema == nil {
				t.Errorf("%s: no native buckets", name)
				continue
			}
			var inBuckets int64
			for _, d := range h.GetPositiveDelta() {
				inBuckets += d // one observation: a single bucket holding 1
			}
			if h.GetSampleCount() != 1 || inBuckets != 1 || len(h.GetPositiveSpan()) != 1 {
				t.Errorf("%s: count %d, positive buckets %v %v; want the one observation in one native bucket", name, h.GetSampleCount(), h.GetPositiveSpan(), h.GetPositiveDelta())
			}
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, `le="`) && !strings.Contains(line, `le="+Inf"`) {
			t.Fatalf("classic bucket in the text format: %s", line)
		}
	}
}
