// Package probetest holds the metric helpers the tests of the probe, its
// paths and its judgement share.
package probetest

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// MissedTotal sums a path's missed counter over its reasons.
func MissedTotal(ps *metrics.PathSeries) float64 { return overReasons(ps, metrics.EventsMissed) }

// LostTotal sums a path's lost counter over its reasons.
func LostTotal(ps *metrics.PathSeries) float64 { return overReasons(ps, metrics.EventsLost) }

func overReasons(ps *metrics.PathSeries, f *metrics.Family) float64 {
	var n float64
	for _, reason := range metrics.MissedReasons {
		n += testutil.ToFloat64(ps.Counter(f, reason))
	}
	return n
}

// Sample is the series of family f with label values (every label, in
// the family's order) as g exposes it, nil if none.
func Sample(g prometheus.Gatherer, f *metrics.Family, values ...string) *dto.Metric {
	names := f.LabelNames()
	if len(values) != len(names) {
		// A read by too few or too many labels would find nothing and
		// read as 0, which an expected 0 cannot tell from a count.
		panic(fmt.Sprintf("%s has the labels %v, read with the values %v", f.FullName(), names, values))
	}
metric:
	for _, m := range Gathered(g, f) {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for i, n := range names {
			if got[n] != values[i] {
				continue metric
			}
		}
		return m
	}
	return nil
}

// Gathered is every series of f that g exposes.
func Gathered(g prometheus.Gatherer, f *metrics.Family) []*dto.Metric {
	mfs, err := g.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == f.FullName() {
			return mf.GetMetric()
		}
	}
	return nil
}

// Histogram is the histogram an observer holds.
func Histogram(t *testing.T, o prometheus.Observer) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

// Count is one count a test checks: its name, what it is and what it
// should be. An alias of a plain struct, so that tables of them stay
// positional.
type Count = struct {
	Name      string
	Got, Want float64
}

// WantCounts reports every count that is not what it should be.
func WantCounts(t *testing.T, counts []Count) {
	t.Helper()
	for _, c := range counts {
		if c.Got != c.Want {
			t.Errorf("%s = %g, want %g", c.Name, c.Got, c.Want)
		}
	}
}
