package probe

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// Resume checks answer the question a controller asks after its watch
// broke: can it resume from the last resourceVersion it saw, or must it
// relist? Every round, on each path that reaches an apiserver (the load
// balanced one and each pinned apiserver) or etcd, the checker opens a
// fresh watch on the probe's markers from the resourceVersion of one of the
// probe's own writes at least `age` old, reads until it has either the 410
// or every event the probe wrote since, and closes it. The probe knows
// those events exactly, so the replay is judged, not only its start.
//
// The checks stay off the ordinary paths' way: their events never reach
// the tracker, and all they add to a write is one append to the ledger.

// resumeSource opens resume watches on one path.
type resumeSource struct {
	path, apiserver string
	// replay watches from rv until take says every owed event arrived,
	// the bound passes, or the stream ends.
	replay func(ctx context.Context, rv uint64, bound time.Duration, take func(replayEvent) bool) (replayEnd, error)
	close  func()
}

// resumeTracker is the tracker's entry points for resume checks.
type resumeTracker interface {
	Resumed(judge.ResumeVerdict)
	ResumeWindow(path, apiserver string, window time.Duration)
}

// resumeEnv is what resume checks are built from.
type resumeEnv struct {
	// probe is the probe's settings; replica and run name its markers.
	probe          config.Config
	replica, runID string
	// config reaches the apiservers through the load balancer.
	config *rest.Config
	// apiservers lists the apiservers the probe has a path pinned to now;
	// nil without any.
	apiservers func() []string
	verdicts   resumeTracker
	logger     *slog.Logger
	now        func() time.Time
}

// resumeChecker runs a probe's resume checks.
type resumeChecker struct {
	resumeEnv
	cfg    config.ResumeConfig
	ages   []time.Duration // ascending
	labels map[time.Duration]string
	bound  time.Duration
	ledger resumeLedger

	fixed  []*resumeSource          // the load-balanced apiserver and etcd
	pinned map[string]*resumeSource // by apiserver address
}

// newResumeChecker prepares the probe's resume checks, nil when they are
// off.
func newResumeChecker(env resumeEnv) *resumeChecker {
	if !env.probe.Resume.Enabled() {
		return nil
	}
	env.logger = env.logger.With("check", "resume")
	c := &resumeChecker{
		resumeEnv: env,
		cfg:       env.probe.Resume,
		labels:    map[time.Duration]string{},
		bound:     env.probe.LostAfterOrDefault(),
		pinned:    map[string]*resumeSource{},
	}
	for _, a := range c.cfg.Ages {
		c.ages = append(c.ages, time.Duration(a))
		c.labels[time.Duration(a)] = a.String()
	}
	slices.Sort(c.ages)
	// The oldest write kept must be old enough for the largest age at
	// the next round.
	c.ledger.keep = c.ages[len(c.ages)-1] + time.Duration(c.cfg.Every) + time.Minute

	if label := resumeLabel(env.probe.Paths); label != "" {
		if src, err := c.apiSource(label, "", env.config); err != nil {
			c.logger.Error("resume checks cannot reach the apiserver", "path", label, "err", err)
		} else {
			c.fixed = append(c.fixed, src)
		}
	}
	if slices.Contains(env.probe.Paths, metrics.PathEtcd) {
		if src, err := c.etcdSource(); err != nil {
			c.logger.Error("resume checks cannot reach etcd", "err", err)
		} else {
			c.fixed = append(c.fixed, src)
		}
	}
	return c
}

// wrote records one of the probe's writes: its response's resourceVersion
// is what a later check resumes from.
func (c *resumeChecker) wrote(marker string, seq uint64, verb string, out metav1.Object, err error, at time.Time) {
	if refused(err) {
		return
	}
	w := ledgerWrite{key: replayKey{marker, verbEvent[verb], seq}, at: at, sure: err == nil}
	if verb == metrics.VerbDelete {
		w.key.seq = 0
	}
	if err == nil && out != nil {
		w.rv, _ = strconv.ParseUint(out.GetResourceVersion(), 10, 64)
	}
	c.ledger.add(w)
}

// run holds a round every cfg.Every until ctx ends.
func (c *resumeChecker) run(ctx context.Context) {
	defer func() {
		for _, s := range c.fixed {
			s.close()
		}
		for _, s := range c.pinned {
			s.close()
		}
	}()
	ticker := time.NewTicker(time.Duration(c.cfg.Every))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		var wg sync.WaitGroup
		for _, src := range c.sources() {
			wg.Go(func() { c.round(ctx, src) })
		}
		wg.Wait()
	}
}

// sources are the paths to check this round: the fixed ones and one per
// apiserver the probe has a path pinned to now.
func (c *resumeChecker) sources() []*resumeSource {
	srcs := slices.Clone(c.fixed)
	if c.apiservers == nil {
		return srcs
	}
	addrs := c.apiservers()
	for addr, s := range c.pinned {
		if !slices.Contains(addrs, addr) {
			s.close()
			delete(c.pinned, addr)
		}
	}
	for _, addr := range addrs {
		s, ok := c.pinned[addr]
		if !ok {
			var err error
			config := pinnedConfig(c.config, addr, c.probe.APIServers.ServerName)
			if s, err = c.apiSource(metrics.PathAPIServer, addr, config); err != nil {
				c.logger.Error("resume checks cannot reach the apiserver", "apiserver", addr, "err", err)
				continue
			}
			c.pinned[addr] = s
		}
		srcs = append(srcs, s)
	}
	return srcs
}

// round checks every age on one path, youngest first, and sets the path's
// window when every age was judged.
func (c *resumeChecker) round(ctx context.Context, src *resumeSource) {
	judged, window := 0, time.Duration(0)
	for _, age := range c.ages {
		v, ok := c.check(ctx, src, age)
		if ctx.Err() != nil {
			return // the probe is stopping: not a result
		}
		if !ok {
			continue
		}
		c.verdicts.Resumed(v)
		switch v.Outcome {
		case metrics.ResumeReplayed:
			window = age
			judged++
		case metrics.ResumeExpired, metrics.ResumeIncomplete:
			judged++
		}
		c.log(v)
	}
	if judged == len(c.ages) {
		c.verdicts.ResumeWindow(src.path, src.apiserver, window)
	}
}

// check runs one resume check at age on src; ok is false when the probe
// has no write old enough yet.
func (c *resumeChecker) check(ctx context.Context, src *resumeSource, age time.Duration) (judge.ResumeVerdict, bool) {
	now := c.now()
	from, want, ok := c.ledger.since(age, now)
	if !ok {
		return judge.ResumeVerdict{}, false
	}
	owed := map[replayKey]bool{}
	var last replayKey // the newest write owed
	for _, w := range want {
		if w.sure {
			owed[w.key], last = true, w.key
		}
	}
	var got []replayEvent
	var done time.Time
	// Reading stops once everything owed arrived, or the newest write
	// owed did: the stream is in order, so anything still missing then is
	// a gap, not late.
	take := func(ev replayEvent) bool {
		got = append(got, ev)
		if owed[ev.key] {
			delete(owed, ev.key)
			if len(owed) == 0 {
				done = c.now()
			}
		}
		return len(owed) == 0 || ev.key == last
	}
	if len(owed) == 0 {
		// Only failed writes since: nothing is owed, so nothing can be
		// judged but the 410.
		return judge.ResumeVerdict{}, false
	}
	start := c.now()
	end, err := src.replay(ctx, from.rv, c.bound, take)
	v := judgeReplay(want, got, end, err)
	v.Path, v.APIServer, v.Age, v.At, v.ResumedAfter = src.path, src.apiserver, age, now, now.Sub(from.at)
	v.From = strconv.FormatUint(from.rv, 10)
	if v.Outcome == metrics.ResumeReplayed {
		v.Replay = done.Sub(start)
	}
	return v, true
}

func (c *resumeChecker) log(v judge.ResumeVerdict) {
	args := []any{"path", v.Path, "age", model.Duration(v.Age).String(), "from", v.From, "written", v.ResumedAfter.Round(time.Millisecond)}
	if v.APIServer != "" {
		args = append(args, "apiserver", v.APIServer)
	}
	switch v.Outcome {
	case metrics.ResumeIncomplete:
		args = append(args, "missing", v.Missing, "duplicated", v.Duplicated, "out_of_order", v.OutOfOrder)
		if v.Err != nil {
			args = append(args, "err", v.Err)
		}
		c.logger.Warn("a resumed watch did not replay exactly what was written", args...)
	case metrics.ResumeError:
		c.logger.Warn("a resume check failed", append(args, "err", v.Err)...)
	case metrics.ResumeExpired:
		c.logger.Debug("a resume check expired", append(args, "err", v.Err)...)
	default:
		c.logger.Debug("a resume check replayed", args...)
	}
}

// resumedPaths are the configured paths a probe's resume checks report on:
// one check through the load balancer serves both API paths (the
// informer's reflector resumes with the same request as the watch path),
// and etcd.
func resumedPaths(cfg config.Config) []string {
	if !cfg.Resume.Enabled() {
		return nil
	}
	var out []string
	if label := resumeLabel(cfg.Paths); label != "" {
		out = append(out, label)
	}
	if slices.Contains(cfg.Paths, metrics.PathEtcd) {
		out = append(out, metrics.PathEtcd)
	}
	return out
}

// resumeLabel is the API path resume checks through the load balancer are
// reported under: watch, else informer, "" with neither.
func resumeLabel(paths []string) string {
	for _, p := range []string{metrics.PathWatch, metrics.PathInformer} {
		if slices.Contains(paths, p) {
			return p
		}
	}
	return ""
}

// resumeAges are a probe's resume ages by label; nil when they are off.
func resumeAges(cfg config.Config) map[string]time.Duration {
	if !cfg.Resume.Enabled() {
		return nil
	}
	ages := map[string]time.Duration{}
	for _, a := range cfg.Resume.Ages {
		ages[a.String()] = time.Duration(a)
	}
	return ages
}
