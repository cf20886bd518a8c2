package paths

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// A relist counts once however many attempts it takes, and an expiry seen
// during it belongs to it: the next relist is not labelled by it.
func TestRelistAttempts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	sink := judge.NewMetricsSink(m, "p", []string{metrics.PathInformer}, nil, nil, nil, judge.RetiredSeries{})
	tr := judge.New(judge.Settings{Paths: []string{metrics.PathInformer}, Deadline: time.Second, StallAfter: time.Minute, Retain: time.Minute, LostAfter: 30 * time.Second, Base: time.Now()}, sink)
	p := NewBase(Env{Handle: tr.Handle(0), WatchTimeout: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	relists := func(reason string) float64 {
		return probetest.Sample(reg, metrics.Relists, "p", metrics.PathInformer, "", reason, metrics.ModeWatchList).GetCounter().GetValue() +
			probetest.Sample(reg, metrics.Relists, "p", metrics.PathInformer, "", reason, metrics.ModeList).GetCounter().GetValue()
	}
	p.RelistAttempt(metrics.ModeWatchList)
	p.RelistAttempt(metrics.ModeList) // client-go's fallback: the same relist
	p.RelistAttempt(metrics.ModeWatchList)
	p.RelistCompleted(metrics.ModeWatchList)
	p.SetNextReason(metrics.RelistExpired)
	p.RelistAttempt(metrics.ModeWatchList)
	p.SetNextReason(metrics.RelistExpired) // a 410 inside that relist
	p.RelistCompleted(metrics.ModeList)
	p.RelistAttempt(metrics.ModeList)
	for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistExpired: 1, metrics.RelistError: 1} {
		if got := relists(reason); got != want {
			t.Errorf("relists (%s) = %g, want %g", reason, got, want)
		}
	}
}
