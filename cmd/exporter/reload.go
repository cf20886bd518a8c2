package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

// manager runs the configured probes and applies a new configuration by
// stopping and starting only the probes whose settings changed: a probe
// that is unchanged keeps its watch streams, its markers' sequence and its
// series, so a reload costs no relist and no counter reset.
//
// Only the --config.file is reloaded. Flags (the kubeconfig, the replica,
// the listen address, tracing) are read at start-up only; the file holds
// nothing else, so nothing in it needs a restart.
type manager struct {
	ctx     context.Context // the probes run under it
	file    string          // empty: the probe came from flags, and cannot be reloaded
	opts    probe.Options   // the same for every probe, but its Sinks
	metrics *metrics.Probe
	config  *metrics.Config
	board   *board
	logger  *slog.Logger

	reloadMu sync.Mutex // one reload at a time, whether SIGHUP or HTTP
	mu       sync.Mutex // guards running
	running  []*runningProbe
}

// runningProbe is one probe and the means to stop it.
type runningProbe struct {
	cfg    config.Config
	p      *probe.Probe
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned: its markers are deleted
}

// reload reads the config file again and applies it. A file that does not
// load changes nothing: the error is the one --config.check gives, naming
// the probe, its line and the field. Without a file there is nothing to
// reload, which is said but not counted as a failed reload: the running
// configuration is not at fault.
func (m *manager) reload() error {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	if m.file == "" {
		err := errors.New("no --config.file to reload: the probe comes from --probe.* flags, which are read at start-up only")
		m.logger.Warn("not reloading", "err", err)
		return err
	}
	if m.ctx.Err() != nil {
		return errors.New("shutting down")
	}
	cfgs, err := config.LoadFile(m.file)
	if err != nil {
		m.config.LastReloadSuccessful.Set(0)
		m.logger.Error("reloading the configuration failed; the previous probes keep running", "file", m.file, "err", err)
		return err
	}
	if err := m.apply(cfgs); err != nil {
		m.config.LastReloadSuccessful.Set(0)
		m.logger.Error("reloading the configuration failed: the probes named could not start; those that had run before run with their previous settings", "file", m.file, "err", err)
		return err
	}
	m.config.LastReloadSuccessful.Set(1)
	m.config.LastReloadSuccessTimestamp.SetToCurrentTime()
	return nil
}

// apply makes cfgs the running probes. Unchanged probes keep running; the
// others are stopped first (their markers deleted and their series
// removed, so that a removed probe leaves nothing behind), then the new and
// changed ones are started. LoadFile has read every file the settings
// name, so a probe that still cannot be built is rare; it goes back to its
// previous settings if it had any.
func (m *manager) apply(cfgs []config.Config) error {
	m.mu.Lock()
	old := map[string]*runningProbe{}
	for _, r := range m.running {
		old[r.cfg.Name] = r
	}
	m.mu.Unlock()

	var stop []*runningProbe
	var kept, changed, added, removed []string
	next := make([]*runningProbe, len(cfgs))
	for i, cfg := range cfgs {
		r, ok := old[cfg.Name]
		switch {
		case ok && reflect.DeepEqual(r.cfg, cfg):
			next[i] = r
			kept = append(kept, cfg.Name)
		case ok:
			stop = append(stop, r)
			changed = append(changed, cfg.Name)
		default:
			added = append(added, cfg.Name)
		}
		delete(old, cfg.Name)
	}
	for _, r := range old {
		stop = append(stop, r)
		removed = append(removed, r.cfg.Name)
	}
	m.stop(stop)

	previous := map[string]config.Config{}
	for _, r := range stop {
		previous[r.cfg.Name] = r.cfg
	}
	var errs []error
	for i, cfg := range cfgs {
		if next[i] != nil {
			continue
		}
		r, err := m.start(cfg)
		if err != nil {
			errs = append(errs, err)
			prev, had := previous[cfg.Name]
			if !had {
				continue
			}
			if r, err = m.start(prev); err != nil {
				errs = append(errs, fmt.Errorf("restarting probe %q with its previous settings: %w", cfg.Name, err))
				continue
			}
		}
		next[i] = r
	}
	running := make([]*runningProbe, 0, len(next))
	for _, r := range next {
		if r != nil {
			running = append(running, r)
		}
	}
	m.mu.Lock()
	m.running = running
	m.mu.Unlock()
	m.logger.Info("probes configured", "unchanged", kept, "changed", changed, "added", added, "removed", removed)
	return errors.Join(errs...)
}

// start builds a probe and runs it until its context is cancelled.
func (m *manager) start(cfg config.Config) (*runningProbe, error) {
	opts := m.opts
	opts.Sinks = []judge.Sink{m.board.track(cfg.Name)}
	var relay freshness.Relay
	opts.Acknowledged = relay.Acknowledged
	p, err := probe.New(cfg, opts)
	if err != nil {
		m.board.forget(cfg.Name)
		// New created the probe's series before failing.
		m.metrics.DeleteProbe(cfg.Name)
		return nil, err
	}
	// The freshness and WatchList sync checks are probe kinds of their
	// own, beside the marker probe of the same settings: its markers, its
	// pinned apiservers, its series (DeleteProbe removes theirs too).
	fresh, err := freshness.Beside(cfg, p, m.opts.Config, m.metrics, m.logger, m.board.freshness(cfg.Name), m.opts.KeepRetiredSeries)
	if err != nil {
		m.board.forget(cfg.Name)
		m.metrics.DeleteProbe(cfg.Name)
		return nil, err
	}
	relay.Set(fresh)
	syncs, err := watchlist.Beside(cfg, p, m.opts.Config, m.metrics, m.logger, m.board.watchList(cfg.Name), m.opts.KeepRetiredSeries)
	if err != nil {
		m.board.forget(cfg.Name)
		m.metrics.DeleteProbe(cfg.Name)
		return nil, err
	}
	ctx, cancel := context.WithCancel(m.ctx)
	r := &runningProbe{cfg: cfg, p: p, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		var wg sync.WaitGroup
		if fresh != nil {
			wg.Go(func() { fresh.Run(ctx) })
		}
		if syncs != nil {
			wg.Go(func() { syncs.Run(ctx) })
		}
		p.Run(ctx)
		wg.Wait()
	}()
	return r, nil
}

// stop stops probes together and waits until each has deleted its markers,
// then removes their series: a probe started again under the same name
// starts from zero, which Prometheus reads as a counter reset.
func (m *manager) stop(rs []*runningProbe) {
	for _, r := range rs {
		r.cancel()
	}
	for _, r := range rs {
		<-r.done
		m.metrics.DeleteProbe(r.cfg.Name)
		m.board.forget(r.cfg.Name)
	}
}

// wait waits until every probe has stopped, after the manager's context
// ended.
func (m *manager) wait() {
	m.reloadMu.Lock() // a reload under way finishes first
	defer m.reloadMu.Unlock()
	m.mu.Lock()
	rs := append([]*runningProbe(nil), m.running...)
	m.mu.Unlock()
	for _, r := range rs {
		<-r.done
	}
}

func (m *manager) probes() []*probe.Probe {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps := make([]*probe.Probe, len(m.running))
	for i, r := range m.running {
		ps[i] = r.p
	}
	return ps
}

func (m *manager) configs() []config.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	cs := make([]config.Config, len(m.running))
	for i, r := range m.running {
		cs[i] = r.cfg
	}
	return cs
}

// reloadHandler serves /-/reload as Prometheus does: POST or PUT reloads
// when the lifecycle API is enabled, 403 when it is not, 405 for any other
// method; a failed reload answers 500 with the reason.
func reloadHandler(enabled bool, reload func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			w.Header().Set("Allow", "POST, PUT")
			http.Error(w, "Only POST or PUT requests allowed", http.StatusMethodNotAllowed)
			return
		}
		if !enabled {
			http.Error(w, "Lifecycle API is not enabled: start watchprobe with --web.enable-lifecycle, or send it SIGHUP", http.StatusForbidden)
			return
		}
		if err := reload(); err != nil {
			http.Error(w, "failed to reload config: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "configuration reloaded")
	})
}
