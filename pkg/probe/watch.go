package probe

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// watchPath receives markers on the project's own watch stream, with no
// informer machinery in between: the closest a client can be to the
// apiserver's watch cache. After a stream ends it resumes from the last
// resourceVersion it saw, and relists only when that version has expired.
type watchPath struct {
	api          markerAPI
	selector     string
	idx          int
	tracker      *tracker
	watchTimeout time.Duration
	observe      observeFunc
	logger       *slog.Logger
	ready        atomic.Bool
}

func (p *watchPath) synced() bool { return p.ready.Load() }

func (p *watchPath) run(ctx context.Context) {
	var rv string
	relistReason := metrics.RelistInitial
	series := p.tracker.state[p.idx].series
	retry := newBackoff()
	for ctx.Err() == nil {
		if rv == "" {
			start := time.Now()
			p.tracker.relisted(p.idx, relistReason, metrics.ModeList, start)
			_, listRV, err := listObjects(ctx, p.api, metav1.ListOptions{LabelSelector: p.selector})
			if err != nil {
				if ctx.Err() == nil {
					p.logger.Warn("listing markers failed", "err", err)
				}
				retry.wait(ctx)
				continue
			}
			series.RelistDone(metrics.ModeList, time.Since(start))
			rv = listRV
		}
		requested := requestTimeout(p.watchTimeout)
		secs := int64(requested.Seconds())
		start := time.Now()
		w, err := p.api.watch(ctx, metav1.ListOptions{
			LabelSelector:       p.selector,
			ResourceVersion:     rv,
			AllowWatchBookmarks: true,
			TimeoutSeconds:      &secs,
		})
		if err != nil {
			reason := endReason(err, time.Since(start), requested, ctx.Err() != nil)
			p.tracker.streamEnded(p.idx, reason, time.Since(start), err, time.Now())
			if reason == metrics.EndExpired {
				rv, relistReason = "", metrics.RelistExpired
			}
			retry.wait(ctx)
			continue
		}
		p.ready.Store(true)
		p.tracker.streamStarted(p.idx, time.Now())
		var status error
		rv, status = p.consume(ctx, w, rv)
		lifetime := time.Since(start)
		reason := endReason(status, lifetime, requested, ctx.Err() != nil)
		p.tracker.streamEnded(p.idx, reason, lifetime, status, time.Now())
		switch reason {
		case metrics.EndExpired:
			rv, relistReason = "", metrics.RelistExpired
		case metrics.EndTimeout:
			retry.reset()
			continue
		}
		// A stream that ended early must not turn into a reconnect storm.
		retry.wait(ctx)
	}
}

// consume reads one watch stream to its end. It returns the resourceVersion
// to resume from and the Status error that ended the stream, if any.
func (p *watchPath) consume(ctx context.Context, w watch.Interface, rv string) (string, error) {
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, nil
		}
		arrival := time.Now()
		var event string
		switch ev.Type {
		case watch.Added:
			event = metrics.EventAdded
		case watch.Modified:
			event = metrics.EventModified
		case watch.Deleted:
			event = metrics.EventDeleted
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
			p.tracker.bookmark(p.idx, arrival)
			continue
		case watch.Error:
			return rv, apierrors.FromObject(ev.Object)
		default:
			continue
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			p.logger.Warn("watch delivered an object without metadata", "err", err)
			continue
		}
		rv = m.GetResourceVersion()
		p.observe(event, m, arrival)
	}
}

// backoff spaces out retries against an apiserver that is down, from 100 ms
// doubling to 10 s, with jitter so that replicas do not retry in step.
type backoff struct{ next time.Duration }

func newBackoff() *backoff { return &backoff{next: 100 * time.Millisecond} }

func (b *backoff) reset() { b.next = 100 * time.Millisecond }

func (b *backoff) wait(ctx context.Context) {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, 10*time.Second)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
