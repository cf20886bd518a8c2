package probe

import (
	"context"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// informerPath receives markers as a controller does: a client-go shared
// informer (LIST or WatchList, then WATCH, through the DeltaFIFO) with its
// handler called when the object reaches the controller's code. Its
// ListerWatcher is wrapped so that every relist and every stream's end is
// seen where the reflector makes it.
type informerPath struct {
	informer cache.SharedIndexInformer
	idx      int
	tracker  *tracker
	series   *metrics.PathSeries
	logger   *slog.Logger

	mu         sync.Mutex
	listed     bool   // the initial relist has happened
	nextReason string // why the next relist happens
}

func newInformerPath(api markerAPI, selector string, idx int, tr *tracker, watchTimeout time.Duration, observe observeFunc, logger *slog.Logger) (*informerPath, error) {
	p := &informerPath{idx: idx, tracker: tr, series: tr.state[idx].series, logger: logger, nextReason: metrics.RelistError}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			start := p.relist(metrics.ModeList)
			list, err := api.list(ctx, opts)
			if err == nil {
				p.series.RelistDone(metrics.ModeList, time.Since(start))
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			requested := requestTimeout(watchTimeout)
			secs := int64(requested.Seconds())
			opts.TimeoutSeconds = &secs
			start := time.Now()
			watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
			if watchList {
				start = p.relist(metrics.ModeWatchList)
			}
			w, err := api.watch(ctx, opts)
			if err != nil {
				p.ended(endReason(err, time.Since(start), requested, ctx.Err() != nil), time.Since(start), err)
				return nil, err
			}
			tr.streamStarted(idx, time.Now())
			return newObservedWatch(w, p, start, requested, watchList), nil
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, api.example(), cache.SharedIndexInformerOptions{})
	// The reflector reports here why a list or watch failed; an expired
	// resourceVersion makes the next relist's reason "expired".
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if isExpired(err) {
			p.setNextReason(metrics.RelistExpired)
		}
		logger.Debug("informer list or watch ended", "err", err)
	}); err != nil {
		return nil, err
	}
	deliver := func(event string, obj any) {
		arrival := time.Now()
		// After a relist the informer reports a delete it never saw as a
		// tombstone holding the last state it knew.
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			logger.Warn("informer delivered an object without metadata", "err", err)
			return
		}
		observe(event, m, arrival)
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { deliver(metrics.EventAdded, obj) },
		UpdateFunc: func(_, obj any) { deliver(metrics.EventModified, obj) },
		DeleteFunc: func(obj any) { deliver(metrics.EventDeleted, obj) },
	})
	if err != nil {
		return nil, err
	}
	p.informer = inf
	return p, nil
}

func (p *informerPath) run(ctx context.Context) { p.informer.RunWithContext(ctx) }

func (p *informerPath) synced() bool { return p.informer.HasSynced() }

// relist records a relist starting now and returns its start.
func (p *informerPath) relist(mode string) time.Time {
	p.mu.Lock()
	reason := p.nextReason
	if !p.listed {
		reason = metrics.RelistInitial
		p.listed = true
	}
	p.nextReason = metrics.RelistError
	p.mu.Unlock()
	now := time.Now()
	p.tracker.relisted(p.idx, reason, mode, now)
	return now
}

func (p *informerPath) setNextReason(reason string) {
	p.mu.Lock()
	p.nextReason = reason
	p.mu.Unlock()
}

// ended records the end of a stream (or a watch that failed to start).
func (p *informerPath) ended(reason string, lifetime time.Duration, err error) {
	if reason == metrics.EndExpired {
		p.setNextReason(metrics.RelistExpired)
	}
	p.tracker.streamEnded(p.idx, reason, lifetime, err, time.Now())
}

// observedWatch passes a watch stream through to the reflector unchanged,
// noting bookmarks, the end of a WatchList's initial events, and how the
// stream ended.
type observedWatch struct {
	inner    watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func newObservedWatch(inner watch.Interface, p *informerPath, start time.Time, requested time.Duration, watchList bool) *observedWatch {
	o := &observedWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		var status error
		byClient := false
		defer func() {
			close(o.out)
			p.ended(endReason(status, time.Since(start), requested, byClient), time.Since(start), status)
		}()
		for {
			var ev watch.Event
			var ok bool
			select {
			case <-o.stop:
				byClient = true
				return
			case ev, ok = <-inner.ResultChan():
			}
			if !ok {
				select {
				case <-o.stop:
					byClient = true
				default:
				}
				return
			}
			switch ev.Type {
			case watch.Bookmark:
				now := time.Now()
				p.tracker.bookmark(p.idx, now)
				if m, err := meta.Accessor(ev.Object); err == nil && watchList && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					p.series.RelistDone(metrics.ModeWatchList, now.Sub(start))
				}
			case watch.Error:
				status = apierrors.FromObject(ev.Object)
			}
			select {
			case o.out <- ev:
			case <-o.stop:
				byClient = true
				return
			}
		}
	}()
	return o
}

func (o *observedWatch) ResultChan() <-chan watch.Event { return o.out }

func (o *observedWatch) Stop() {
	o.stopOnce.Do(func() {
		close(o.stop)
		o.inner.Stop()
	})
}
