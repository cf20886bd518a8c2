package main

import (
	"bytes"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// seriesCount is what one probe with the default paths (informer and
// watch) costs in series, with or without classic histogram buckets.
type seriesCount struct {
	ClassicHistograms bool `json:"classic_histograms"`
	// Text is the samples of the text format: the series of a Prometheus
	// that does not ingest native histograms.
	Text int `json:"text_series"`
	// Native is the series of a Prometheus that ingests native histograms
	// from the protobuf format (scrape_native_histograms): a histogram with
	// native buckets is one series, a classic one its buckets, sum and count.
	Native int `json:"native_ingestion_series"`
}

// seriesPerProbe counts one probe's series as a running exporter has them:
// every series at zero from the start, plus what the first events add: the
// initial relist of each path (the informer's by WatchList, client-go's
// default, the bare watch's by LIST), an event's arrival, latencies. It
// matches the exporter's /metrics with one such probe.
func seriesPerProbe() ([]seriesCount, error) {
	var out []seriesCount
	for _, classic := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		m := metrics.NewProbeWithOptions(reg, metrics.Options{NativeHistogramsOnly: !classic})
		s := m.ForProbe("p", []string{metrics.PathInformer, metrics.PathWatch})
		for path, ps := range s.Paths {
			mode := metrics.ModeWatchList
			if path == metrics.PathWatch {
				mode = metrics.ModeList
			}
			ps.Counter(metrics.Relists, metrics.RelistInitial, mode).Inc()
			ps.Observer(metrics.RelistDuration, mode).Observe(0.02)
			ps.Idle.Touch(time.Now())
			for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
				ps.Observer(metrics.EventLatency, ev).Observe(0.004)
			}
		}
		for _, verb := range []string{metrics.VerbCreate, metrics.VerbUpdate, metrics.VerbDelete} {
			s.Observer(metrics.WriteDuration, verb).Observe(0.003)
		}
		mfs, err := reg.Gather()
		if err != nil {
			return nil, err
		}
		c := seriesCount{ClassicHistograms: classic}
		var text bytes.Buffer
		enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				return nil, err
			}
			for _, metric := range mf.GetMetric() {
				h := metric.GetHistogram()
				switch {
				case mf.GetType() != dto.MetricType_HISTOGRAM:
					c.Native++
				case h.Schema != nil:
					c.Native++
				default:
					c.Native += len(h.GetBucket()) + 3 // +Inf, sum, count
				}
			}
		}
		for _, line := range strings.Split(text.String(), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				c.Text++
			}
		}
		out = append(out, c)
	}
	return out, nil
}
