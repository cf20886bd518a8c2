package paths

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// A relist counts once however many attempts it takes, and an expiry seen
// during it belongs to it: the next relist is not labelled by it.
func TestRelistAttempts(t *testing.T) {
	m := metrics.NewProbe(prometheus.NewRegistry())
	sink := judge.NewMetricsSink(m, "p", []string{metrics.PathInformer}, nil, nil, nil, judge.RetiredSeries{})
	tr := judge.New(judge.Settings{Paths: []string{metrics.PathInformer}, Deadline: time.Second, StallAfter: time.Minute, Retain: time.Minute, LostAfter: 30 * time.Second, Base: time.Now()}, sink)
	p := newPathBase(Env{Handle: tr.Handle(0), WatchTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ps := sink.Series().Paths[metrics.PathInformer]
	relists := func(reason string) float64 {
		return testutil.ToFloat64(ps.Counter(metrics.Relists, reason, metrics.ModeWatchList)) +
			testutil.ToFloat64(ps.Counter(metrics.Relists, reason, metrics.ModeList))
	}
	p.relistAttempt(metrics.ModeWatchList)
	p.relistAttempt(metrics.ModeList) // client-go's fallback: the same relist
	p.relistAttempt(metrics.ModeWatchList)
	p.relistCompleted(metrics.ModeWatchList)
	p.setNextReason(metrics.RelistExpired)
	p.relistAttempt(metrics.ModeWatchList)
	p.setNextReason(metrics.RelistExpired) // a 410 inside that relist
	p.relistCompleted(metrics.ModeList)
	p.relistAttempt(metrics.ModeList)
	for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistExpired: 1, metrics.RelistError: 1} {
		if got := relists(reason); got != want {
			t.Errorf("relists (%s) = %g, want %g", reason, got, want)
		}
	}
}
