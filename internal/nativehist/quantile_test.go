package nativehist

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func observe(t *testing.T, values ...float64) *dto.Histogram {
	t.Helper()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x", NativeHistogramBucketFactor: 1.1})
	for _, v := range values {
		h.Observe(v)
	}
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

// Quantiles land within one bucket (10%) of the true value, across
// histograms combined.
func TestQuantile(t *testing.T) {
	var a, b []float64
	for i := 1; i <= 1000; i++ {
		v := float64(i) / 1000 // 1 ms .. 1 s
		if i%2 == 0 {
			a = append(a, v)
		} else {
			b = append(b, v)
		}
	}
	ha, hb := observe(t, a...), observe(t, b...)
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.5}, {0.9, 0.9}, {0.99, 0.99}, {0.01, 0.01}} {
		got := Quantile(tc.q, ha, hb)
		if math.Abs(got-tc.want)/tc.want > 0.1 {
			t.Errorf("q%g = %g, want %g within 10%%", tc.q, got, tc.want)
		}
	}
}

func TestQuantileEmpty(t *testing.T) {
	if got := Quantile(0.5, observe(t)); !math.IsNaN(got) {
		t.Errorf("empty histogram gave %g, want NaN", got)
	}
}
