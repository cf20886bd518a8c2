// Package nativehist estimates quantiles from Prometheus native histograms,
// whose exponential buckets (factor 1.1 here) resolve the few milliseconds a
// healthy watch takes far better than classic buckets can.
package nativehist

import (
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"
)

type bucket struct {
	lower, upper float64
	count        float64
}

// Quantile returns the q-quantile (0 < q < 1) of the observations in all of
// hs together, interpolating linearly inside the bucket it falls in. It
// returns NaN when there are no observations. Negative buckets are ignored:
// watchprobe observes durations only.
func Quantile(q float64, hs ...*dto.Histogram) float64 {
	var buckets []bucket
	var total float64
	for _, h := range hs {
		if h == nil {
			continue
		}
		if z := float64(h.GetZeroCount()); z > 0 {
			buckets = append(buckets, bucket{0, h.GetZeroThreshold(), z})
			total += z
		}
		base := math.Pow(2, math.Pow(2, -float64(h.GetSchema())))
		var idx int32
		var count int64
		deltas := h.GetPositiveDelta()
		d := 0
		for i, span := range h.GetPositiveSpan() {
			if i == 0 {
				idx = span.GetOffset()
			} else {
				idx += span.GetOffset()
			}
			for range span.GetLength() {
				count += deltas[d]
				d++
				upper := math.Pow(base, float64(idx))
				buckets = append(buckets, bucket{upper / base, upper, float64(count)})
				total += float64(count)
				idx++
			}
		}
	}
	if total == 0 {
		return math.NaN()
	}
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].upper < buckets[j].upper })
	rank := q * total
	var seen float64
	for _, b := range buckets {
		if b.count > 0 && seen+b.count >= rank {
			return b.lower + (b.upper-b.lower)*(rank-seen)/b.count
		}
		seen += b.count
	}
	return buckets[len(buckets)-1].upper
}
