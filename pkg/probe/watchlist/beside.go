package watchlist

import (
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// Pinner is what the checks use of the marker probe they run beside: the
// apiservers it pins. pkg/probe's Probe has it; this package names only
// it.
type Pinner interface {
	PinnedAPIServers() []string
}

// Beside prepares the WatchList sync checks of the probe cfg describes,
// beside its marker probe mp (on the same apiservers), over rc; nil, nil
// when cfg has none. observe may be nil. keep: the series are read once
// at the end, as by a one-shot report (Options.Retired).
func Beside(cfg config.Config, mp Pinner, rc *rest.Config, m *metrics.Probe, logger *slog.Logger, observe func(Event), keep bool) (*Checker, error) {
	if !cfg.WatchList.Enabled() {
		return nil, nil
	}
	opts := Options{
		Probe: cfg.Name, Namespace: cfg.Namespace, Config: cfg.WatchList, LoadBalanced: rc,
		Retired: judge.RetiredSeries{Keep: keep, Grace: time.Duration(cfg.APIServers.SeriesGrace)},
		Metrics: m, Logger: logger, Now: time.Now, Observe: observe,
	}
	if cfg.APIServers.Enabled() {
		opts.Pinned, opts.ServerName = mp.PinnedAPIServers, cfg.APIServers.ServerName
	}
	return New(opts)
}
