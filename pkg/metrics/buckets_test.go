package metrics

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// Where healthy and busy clusters live, 2.5 to 50 ms, adjacent classic
// bounds are at most 1.5 apart: histogram_quantile interpolates linearly
// inside a bucket, and the 10-25 ms bucket read a true p50 of 11-12 ms as
// 14-16 ms.
func TestLatencyBucketsResolveBusyClusters(t *testing.T) {
	for i := 1; i < len(latencyBuckets); i++ {
		lo, hi := latencyBuckets[i-1], latencyBuckets[i]
		if lo >= 0.0025 && hi <= 0.05 && hi/lo > 1.5 {
			t.Errorf("bucket (%g, %g] is %.2f times wide: a p50 inside it reads up to that far off", lo, hi, hi/lo)
		}
	}
}

// The chart accepts as the SLO objective exactly the latency histogram's
// classic bounds: the SLI counts the events in the objective's bucket.
func TestChartObjectivesAreBucketBounds(t *testing.T) {
	data, err := os.ReadFile("../../charts/watchprobe/values.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			PrometheusRule struct {
				Properties struct {
					SLO struct {
						Properties struct {
							ObjectiveSeconds struct {
								Enum []float64 `json:"enum"`
							} `json:"objectiveSeconds"`
						} `json:"properties"`
					} `json:"slo"`
				} `json:"properties"`
			} `json:"prometheusRule"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	if got := schema.Properties.PrometheusRule.Properties.SLO.Properties.ObjectiveSeconds.Enum; !slices.Equal(got, latencyBuckets) {
		t.Errorf("values.schema.json prometheusRule.slo.objectiveSeconds enum = %v, want the latency buckets %v", got, latencyBuckets)
	}
}
