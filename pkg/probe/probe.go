// Package probe writes marker objects through the apiserver and times their
// arrival on each watch path, with one monotonic clock in one process.
package probe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
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
	Sinks []Sink

	// Acknowledged, if set, hears every marker write the apiserver
	// acknowledged (name, resourceVersion, 0 for a delete), at the probe's
	// clock: the freshness checks (pkg/probe/freshness) judge the
	// apiservers' lists of the markers against them.
	Acknowledged func(name string, rv uint64, deleted bool, at time.Time)

	// Sweeper, if set, sweeps the probe's tracker with those of the other
	// probes sharing it, rather than with one of the probe's own.
	Sweeper *Sweeper

	// KeepRetiredSeries keeps the series of a path pinned to an apiserver
	// that left for the rest of the run, rather than deleting them after
	// RetiredSeriesGrace: a one-shot report must keep every miss it
	// counted, and an apiserver that comes back must go on from its counts,
	// not from zero.
	KeepRetiredSeries bool
	// RetiredSeriesGrace is how long those series stay otherwise; 0 is 2
	// minutes, a few scrapes to see what was counted just before it went.
	RetiredSeriesGrace time.Duration
}

// WriteTimeout bounds one marker write. It is not the deadline: a write whose
// response is slow may still be observed on time, and is judged by that.
// After StopWriting, a write that hangs holds Drained false for up to this
// long.
const WriteTimeout = 30 * time.Second

// syncTimeout bounds how long writing waits for the paths' initial sync. A
// path that cannot sync must show up as missed events, not as silence.
const syncTimeout = 30 * time.Second

// Probe is one configured probe, run by Run.
type Probe struct {
	cfg     config.Config
	opts    Options
	api     markerAPI
	run     string // distinguishes this process's markers from an earlier run's
	labels  map[string]string
	tracker *tracker
	metrics *metricsSink
	// traces is nil unless Options had a Tracer. Without one a write
	// builds no span and none of its attributes: at many probes they would
	// be a share of the allocations for nothing.
	traces *traceSink
	logger *slog.Logger
	seq    atomic.Uint64
	paths  []path

	cleaner *cleaner
	// controllers are the controller probes (controller.go), nil without
	// any.
	controllers []*controllerProbe
	// pinned holds the paths pinned to apiservers, nil without any. They
	// are results, not readiness: a sick apiserver is what they report.
	pinned *pinnedPaths
	// resume runs the resume checks (resume.go), nil when they are off.
	// Set before the first write, read by the writes.
	resume *resumeChecker

	mu          sync.Mutex
	pathCancels []context.CancelFunc

	// stopWriting is closed by StopWriting; writingDone when the cycles
	// have ended.
	stopWriting     chan struct{}
	stopWritingOnce sync.Once
	writingDone     chan struct{}
}

// retiredSeriesGrace is RetiredSeriesGrace's default.
const retiredSeriesGrace = 2 * time.Minute

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

// lastRun is the latest run ID handed out, in nanoseconds.
var lastRun atomic.Int64

// newRunID tells this run's markers from an earlier run's, of this process
// or of another with the same replica name (a restarted container keeps
// its pod's name): the start's instant in nanoseconds, made unique within
// the process, so that a probe a reload restarts within the same second
// never takes an earlier run's markers for its own.
func newRunID() string {
	now := time.Now().UnixNano()
	for {
		last := lastRun.Load()
		next := max(now, last+1)
		if lastRun.CompareAndSwap(last, next) {
			return strconv.FormatInt(next, 36)
		}
	}
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
	api, err := instrumentedAPI(opts.Config, cfg.Kind, cfg.Namespace)
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
	p.metrics = newMetricsSink(opts.Metrics, cfg.Name, cfg.Paths, resumedPaths(cfg), cfg.Controllers, resumeAges(cfg),
		retiredSeries{keep: opts.KeepRetiredSeries, grace: cmp.Or(opts.RetiredSeriesGrace, retiredSeriesGrace)})
	sinks := []Sink{p.metrics, &logSink{logger: logger}}
	if opts.Tracer != nil {
		p.traces = newTraceSink(opts.Tracer)
		sinks = append(sinks, p.traces)
	}
	p.tracker = newTracker(trackerSettings{
		paths: cfg.Paths, deadline: time.Duration(cfg.Deadline), stallAfter: time.Duration(cfg.StallAfter),
		retain: cfg.RetentionOrDefault(), lostAfter: cfg.LostAfterOrDefault(), base: time.Now(),
	}, append(sinks, opts.Sinks...)...)
	p.tracker.addControllers(cfg.Controllers)
	// Writes and cleanup are tagged so that their 429s are counted.
	p.api = taggedAPI{api, &requestTag{throttled: func(request string) { p.tracker.throttled(-1, request) }}}
	p.cleaner = newCleaner(p.api, p.tracker.markersPending, logger, cleanerConfig{
		probe: cfg.Name, replica: opts.Replica, orphanAge: opts.OrphanAge,
		runPrefix: markerNamePrefix(cfg.Name, opts.Replica, p.run),
	})
	if cfg.APIServers.Enabled() {
		p.pinned = newPinnedPaths(p)
	}
	if p.controllers, err = p.newControllerProbes(); err != nil {
		return nil, fmt.Errorf("probe %q: %w", cfg.Name, err)
	}
	for i, name := range cfg.Paths {
		path, err := p.buildPath(name, i, api, "")
		if err != nil {
			for _, path := range p.paths {
				path.close() // built, but it will never run
			}
			return nil, fmt.Errorf("probe %q: %w", cfg.Name, err)
		}
		p.paths = append(p.paths, path)
	}
	return p, nil
}

// buildPath makes a path of kind name in the tracker's slot, receiving the
// probe's markers through api; apiserver names the apiserver it is pinned
// to, if any.
func (p *Probe) buildPath(name string, slot int, api markerAPI, apiserver string) (path, error) {
	logger := p.logger.With("path", name)
	if apiserver != "" {
		logger = logger.With("apiserver", apiserver)
	}
	return newPath(name, pathEnv{
		handle: p.tracker.handle(slot), api: api, selector: markerSelector(p.cfg.Name, p.opts.Replica),
		watchTimeout: time.Duration(p.cfg.WatchTimeout), cfg: p.cfg, replica: p.opts.Replica, run: p.run,
		logger: logger,
	})
}

// instrumentedAPI is the marker API over a client whose transport counts
// throttling and observes watch bodies (see instrument).
func instrumentedAPI(config *rest.Config, kind, namespace string) (markerAPI, error) {
	if config == nil {
		return nil, errors.New("no apiserver configuration")
	}
	client, err := instrumentedClient(config)
	if err != nil {
		return nil, err
	}
	return newMarkerAPI(client, kind, namespace)
}

// clients holds one instrumented client per configuration. client-go does
// not share transports between configs that wrap theirs, so a client per
// probe would be a connection per probe; probes built from one
// configuration share one client and its connection.
var clients sync.Map // *rest.Config -> *Client

func instrumentedClient(config *rest.Config) (*Client, error) {
	if c, ok := clients.Load(config); ok {
		return c.(*Client), nil
	}
	wrapped := rest.CopyConfig(config)
	wrapped.Wrap(instrument)
	client, err := NewClient(wrapped)
	if err != nil {
		return nil, err
	}
	c, _ := clients.LoadOrStore(config, client)
	return c.(*Client), nil
}

// MarkerSelector selects this probe's markers (those of its replica).
func (p *Probe) MarkerSelector() string { return markerSelector(p.cfg.Name, p.opts.Replica) }

// PinnedAPIServers lists the apiservers the probe has a pinned path to now.
func (p *Probe) PinnedAPIServers() []string {
	if p.pinned == nil {
		return nil
	}
	return p.pinned.addrs()
}

// Name is the probe's configured name.
func (p *Probe) Name() string { return p.cfg.Name }

// Synced returns nil when every path has synced and can list and watch,
// else an error naming the probe, the path and what is wrong. It is the
// cluster's state, not the exporter's readiness: a path that cannot list
// is a result to report.
func (p *Probe) Synced() error {
	for i, path := range p.paths {
		err := p.tracker.pathErr(i)
		if err == nil && !path.synced() {
			err = errNotSynced
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
func (p *Probe) PathsDown() []string { return p.tracker.downPaths() }

// Run probes until ctx ends, then deletes this replica's markers. Errors
// talking to the apiserver are reported through metrics and logs, never by
// returning: a failing probe is a result, not a crash.
func (p *Probe) Run(ctx context.Context) {
	var wg sync.WaitGroup
	// Cleanup runs beside the paths and the cycles, never in their way,
	// from the start-up sweep of an earlier run's markers on.
	wg.Go(func() { p.cleaner.run(ctx) })
	wg.Go(func() { p.cleanControllerMarkers(ctx, false) })
	for _, path := range p.paths {
		pathCtx, cancel := context.WithCancel(ctx)
		p.mu.Lock()
		p.pathCancels = append(p.pathCancels, cancel)
		p.mu.Unlock()
		wg.Go(func() {
			defer path.close()
			path.run(pathCtx)
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
		p.metrics.stop()
		p.cleanControllerMarkers(cleanupCtx, true)
	}()

	if p.pinned != nil {
		wg.Go(func() { p.pinned.run(ctx) })
	}
	p.waitSynced(ctx)
	s := p.opts.Sweeper
	if s == nil {
		s = NewSweeper() // the probe's own
		wg.Go(func() { s.Run(ctx) })
	}
	defer s.add(p.tracker, p.sweepEvery())()
	if p.resume = newResumeChecker(p); p.resume != nil {
		wg.Go(func() { p.resume.run(ctx) })
	}
	wg.Go(func() { p.runControllers(ctx) })

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
		return p.tracker.pending() == 0
	default:
		return false
	}
}

// waitSynced waits, within syncTimeout, for every path to sync, those
// pinned to apiservers too, so that no first write is missed merely because
// a path was still starting.
func (p *Probe) waitSynced(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	for p.Synced() != nil || (p.pinned != nil && !p.pinned.synced()) {
		select {
		case <-ctx.Done():
			if err := p.Synced(); err != nil {
				p.logger.Warn("paths not synced; probing anyway so that the failure is measured", "after", syncTimeout, "err", err)
			} else if p.pinned != nil && !p.pinned.synced() {
				p.logger.Warn("paths pinned to apiservers not synced; probing anyway so that the failure is measured", "after", syncTimeout, "apiservers", p.pinned.addrs())
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
// the cleaner.
func (p *Probe) cycle(ctx context.Context, n uint64) {
	c := p.tracker.newCycle()
	defer p.tracker.closeCycle(c)
	name := fmt.Sprintf(markerNamePattern, p.cfg.Name, p.opts.Replica, p.run, n)
	obj := p.api.newObject(metav1.ObjectMeta{Name: name, Namespace: p.cfg.Namespace, Labels: p.labels})
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
	_, err = p.write(ctx, c, metrics.VerbDelete, obj)
	deleted = err == nil || apierrors.IsNotFound(err)
}

// refused reports a write the apiserver answered with a client error, so
// never committed: not a conflict, whose object exists.
func refused(err error) bool {
	code := statusCode(err)
	return code >= 400 && code < 500 && code != http.StatusConflict
}

var verbEvent = map[string]string{
	metrics.VerbCreate: metrics.EventAdded,
	metrics.VerbUpdate: metrics.EventModified,
	metrics.VerbDelete: metrics.EventDeleted,
}

// write sends one marker write and tells the tracker what to expect.
func (p *Probe) write(ctx context.Context, c *cycle, verb string, obj metav1.Object) (metav1.Object, error) {
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
			p.traces.begin(seq, span)
		}
	}
	w := p.tracker.expect(c, writeKey{obj.GetName(), seq}, verbEvent[verb], sc, time.Now)
	// Events are timed from the attempt the apiserver took: after a 429,
	// client-go waits Retry-After and sends again, and that wait is the
	// apiserver's flow control, not watch delivery. The round trip counts
	// it: the write did take that long.
	ctx = withTag(ctx, &requestTag{
		throttled: func(request string) { p.tracker.throttled(-1, request) },
		attempt:   func(at time.Time) { p.tracker.attempted(w, at) },
	})
	var out metav1.Object
	var err error
	switch verb {
	case metrics.VerbCreate:
		out, err = p.api.create(ctx, obj)
	case metrics.VerbUpdate:
		// The probe's own fields only: another client's annotation or
		// label on the marker (a policy, backup or labelling controller)
		// must not make the probe's update conflict, nor be undone by it.
		// Its labels go with it: the paths select the markers by them.
		out, err = p.api.patchMeta(ctx, obj.GetName(), p.labels, map[string]string{AnnotationSeq: strconv.FormatUint(seq, 10)})
	case metrics.VerbDelete:
		err = p.api.delete(ctx, obj.GetName())
	}
	now := time.Now()
	if err != nil && runCtx.Err() != nil {
		p.tracker.abandon(w) // our own shutdown, not the apiserver's failure
		return nil, err
	}
	var rv uint64
	if out != nil {
		rv = rvOf(out)
	}
	p.tracker.ack(w, rv, err, now)
	p.resume.wrote(obj.GetName(), seq, verb, out, err, now)
	if err == nil && p.opts.Acknowledged != nil {
		p.opts.Acknowledged(obj.GetName(), rv, verb == metrics.VerbDelete, now)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
