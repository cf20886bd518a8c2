package freshness

import (
	"log/slog"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// MarkerProbe is what the checks use of the marker probe they run beside:
// the selector of its markers and the apiservers it pins. pkg/probe's
// Probe has both; this package names only them.
type MarkerProbe interface {
	MarkerSelector() string
	PinnedAPIServers() []string
}

// Beside prepares the freshness checks of the probe cfg describes, beside
// its marker probe mp, over rc; nil, nil when cfg has none. observe may be
// nil. keep: the series are read once at the end, as by a one-shot
// report (Options.Retired).
func Beside(cfg config.Config, mp MarkerProbe, rc *rest.Config, m *metrics.Probe, logger *slog.Logger, observe func(Event), keep bool) (*Checker, error) {
	if !cfg.Freshness.Enabled() {
		return nil, nil
	}
	opts := Options{
		Probe: cfg.Name, Namespace: cfg.Namespace, Config: cfg.Freshness, LoadBalanced: rc,
		MarkerKind: cfg.Kind, MarkerSelector: mp.MarkerSelector(),
		LostAfter: cfg.LostAfterOrDefault(), Retain: cfg.RetentionOrDefault(),
		Metrics: m, Logger: logger, Now: time.Now, Observe: observe,
		Retired: judge.RetiredSeries{Keep: keep, Grace: time.Duration(cfg.APIServers.SeriesGrace)},
	}
	if cfg.APIServers.Enabled() {
		opts.Pinned = PinnedTargets(rc, cfg.APIServers.ServerName, mp.PinnedAPIServers)
	}
	return New(opts)
}

// Relay passes the marker probe's acknowledgements on to a Checker made
// after the probe (which must exist first, to be asked for its markers):
// set its Acknowledged as the probe's, then Set the Checker before the
// probe runs.
type Relay struct{ c atomic.Pointer[Checker] }

// Acknowledged is Checker.Acknowledged once Set, else nothing.
func (r *Relay) Acknowledged(name string, rv uint64, deleted bool, at time.Time) {
	if c := r.c.Load(); c != nil {
		c.Acknowledged(name, rv, deleted, at)
	}
}

// Set makes c the Checker acknowledgements go to.
func (r *Relay) Set(c *Checker) { r.c.Store(c) }
