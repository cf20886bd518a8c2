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

// minWatchTimeout matches client-go's reflector: each watch asks the server
// to end it after a random 5 to 10 minutes, so that many clients do not
// reconnect at once.
const minWatchTimeout = 5 * time.Minute

// watchPath receives markers on the project's own watch stream, with no
// informer machinery in between: the closest a client can be to the
// apiserver's watch cache. After a stream ends it resumes from the last
// resourceVersion it saw, and relists only when that version has expired.
type watchPath struct {
	api      markerAPI
	selector string
	observe  observeFunc
	logger   *slog.Logger
	ready    atomic.Bool
}

func newWatchPath(api markerAPI, selector string, observe observeFunc, logger *slog.Logger) *watchPath {
	return &watchPath{api: api, selector: selector, observe: observe, logger: logger}
}

func (p *watchPath) synced() bool { return p.ready.Load() }

func (p *watchPath) run(ctx context.Context) {
	var rv string
	retry := newBackoff()
	for ctx.Err() == nil {
		if rv == "" {
			_, listRV, err := listObjects(ctx, p.api, metav1.ListOptions{LabelSelector: p.selector})
			if err != nil {
				p.logger.Warn("listing markers failed", "err", err)
				retry.wait(ctx)
				continue
			}
			rv = listRV
		}
		timeout := int64((minWatchTimeout + rand.N(minWatchTimeout)).Seconds())
		w, err := p.api.watch(ctx, metav1.ListOptions{
			LabelSelector:       p.selector,
			ResourceVersion:     rv,
			AllowWatchBookmarks: true,
			TimeoutSeconds:      &timeout,
		})
		if err != nil {
			if isExpired(err) {
				rv = ""
			}
			p.logger.Warn("starting watch failed", "err", err, "resourceVersion", rv)
			retry.wait(ctx)
			continue
		}
		p.ready.Store(true)
		retry.reset()
		rv = p.consume(ctx, w, rv)
	}
}

// consume reads one watch stream to its end and returns the resourceVersion
// to resume from, or "" when the stream said that version has expired.
func (p *watchPath) consume(ctx context.Context, w watch.Interface, rv string) string {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv
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
				continue
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				p.logger.Info("watch ended with an error event", "err", err)
				if isExpired(err) {
					return ""
				}
				return rv
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
}

// isExpired reports the "410 Gone / too old resource version" answer that
// means the stream cannot be resumed and the path must relist.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
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
