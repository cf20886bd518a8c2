package paths

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// watchPath receives markers on the project's own watch stream, with no
// informer machinery in between: the closest a client can be to the
// apiserver's watch cache. After a stream ends it resumes from the newest
// resourceVersion it saw, and relists only when that version has expired.
type watchPath struct {
	*Base
}

func newWatchPath(env Env) (Path, error) { return &watchPath{NewBase(env)}, nil }

func (p *watchPath) Run(ctx context.Context) {
	var rv string
	retry := NewBackoff()
	expiredAgain := false // a 410 with no healthy stream since the last one
	for ctx.Err() == nil {
		if rv == "" {
			p.RelistAttempt(metrics.ModeList)
			_, listRV, err := kube.ListObjects(ctx, p.list, metav1.ListOptions{})
			if err != nil {
				retry.Wait(ctx)
				continue
			}
			p.RelistCompleted(metrics.ModeList)
			rv = listRV
		}
		s, w, err := p.watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		var end string
		if s == nil {
			if w != nil {
				w.Stop()
			}
			if IsExpired(err) {
				p.SetNextReason(metrics.RelistExpired)
				end = metrics.EndExpired
			}
		} else {
			p.Live(time.Now())
			var delivered bool
			rv, delivered = p.consume(ctx, s, w, rv)
			end = s.end(ctx.Err() != nil)
			if Healthy(delivered, time.Since(s.start)) {
				retry.Reset()
				expiredAgain = false
			}
		}
		relist, wait := AfterStream(end, expiredAgain)
		if relist {
			rv = ""
			expiredAgain = true
		}
		if wait {
			retry.Wait(ctx)
		}
	}
}

// healthyAfter is how long a stream that delivers nothing must live to
// show a healthy apiserver.
const healthyAfter = time.Second

// healthy reports whether a stream showed the apiserver healthy: it
// delivered something, or lived long enough. Only then are earlier failures
// forgotten: a server that accepts each watch and closes it at once must
// still be backed off from.
func Healthy(delivered bool, lifetime time.Duration) bool {
	return delivered || lifetime >= healthyAfter
}

// AfterStream says what a path does after a watch request that failed
// before any stream (end "") or a stream that ended for end: relist, and
// whether to wait out its backoff first. A healthy stream has reset the
// backoff: earlier failures say nothing of the next reconnect. After a 410
// the apiserver answered and only the history is gone, so the relist goes
// at once, unless expiredAgain (a 410 came before, with no healthy stream
// since): a wait after a first 410 would count the writes of the prober's
// own wait as lost for the relist, but 410 after 410 must not loop.
func AfterStream(end string, expiredAgain bool) (relist, wait bool) {
	switch end {
	case metrics.EndExpired:
		return true, expiredAgain
	case metrics.EndTimeout, metrics.EndClient:
		return false, false
	}
	// A failed request, or a stream that ended early, must not turn into
	// a reconnect storm.
	return false, true
}

// consume reads one watch stream to its end. It returns the resourceVersion
// to resume from: the newest one seen, so that an event delivered out of
// order does not move the resume point back and have the server deliver
// again what already arrived; and whether anything but an error arrived.
func (p *watchPath) consume(ctx context.Context, s *stream, w watch.Interface, rv string) (string, bool) {
	defer w.Stop()
	delivered := false
	for {
		ev, ok := Next(ctx.Done(), w)
		if !ok {
			return rv, delivered
		}
		delivered = delivered || ev.Type != watch.Error
		rv = p.deliver(s, ev, rv, p.Stamp())
		p.Handed()
	}
}

// Next is w's next event; false once w's channel is closed or done is.
func Next(done <-chan struct{}, w watch.Interface) (watch.Event, bool) {
	select {
	case <-done:
		return watch.Event{}, false
	case ev, ok := <-w.ResultChan():
		return ev, ok
	}
}

// deliver hands one event of the stream, arrived at arrival, to the
// judgement, and returns the resourceVersion to resume from.
func (p *watchPath) deliver(s *stream, ev watch.Event, rv string, arrival time.Time) string {
	var event string
	switch ev.Type {
	case watch.Added:
		event = metrics.EventAdded
	case watch.Modified:
		event = metrics.EventModified
	case watch.Deleted:
		event = metrics.EventDeleted
	case watch.Bookmark:
		// Nothing a bookmark says judges a write: its stamp holds nothing.
		p.Handed()
		if m, err := meta.Accessor(ev.Object); err == nil {
			rv = newerRV(rv, m.GetResourceVersion())
		}
		p.Bookmark(arrival)
		return rv
	case watch.Error:
		p.Handed()
		s.errorEvent(ev)
		return rv // the stream ends after it
	default:
		return rv
	}
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		p.logger.Warn("watch delivered an object without metadata", "err", err)
		return rv
	}
	p.Event(event, m, arrival)
	return newerRV(rv, m.GetResourceVersion())
}

// newerRV returns the newer of two resourceVersions. They are opaque to
// clients, but every apiserver backed by etcd issues them as increasing
// integers; if either is not one, the latest seen wins, as in client-go.
func newerRV(current, seen string) string {
	a, errA := strconv.ParseUint(current, 10, 64)
	b, errB := strconv.ParseUint(seen, 10, 64)
	if errA == nil && errB == nil && a > b {
		return current
	}
	return seen
}

// backoff spaces out retries against an apiserver that is down, from 100 ms
// doubling to 10 s, with jitter so that replicas do not retry in step.
type Backoff struct{ next time.Duration }

func NewBackoff() *Backoff { return &Backoff{next: 100 * time.Millisecond} }

func (b *Backoff) Reset() { b.next = 100 * time.Millisecond }

func (b *Backoff) Wait(ctx context.Context) {
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, 10*time.Second)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
