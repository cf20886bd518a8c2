package main

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/watchprobe/watchprobe/internal/nativehist"
)

// reportedP50 is the p50 a user reads off the probe's own latency histogram
// of one path and event type, as Prometheus's histogram_quantile computes it
// from the classic buckets and from the native ones, beside the exact p50 of
// the same path and event in the same run.
type reportedP50 struct {
	Path          string  `json:"path"`
	Event         string  `json:"event"`
	ExactSeconds  float64 `json:"exact_seconds"`
	ClassicBucket float64 `json:"classic_buckets_seconds"`
	NativeBucket  float64 `json:"native_buckets_seconds"`
}

// reported reads the event latency histograms of reg.
func reported(reg prometheus.Gatherer, exact []latency) ([]reportedP50, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var out []reportedP50
	for _, mf := range mfs {
		if mf.GetName() != "watchprobe_event_latency_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			r := reportedP50{Path: labels["path"], Event: labels["event"],
				ClassicBucket: classicQuantile(0.5, m.GetHistogram()), NativeBucket: nativehist.Quantile(0.5, m.GetHistogram())}
			for _, l := range exact {
				if l.Client == "exporter: "+r.Path && l.Event == r.Event {
					r.ExactSeconds = l.P50Seconds
				}
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// classicQuantile is histogram_quantile over classic buckets: linear
// interpolation inside the bucket the rank falls in, from 0 in the first.
func classicQuantile(q float64, h *dto.Histogram) float64 {
	rank := q * float64(h.GetSampleCount())
	lower, below := 0.0, 0.0
	for _, b := range h.GetBucket() {
		upper, cum := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if cum >= rank {
			if cum == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(cum-below)
		}
		lower, below = upper, cum
	}
	return math.NaN()
}
