package paths

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// informerPath receives markers as a controller does: a client-go shared
// informer (LIST or WatchList, then WATCH, through the DeltaFIFO) with its
// handler called when the object reaches the controller's code. Its
// ListerWatcher is wrapped so that every relist and every stream's end is
// seen where the reflector makes it.
type informerPath struct {
	*Base
	// watchListRefused: the server refused a WatchList as a request form
	// (its gate off); client-go's relists are then LISTs, counted there.
	watchListRefused atomic.Bool
	informer         cache.SharedIndexInformer
	// streamed holds the objects the watch streams delivered that the
	// handler has not been called with yet, so that the handler tells an
	// event from a relist's state: after a relist, the reflector's store
	// hands the listed objects to the handler too, behind any event of the
	// old stream still queued.
	streamed streamedSet
}

// streamedSet counts objects by name and resourceVersion.
type streamedSet struct {
	mu sync.Mutex
	n  map[streamedKey]int
}

type streamedKey struct{ name, rv string }

// add records an object a stream delivered.
func (s *streamedSet) add(m metav1.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n = map[streamedKey]int{}
	}
	s.n[streamedKey{m.GetName(), m.GetResourceVersion()}]++
}

// take reports whether a stream delivered m and the handler has not been
// called with that delivery yet, and counts this call as it.
func (s *streamedSet) take(m metav1.Object) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := streamedKey{m.GetName(), m.GetResourceVersion()}
	switch s.n[k] {
	case 0:
		return false
	case 1:
		delete(s.n, k)
	default:
		s.n[k]--
	}
	return true
}

func newInformerPath(env Env) (Path, error) {
	base := NewBase(env)
	p := &informerPath{Base: base}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			p.RelistAttempt(metrics.ModeList)
			list, err := p.list(ctx, opts)
			if err == nil {
				p.RelistCompleted(metrics.ModeList)
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
			// A WatchList relist is under way from its request on, also
			// while the server holds it before answering (a queue): the
			// writes judged meanwhile are the relist's. Once the server has
			// refused WatchList as a request form (its gate off), client-go
			// falls back to a LIST, which is the relist and is counted as
			// one; a WatchList it serves again counts when it answers.
			asked, early := time.Now(), watchList && !p.watchListRefused.Load()
			if early {
				p.relistAttemptAt(metrics.ModeWatchList, asked)
			}
			s, w, err := p.watch(ctx, opts)
			switch {
			case watchList && err != nil && WatchListRefused(err):
				p.watchListRefused.Store(true)
			case watchList && !early:
				p.watchListRefused.Store(false)
				p.relistAttemptAt(metrics.ModeWatchList, asked)
			}
			if s == nil {
				return w, err // no stream: hand on what client-go gave
			}
			if !watchList {
				// Resumed from a resourceVersion, or from a LIST's: caught up.
				p.Live(time.Now())
			}
			return newObservedWatch(ctx, w, p, s, watchList), nil
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, base.api.Example(), cache.SharedIndexInformerOptions{})
	// The reflector reports here why a list or watch failed; an expired
	// resourceVersion makes the next relist's reason "expired".
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if IsExpired(err) {
			p.SetNextReason(metrics.RelistExpired)
		}
		p.logger.Debug("informer list or watch ended", "err", err)
	}); err != nil {
		return nil, err
	}
	deliver := func(event string, obj any) {
		arrival := p.Stamp()
		defer p.Handed()
		// After a relist the informer reports a delete it never saw as a
		// tombstone holding the last state it knew: state, not an event.
		tomb, listed := obj.(cache.DeletedFinalStateUnknown)
		if listed {
			obj = tomb.Obj
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			p.logger.Warn("informer delivered an object without metadata", "err", err)
			return
		}
		listed = listed || !p.streamed.take(m)
		p.Events(arrival, judge.PathEvent{Event: event, Obj: m, Listed: listed})
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

func (p *informerPath) Run(ctx context.Context) { p.informer.RunWithContext(ctx) }

func (p *informerPath) Synced() bool { return p.informer.HasSynced() }

// observedWatch passes a watch stream through to the reflector unchanged,
// noting bookmarks, the end of a WatchList's initial events, ERROR events
// and how the stream ended. The reflector stops a stream right after an
// ERROR event; that stop must not hide the server's reason.
type observedWatch struct {
	inner    watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

func newObservedWatch(ctx context.Context, inner watch.Interface, p *informerPath, s *stream, watchList bool) *observedWatch {
	o := &observedWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		// The end is recorded before the reflector can see the channel
		// close or return from Stop, so its next watch or relist comes
		// after it.
		defer close(o.done)
		defer close(o.out)
		defer func() { s.end(ctx.Err() != nil) }()
		// A WatchList's initial events are its relist's state.
		initial := watchList
		for {
			ev, ok := Next(o.stop, inner)
			if !ok {
				return
			}
			switch ev.Type {
			case watch.Bookmark:
				now := time.Now()
				p.Bookmark(now)
				if m, err := meta.Accessor(ev.Object); err == nil && watchList && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					initial = false
					p.RelistCompleted(metrics.ModeWatchList)
					p.Live(now)
				}
			case watch.Error:
				s.errorEvent(ev)
			case watch.Added, watch.Modified, watch.Deleted:
				// Recorded before the reflector can hand it to the handler.
				if m, err := meta.Accessor(ev.Object); err == nil && !initial {
					p.streamed.add(m)
				}
			}
			select {
			case o.out <- ev:
			case <-o.stop:
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
	<-o.done
}
