package probe

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The tracker tells a Recorder more when the Recorder implements these:
// `watchprobe check` reports exact quantiles and counts cycles with them, and
// the exporter's status page lists recent verdicts. They are optional
// interfaces rather than Options fields so that an existing Recorder (make
// bench) keeps working unchanged.

// LatencyRecorder hears every latency the tracker records, with the
// histogram child it is recorded in: that child's labels (probe, path,
// event and whatever else the path has) say what the latency is of, so a
// report can give exact quantiles of the very values the histogram holds.
// Like Recorder, it is called under the tracker's lock.
type LatencyRecorder interface {
	Latency(histogram prometheus.Observer, latency time.Duration)
}

// VerdictRecorder hears the verdict of every cycle that settled (each of
// its writes seen or missed on every path, or failed), once, as it
// settles. Cycles usually settle in the order they started, but one with a
// miss waits for its deadline while newer ones settle; its verdict is
// reported all the same, although watchprobe_probe_success keeps the
// newer one's. A cycle that the probe's own shutdown cut short never
// settles. Like Recorder, it is called under the tracker's lock.
type VerdictRecorder interface {
	Verdict(cycle uint64, ok bool)
}

// NopRecorder hears nothing. Embed it to implement only LatencyRecorder or
// VerdictRecorder.
type NopRecorder struct{}

func (NopRecorder) Sent(string, uint64, string, time.Time)    {}
func (NopRecorder) Arrived(string, string, uint64, time.Time) {}

// recordLatency passes one recorded latency to a LatencyRecorder.
func (t *tracker) recordLatency(o prometheus.Observer, d time.Duration) {
	if r, ok := t.recorder.(LatencyRecorder); ok {
		r.Latency(o, d)
	}
}

// recordVerdict passes the verdict of cycle c to a VerdictRecorder.
func (t *tracker) recordVerdict(c *cycle) {
	if r, ok := t.recorder.(VerdictRecorder); ok {
		r.Verdict(c.n, c.ok)
	}
}
