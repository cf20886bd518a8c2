// Package probe writes marker objects through the apiserver and times their
// arrival on each watch path, with one monotonic clock in one process.
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/paths"
	"github.com/watchprobe/watchprobe/pkg/probe/paths/etcdpath"
)

// Options are what a probe needs from the exporter around it.
type Options struct {
	// Config reaches the apiserver. The probe copies it and wraps its
	// transport to see what client-go hides: retried 429s and how watch
	// response bodies end.
	Config  *rest.Config
	Metrics *metrics.Probe
	Logger  *slog.Logger
	// Tracer records a span per marker write; nil means no tracing. The
	// client's transport should carry the trace context to the apiserver
	// (see tracing.Transport).
	Tracer trace.Tracer
	// Replica identifies this exporter instance among replicas (the pod
	// name in a cluster). Markers of other replicas are never matched.
	Replica string
	// OrphanAge is how old another replica's marker must be before this
	// replica deletes it as left behind by a crash. A live marker exists for
	// one cycle, so any bound well above the longest interval is safe.
	OrphanAge time.Duration

	// Sinks hear the probe's outcomes besides its metrics, its log and its
	// traces: the exporter's status page, `check`'s report.
	Sinks []judge.Sink

	// Acknowledged, if set, hears every marker write the apiserver
	// acknowledged (name, resourceVersion, 0 for a delete), and every
	// delete that found its marker gone (404) or that the cleaner
	// completed, at the probe's clock: the freshness checks
	// (pkg/probe/freshness) judge the apiservers' lists of the markers
	// against them, and a marker deleted without their hearing of it
	// would be judged missing from every list.
	Acknowledged func(name string, rv uint64, deleted bool, at time.Time)

	// Monitor, if set, is the exporter's self-monitor: the probe's verdicts
	// wait for it, and a write whose verdict the exporter's own starvation
	// could have moved is unmeasurable rather than timed, missed or lost.
	Monitor judge.Monitor

	// Sweeper, if set, sweeps the probe's tracker with those of the other
	// probes sharing it, rather than with one of the probe's own.
	Sweeper *judge.Sweeper

	// KeepRetiredSeries keeps the series of a path pinned to an apiserver
	// that left for the rest of the run, rather than deleting them after
	// the probe's apiservers.series_grace: a one-shot report must keep
	// every miss it counted, and an apiserver that comes back must go on
	// from its counts, not from zero.
	KeepRetiredSeries bool
}

// WriteTimeout bounds one marker write. It is not the deadline: a write whose
// response is slow may still be observed on time, and is judged by that.
// After StopWriting, a write that hangs holds Drained false for up to this
// long.
const WriteTimeout = 30 * time.Second

// Probe is one configured probe, run by Run.
type Probe struct {
	cfg     config.Config
	opts    Options
	api     kube.MarkerAPI
	run     string // distinguishes this process's markers from an earlier run's
	labels  map[string]string
	tracker *judge.Tracker
	metrics *judge.MetricsSink
	// traces is nil unless Options had a Tracer. Without one a write
	// builds no span and none of its attributes: at many probes they would
	// be a share of the allocations for nothing.
	traces *judge.TraceSink
	logger *slog.Logger
	seq    atomic.Uint64
	paths  []paths.Path

	cleaner *cleaner
	// controllers are the controller probes (controller.go).
	controllers *controllerProbes
	// refusals checks the paths' refusals over fresh connections.
	refusals *refusalChecker
	// pinned holds the paths pinned to apiservers, nil without any. They
	// are results, not readiness: a sick apiserver is what they report.
	pinned *pinnedPaths
	// observers hear every marker write as answered: the resume checks
	// (resume.go), when on. Set before the first write, read by the
	// writes.
	observers []writeObserver

	mu          sync.Mutex
	pathCancels []context.CancelFunc

	// stopWriting is closed by StopWriting; writingDone when the cycles
	// have ended.
	stopWriting     chan struct{}
	stopWritingOnce sync.Once
	writingDone     chan struct{}
}

// writeObserver hears each of a probe's marker writes once answered, at
// at: the write's verb, the object the apiserver returned (nil for a
// delete or an error) and its error.
type writeObserver interface {
	wrote(marker string, seq uint64, verb string, out metav1.Object, err error, at time.Time)
}

// New validates cfg and prepares a probe; nothing is sent until Run.
func New(cfg config.Config, opts Options) (*Probe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("probe %q: %w", cfg.Name, err)
	}
	for _, msg := range validation.IsDNS1123Label(opts.Replica) {
		return nil, fmt.Errorf("replica %q is invalid (%s): set --probe.replica or POD_NAME to a lowercase DNS label", opts.Replica, msg)
	}
	if opts.OrphanAge <= 0 {
		return nil, errors.New("orphan age must be positive")
	}
	api, err := kube.InstrumentedAPI(opts.Config, cfg.Kind, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	logger := opts.Logger.With("probe", cfg.Name)
	p := &Probe{
		cfg:    cfg,
		opts:   opts,
		api:    api,
		run:    newRunID(),
		labels: map[string]string{LabelManagedBy: ManagedByValue, LabelProbe: cfg.Name, LabelReplica: opts.Replica},
		logger: logger,

		stopWriting: make(chan struct{}),
		writingDone: make(chan struct{}),
	}
	p.metrics = judge.NewMetricsSink(opts.Metrics, cfg.Name, cfg.Paths, resumedPaths(cfg), cfg.Controllers, resumeAges(cfg),
		judge.RetiredSeries{Keep: opts.KeepRetiredSeries, Grace: time.Duration(cfg.APIServers.SeriesGrace)})
	p.refusals = newRefusalChecker(opts.Config, cfg.Kind, cfg.Namespace, markerSelector(cfg.Name, opts.Replica), nil, logger)
	sinks := []judge.Sink{p.metrics, &judge.LogSink{Logger: logger}, releases{p}, p.refusals}
	if opts.Tracer != nil {
		p.traces = judge.NewTraceSink(opts.Tracer)
		sinks = append(sinks, p.traces)
	}
	p.tracker = judge.New(judge.Settings{
		Paths: cfg.Paths, Deadline: time.Duration(cfg.Deadline), StallAfter: time.Duration(cfg.StallAfter),
		Retain: cfg.RetentionOrDefault(), LostAfter: cfg.LostAfterOrDefault(), Base: time.Now(), Monitor: opts.Monitor,
	}, append(sinks, opts.Sinks...)...)
	p.refusals.tracker = p.tracker
	p.tracker.AddControllers(cfg.Controllers)
	// Writes and cleanup are tagged so that their 429s are counted.
	p.api = kube.Tagged(api, &kube.RequestTag{Throttled: func(request string) { p.tracker.Throttled(-1, request) }})
	p.cleaner = newCleaner(p.api, p.tracker.MarkersPending, logger, cleanerConfig{
		probe: cfg.Name, replica: opts.Replica, orphanAge: opts.OrphanAge,
		runPrefix: markerNamePrefix(cfg.Name, opts.Replica, p.run), now: time.Now,
		deleted: func(name string, at time.Time) {
			if opts.Acknowledged != nil {
				opts.Acknowledged(name, 0, true, at)
			}
		},
		heldGone: p.tracker.MarkerGone,
	})
	build := pathsOf(cfg, opts.Replica, p.run, p.tracker, logger)
	if cfg.APIServers.Enabled() {
		p.pinned = newPinnedPaths(pinnedEnv{
			cfg: cfg.APIServers, config: opts.Config, kind: cfg.Kind, namespace: cfg.Namespace,
			slots: p.tracker, build: build, logger: logger, now: time.Now,
		})
	}
	if p.controllers, err = newControllerProbes(controllerEnv{
		probe: cfg, replica: opts.Replica, runID: p.run, labels: p.labels, config: opts.Config,
		orphanAge: opts.OrphanAge, tracker: p.tracker, stopWriting: p.stopWriting, logger: logger,
	}); err != nil {
		return nil, fmt.Errorf("probe %q: %w", cfg.Name, err)
	}
	for i, name := range cfg.Paths {
		path, err := build(name, i, api, "", nil)
		if err != nil {
			for _, path := range p.paths {
				path.Close() // built, but it will never run
			}
			return nil, fmt.Errorf("probe %q: %w", cfg.Name, err)
		}
		p.paths = append(p.paths, path)
	}
	return p, nil
}

// pathsOf builds the paths of a probe with cfg, replica and run, reporting
// to tracker.
func pathsOf(cfg config.Config, replica, run string, tracker *judge.Tracker, logger *slog.Logger) pathBuilder {
	return func(kind string, slot int, api kube.MarkerAPI, apiserver string, failed func(error)) (paths.Path, error) {
		logger := logger.With("path", kind)
		if apiserver != "" {
			logger = logger.With("apiserver", apiserver)
		}
		env := paths.Env{
			Handle: tracker.Handle(slot), API: api, Selector: markerSelector(cfg.Name, replica),
			WatchTimeout: time.Duration(cfg.WatchTimeout), Etcd: cfg.Etcd, EtcdPrefix: markerKeyPrefix(cfg, replica, run),
			Logger: logger, Failed: failed,
		}
		if kind == metrics.PathEtcd {
			return etcdpath.New(env)
		}
		return paths.New(kind, env)
	}
}

// releases tells the cleaner of each held marker a path saw deleted. It
// tells it from a goroutine of its own: the sinks run on whichever
// goroutine delivers the tracker's outcomes, which may be the cleaner's
// own while it holds its lock and reports the markers pending (the
// tracker's MarkersPending delivers what other goroutines queued), and a
// release takes that lock.
type releases struct{ p *Probe }

func (r releases) Outcome(o judge.Outcome) {
	if o.Kind == judge.Released {
		go r.p.cleaner.released(o.Marker)
	}
}

// HeldMarkers lists the markers the probe deleted whose deletion other
// clients' finalizers hold, oldest first: those the cleaner tracks by
// name, at most a hundred.
func (p *Probe) HeldMarkers() []HeldMarker { return p.cleaner.held() }

// Name is the probe's configured name.
func (p *Probe) Name() string { return p.cfg.Name }

// Synced returns nil when every path has synced and can list and watch,
// else an error naming the probe, the path and what is wrong. It is the
// cluster's state, not the exporter's readiness: a path that cannot list
// is a result to report.
func (p *Probe) Synced() error {
	for i, path := range p.paths {
		err := p.tracker.PathErr(i)
		if err == nil && !path.Synced() {
			err = judge.ErrNotSynced
		}
		if err != nil {
			return fmt.Errorf("probe %q, path %q: %w", p.cfg.Name, p.cfg.Paths[i], err)
		}
	}
	return nil
}

// PathsDown describes each of the probe's paths, those pinned to apiservers
// too, that has no stream open and caught up, and why when a request
// failed: what an operator looks at when WatchprobePathDown fires.
func (p *Probe) PathsDown() []string { return p.tracker.DownPaths() }

// Run probes until ctx ends, then deletes this replica's markers. Errors
// talking to the apiserver are reported through metrics and logs, never by
// returning: a failing probe is a result, not a crash.
func (p *Probe) Run(ctx context.Context) {
	var wg sync.WaitGroup
	// Cleanup runs beside the paths and the cycles, never in their way,
	// from the start-up sweep of an earlier run's markers on.
	wg.Go(func() { p.cleaner.run(ctx) })
	wg.Go(func() { p.controllers.clean(ctx, false) })
	wg.Go(func() { p.refusals.run(ctx) })
	for _, path := range p.paths {
		pathCtx, cancel := context.WithCancel(ctx)
		p.mu.Lock()
		p.pathCancels = append(p.pathCancels, cancel)
		p.mu.Unlock()
		wg.Go(func() {
			defer path.Close()
			path.Run(pathCtx)
		})
	}
	defer func() {
		p.mu.Lock()
		for _, cancel := range p.pathCancels {
			cancel()
		}
		p.mu.Unlock()
		wg.Wait()
		// The run's context is gone; cleanup gets its own short one.
		cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		p.cleaner.sweep(cleanupCtx, sweepStop)
		p.metrics.Stop()
		p.tracker.Close()
		p.controllers.clean(cleanupCtx, true)
	}()

	if p.pinned != nil {
		wg.Go(func() { p.pinned.run(ctx) })
	}
	p.waitSynced(ctx)
	s := p.opts.Sweeper
	if s == nil {
		s = judge.NewSweeper() // the probe's own
		wg.Go(func() { s.Run(ctx) })
	}
	defer s.Add(p.tracker, p.sweepEvery())()
	resume := newResumeChecker(resumeEnv{
		probe: p.cfg, replica: p.opts.Replica, runID: p.run, config: p.opts.Config,
		apiservers: p.pinnedAddrs(), verdicts: p.tracker, logger: p.logger, now: time.Now,
	})
	if resume != nil {
		p.observers = append(p.observers, resume)
		wg.Go(func() { resume.run(ctx) })
	}
	wg.Go(func() { p.controllers.run(ctx) })

	interval := time.Duration(p.cfg.Interval)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for n := uint64(1); ctx.Err() == nil && !p.writingStopped(); n++ {
		p.cycle(ctx, n)
		select {
		case <-ctx.Done():
		case <-p.stopWriting:
		case <-ticker.C:
		}
	}
	close(p.writingDone)
	// The paths go on receiving until ctx ends, so that what was written
	// is judged.
	<-ctx.Done()
}

// StopWriting ends the probe's cycles without ending its run: the cycle
// under way finishes its writes, no other starts, and the paths go on
// receiving and the deadlines go on passing until Run's context ends, so
// that every write sent is seen or missed rather than cut short. Drained
// tells when that is done.
func (p *Probe) StopWriting() {
	p.stopWritingOnce.Do(func() { close(p.stopWriting) })
}

func (p *Probe) writingStopped() bool {
	select {
	case <-p.stopWriting:
		return true
	default:
		return false
	}
}

// Drained reports whether the probe has stopped writing (StopWriting) and
// every write it sent has been seen or missed on every path, or failed.
func (p *Probe) Drained() bool {
	select {
	case <-p.writingDone:
		return p.tracker.Pending() == 0
	default:
		return false
	}
}

// waitSynced waits, within syncTimeout, for every path to sync, those
// pinned to apiservers too, so that no first write is missed merely because
// a path was still starting.
func (p *Probe) waitSynced(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, judge.SyncTimeout)
	defer cancel()
	for p.Synced() != nil || (p.pinned != nil && !p.pinned.synced()) {
		select {
		case <-ctx.Done():
			if err := p.Synced(); err != nil {
				p.logger.Warn("paths not synced; probing anyway so that the failure is measured", "after", judge.SyncTimeout, "err", err)
			} else if p.pinned != nil && !p.pinned.synced() {
				p.logger.Warn("paths pinned to apiservers not synced; probing anyway so that the failure is measured", "after", judge.SyncTimeout, "apiservers", p.pinned.addrs())
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sweepEvery is how often the probe's tracker is swept, for misses to be
// judged soon after their deadline and stalls soon after they begin.
func (p *Probe) sweepEvery() time.Duration {
	return min(max(time.Duration(p.cfg.Deadline)/10, 10*time.Millisecond), time.Second)
}

// cycle writes one marker through its whole life: create, updates, delete.
// A marker whose delete did not succeed, including one whose create failed
// (a create can be committed although its response is lost), is left to
// the cleaner, and so is one whose delete other clients' finalizers hold.
func (p *Probe) cycle(ctx context.Context, n uint64) {
	c := p.tracker.NewCycle()
	defer p.tracker.CloseCycle(c)
	name := fmt.Sprintf(markerNamePattern, p.cfg.Name, p.opts.Replica, p.run, n)
	obj := p.api.NewObject(metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: p.labels})
	created, deleted := false, false
	p.cleaner.cycling(name)
	defer func() {
		if !deleted {
			p.cleaner.add(name, !created)
		}
		p.cleaner.cycling("")
	}()
	obj, err := p.write(ctx, c, metrics.VerbCreate, obj)
	if refused(err) {
		deleted = true // never committed: nothing to delete
		return
	}
	if err != nil {
		return
	}
	created = true
	for range p.cfg.Updates {
		updated, err := p.write(ctx, c, metrics.VerbUpdate, obj)
		if err != nil {
			break
		}
		obj = updated
	}
	held, err := p.write(ctx, c, metrics.VerbDelete, obj)
	deleted = err == nil || apierrors.IsNotFound(err)
	if held != nil {
		p.cleaner.hold(held)
	}
}

// refused reports a write the apiserver answered with a client error, so
// never committed: not a conflict, whose object exists.
func refused(err error) bool {
	code := judge.StatusCode(err)
	return code >= 400 && code < 500 && code != http.StatusConflict
}

var verbEvent = map[string]string{
	metrics.VerbCreate: metrics.EventAdded,
	metrics.VerbUpdate: metrics.EventModified,
	metrics.VerbDelete: metrics.EventDeleted,
}

// write sends one marker write and tells the tracker what to expect. It
// returns the object the apiserver answered with: for a delete, the
// marker when other clients' finalizers hold its deletion, else nil.
func (p *Probe) write(ctx context.Context, c *judge.Cycle, verb string, obj metav1.Object) (metav1.Object, error) {
	seq := p.seq.Add(1)
	if verb != metrics.VerbDelete {
		annotations := maps.Clone(obj.GetAnnotations())
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[AnnotationSeq] = strconv.FormatUint(seq, 10)
		obj.SetAnnotations(annotations)
	}
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, WriteTimeout)
	defer cancel()

	var sc trace.SpanContext
	if p.traces != nil {
		var span trace.Span
		ctx, span = p.opts.Tracer.Start(ctx, "watchprobe.marker."+verb, trace.WithAttributes(
			attribute.String("k8s.namespace.name", p.cfg.Namespace),
			attribute.String("watchprobe.probe", p.cfg.Name),
			attribute.String("watchprobe.replica", p.opts.Replica),
			attribute.String("watchprobe.kind", p.cfg.Kind),
			attribute.String("watchprobe.marker", obj.GetName()),
			attribute.Int64("watchprobe.seq", int64(seq)),
			attribute.String("watchprobe.event", verbEvent[verb]),
		))
		if span.IsRecording() || span.SpanContext().IsValid() {
			sc = span.SpanContext()
			p.traces.Begin(seq, span)
		}
	}
	w := p.tracker.Expect(c, judge.WriteKey{Name: obj.GetName(), Seq: seq}, verbEvent[verb], sc, time.Now)
	// Events are timed from the attempt the apiserver took: after a 429,
	// client-go waits Retry-After and sends again, and that wait is the
	// apiserver's flow control, not watch delivery. The round trip counts
	// it: the write did take that long.
	ctx = kube.WithTag(ctx, &kube.RequestTag{
		Throttled: func(request string) { p.tracker.Throttled(-1, request) },
		Attempt:   func(at time.Time) { p.tracker.Attempted(w, at) },
	})
	var out metav1.Object
	var removed uint64 // a delete's: see kube.MarkerAPI.Delete
	var err error
	switch verb {
	case metrics.VerbCreate:
		out, err = p.api.Create(ctx, obj)
	case metrics.VerbUpdate:
		// The probe's own fields only: another client's annotation or
		// label on the marker (a policy, backup or labelling controller)
		// must not make the probe's update conflict, nor be undone by it.
		// Its labels go with it: the paths select the markers by them.
		out, err = p.api.PatchMeta(ctx, obj.GetName(), p.labels, map[string]string{AnnotationSeq: strconv.FormatUint(seq, 10)})
	case metrics.VerbDelete:
		// Preconditioned on the marker's last state the probe wrote, so
		// that its answer says which state it removed: its DELETED is
		// the one past that, and a DELETED at or before it another
		// client's change (a label strip) that the selector paths
		// deliver in its place. A 404 after client-go sent it again
		// (after a 5xx with Retry-After, when etcd did not answer in
		// time) is an earlier attempt's success, and Delete says so.
		out, removed, err = p.api.Delete(ctx, obj.GetName(), obj.GetResourceVersion())
	}
	now := time.Now()
	if err != nil && runCtx.Err() != nil {
		p.tracker.Abandon(w) // our own shutdown, not the apiserver's failure
		return nil, err
	}
	var rv uint64
	if out != nil {
		rv = judge.RV(out)
	}
	if verb == metrics.VerbDelete && out != nil {
		// Other clients' finalizers hold the marker, marked deleting at
		// rv: no path owes its DELETED, and no replay of the probe's
		// writes either. The checks that list the markers see it there
		// until the cleaner finds it gone.
		p.tracker.AckHeld(w, out, now)
		if p.opts.Acknowledged != nil {
			p.opts.Acknowledged(obj.GetName(), rv, false, now)
		}
		return out, nil
	}
	if verb == metrics.VerbDelete {
		p.tracker.Ack(w, removed, err, now)
	} else {
		p.tracker.Ack(w, rv, err, now)
	}
	for _, o := range p.observers {
		o.wrote(obj.GetName(), seq, verb, out, err, now)
	}
	// A delete answered 404 found the marker gone, as the cycle takes it
	// (no cleanup follows): it is as deleted as one answered 200.
	gone := verb == metrics.VerbDelete && apierrors.IsNotFound(err)
	if (err == nil || gone) && p.opts.Acknowledged != nil {
		p.opts.Acknowledged(obj.GetName(), rv, verb == metrics.VerbDelete, now)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
