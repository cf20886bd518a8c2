// Package check runs probes against a cluster for a number of cycles or a
// while, then judges what they saw against an objective: `watchprobe
// check`. It returns the report as a value; showing it, and progress, is
// the caller's.
package check

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

// Objective is what each path must meet for the check to pass.
type Objective struct {
	// Latency: an event that arrives within this of its write meets the
	// objective. It should be at most each probe's deadline, after which
	// an event counts as missed.
	Latency time.Duration
	// Target is the share of the events owed on each path that must meet
	// it, above 0 and at most 1.
	Target float64
	// Allowed is the number of anomalies allowed on each path (missed,
	// duplicated and out-of-order events), and of write errors per probe.
	Allowed int
}

// Options say what to check, against which cluster, for how long.
type Options struct {
	Probes    []config.Config
	Config    *rest.Config
	Replica   string
	OrphanAge time.Duration
	Logger    *slog.Logger
	Objective Objective
	// Cycles: stop once every probe has settled every cycle up to this
	// many. Duration, if positive, instead: stop after it.
	Cycles   int
	Duration time.Duration
	// Sinks, if set, gives more sinks for each probe's outcomes, such as
	// a display of its progress.
	Sinks func(probe string) []judge.Sink
	// Monitor, if set, is the self-monitor the probes' verdicts wait for
	// (probe.Options.Monitor).
	Monitor judge.Monitor
	// AgentsNamespace, if set, is the node agents' namespace: at its end
	// the check reads their Leases into the report's agents section.
	AgentsNamespace string
	// AgentsFailOnDegraded makes a degraded agent a problem of the check
	// rather than a note.
	AgentsFailOnDegraded bool
}

// Check is one check: Preflight, then Run.
type Check struct {
	opts    Options
	tallies map[string]*tally
	// fresh are the freshness checks' tallies, of probes with freshness set.
	fresh map[string]*freshTally
	// syncs are the WatchList sync checks' tallies, of probes with
	// watch_list set.
	syncs map[string]*syncTally
	// server is the kube-apiserver's release as Preflight read it; zero
	// when unknown.
	server kube.ServerVersion
	// agents is the agents' section as Run read it; agentsNote says why
	// it could not be read, set by Preflight when listing is forbidden.
	agents     *AgentsReport
	agentsNote string
}

// New prepares a check; it touches no cluster.
func New(opts Options) *Check {
	c := &Check{opts: opts, tallies: map[string]*tally{}, fresh: map[string]*freshTally{}, syncs: map[string]*syncTally{}}
	for _, cfg := range opts.Probes {
		c.tallies[cfg.Name] = newTally(cfg)
		if cfg.Freshness.Enabled() {
			c.fresh[cfg.Name] = newFreshTally()
		}
		if cfg.WatchList.Enabled() {
			c.syncs[cfg.Name] = newSyncTally()
		}
	}
	return c
}

// Cycles counts the verdicts of probe's cycles so far.
func (c *Check) Cycles(probe string) Cycles {
	if t := c.tallies[probe]; t != nil {
		return t.counts()
	}
	return Cycles{}
}

// Run runs the probes, then reports. It stops its probes, which delete
// their markers, before it returns; when ctx ends first, the report says
// it was interrupted. An error means that the probes could not start.
func (c *Check) Run(ctx context.Context) (*Report, error) {
	pm := metrics.NewProbe(prometheus.NewRegistry())
	var probes []*probe.Probe
	var checkers []*freshness.Checker
	var syncers []*watchlist.Checker
	for _, cfg := range c.opts.Probes {
		sinks := []judge.Sink{c.tallies[cfg.Name]}
		if c.opts.Sinks != nil {
			sinks = append(sinks, c.opts.Sinks(cfg.Name)...)
		}
		var relay freshness.Relay
		p, err := probe.New(cfg, probe.Options{
			Config: c.opts.Config, Metrics: pm, Logger: c.opts.Logger, Replica: c.opts.Replica, OrphanAge: c.opts.OrphanAge,
			Sinks: sinks, Monitor: c.opts.Monitor,
			// The report reads every count at the end.
			KeepRetiredSeries: true,
			Acknowledged:      relay.Acknowledged,
		})
		if err != nil {
			return nil, err
		}
		probes = append(probes, p)
		var observe func(freshness.Event)
		if t := c.fresh[cfg.Name]; t != nil {
			observe = t.observe
		}
		fc, err := freshness.Beside(cfg, p, c.opts.Config, pm, c.opts.Logger, observe, true)
		if err != nil {
			return nil, err
		}
		if fc != nil {
			relay.Set(fc)
			checkers = append(checkers, fc)
		}
		switch sc, err := watchlist.Beside(cfg, p, c.opts.Config, pm, c.opts.Logger, c.syncs[cfg.Name].observer(), true); {
		case err != nil:
			return nil, err
		case sc != nil:
			syncers = append(syncers, sc)
		}
	}

	started := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Go(func() { p.Run(runCtx) })
	}
	for _, fc := range checkers {
		wg.Go(func() { fc.Run(runCtx) })
	}
	for _, sc := range syncers {
		wg.Go(func() { sc.Run(runCtx) })
	}
	interrupted := c.wait(ctx, probes)
	elapsed := time.Since(started)
	cancel()
	wg.Wait()
	// The probes deleted their markers as they stopped; a slow or failing
	// apiserver can keep them from it, and the user must hear of that.
	left, listErrs := c.markersLeft()
	c.readAgents()

	r := c.report(started, elapsed, interrupted)
	r.addMarkersLeft(left, listErrs)
	return r, nil
}

// wait returns once the probes are done, or ctx is: then interrupted.
//
// With Cycles, the probes stop writing once every one has settled every
// cycle up to that many (a cycle with a miss settles only at its deadline,
// after newer ones); with Duration, once it has passed. Then they drain:
// the cycles under way finish, and the check waits until each of their
// writes has been seen or missed on every path. Cancelling them instead
// would keep their fast arrivals and lose their slow ones.
func (c *Check) wait(ctx context.Context, probes []*probe.Probe) (interrupted bool) {
	var until <-chan time.Time
	if c.opts.Duration > 0 {
		until = time.After(c.opts.Duration)
	}
	var longest time.Duration
	for _, cfg := range c.opts.Probes {
		longest = max(longest, time.Duration(cfg.Deadline))
	}
	draining := false
	var drainTimeout <-chan time.Time
	drain := func() {
		draining = true
		for _, p := range probes {
			p.StopWriting()
		}
		// A write that hangs is given up after the probe's write timeout.
		drainTimeout = time.After(longest + probe.WriteTimeout + 5*time.Second)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-until:
			drain()
		case <-drainTimeout:
			c.opts.Logger.Warn("writes still unsettled after the last cycle; stopping anyway")
			return false
		case <-tick.C:
			if !draining && c.opts.Duration <= 0 && c.settledThrough(uint64(c.opts.Cycles)) {
				drain()
			}
			if draining && drained(probes) {
				return false
			}
		}
	}
}

func drained(probes []*probe.Probe) bool {
	for _, p := range probes {
		if !p.Drained() {
			return false
		}
	}
	return true
}

// settledThrough says whether every probe has settled every cycle up to n.
func (c *Check) settledThrough(n uint64) bool {
	for _, t := range c.tallies {
		if t.counts().Through < n {
			return false
		}
	}
	return true
}

// markersLeft lists this replica's markers still in the cluster, of every
// kind and namespace the probes write, with a timeout of its own: the run's
// is over.
func (c *Check) markersLeft() ([]Marker, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := kube.NewClient(c.opts.Config)
	if err != nil {
		return nil, []error{err}
	}
	var left []Marker
	var errs []error
	type place struct{ kind, namespace string }
	seen := map[place]bool{}
	for _, cfg := range c.opts.Probes {
		where := place{cfg.Kind, cfg.Namespace}
		if seen[where] {
			continue
		}
		seen[where] = true
		markers, err := probe.MarkersLeft(ctx, client, cfg.Kind, cfg.Namespace, c.opts.Replica)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s markers in namespace %s: %w", cfg.Kind, cfg.Namespace, err))
			continue
		}
		for _, m := range markers {
			left = append(left, Marker{Kind: cfg.Kind, Namespace: cfg.Namespace, Name: m.Name, Finalizers: m.Finalizers, HeldBy: m.Managers})
		}
	}
	for _, cfg := range c.opts.Probes {
		for _, ctl := range cfg.Controllers {
			kind := probe.ControllerKind(ctl)
			where := place{kind, cfg.Namespace}
			if seen[where] {
				continue
			}
			seen[where] = true
			names, err := probe.ControllerMarkerNames(ctx, client, ctl, cfg.Namespace, c.opts.Replica)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s markers in namespace %s: %w", kind, cfg.Namespace, err))
				continue
			}
			for _, n := range names {
				left = append(left, Marker{Kind: kind, Namespace: cfg.Namespace, Name: n})
			}
		}
	}
	return left, errs
}
