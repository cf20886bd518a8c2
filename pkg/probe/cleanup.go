package probe

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Cleanup bounds: each delete has its own timeout, a pass tries a bounded
// number of markers, and a marker that keeps failing is retried less often.
const (
	cleanupEvery     = time.Second
	cleanupTimeout   = 10 * time.Second
	cleanupPerPass   = 20
	cleanupMaxWait   = time.Minute
	cleanupFirstWait = time.Second
)

// cleaner deletes the markers a probe's cycles could not, beside the cycles
// and never in their way: a marker whose delete failed (no permission, the
// apiserver down), or whose create failed although it may have been
// committed.
type cleaner struct {
	api     markerAPI
	pending prometheus.Gauge
	logger  *slog.Logger

	mu      sync.Mutex
	markers map[string]*cleanupEntry
	// queued hears of each marker add queues, so that run ticks only while
	// markers wait: a tick a second for each of many probes would keep the
	// process from ever idling between cycles, which costs more CPU than
	// the ticks' work.
	queued chan struct{}
}

type cleanupEntry struct {
	next   time.Time
	wait   time.Duration
	warned bool
	// until: before then, not finding the marker proves nothing, because
	// the create that failed at the client may still be committed.
	until time.Time
	// absent: the latest try found no marker; it waits only for until.
	absent bool
}

// createMayCommit bounds how long after a failed create the marker may still
// appear: the client gave up after WriteTimeout, the apiserver's own request
// timeout is a minute by default.
const createMayCommit = 2 * time.Minute

func newCleaner(api markerAPI, pending prometheus.Gauge, logger *slog.Logger) *cleaner {
	return &cleaner{api: api, pending: pending, logger: logger, markers: map[string]*cleanupEntry{}, queued: make(chan struct{}, 1)}
}

// add queues a marker for deletion. createFailed says its create failed,
// so it may exist or appear later, rather than exist for sure.
func (c *cleaner) add(name string, createFailed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.markers[name]; !ok {
		e := &cleanupEntry{wait: cleanupFirstWait}
		if createFailed {
			e.until = time.Now().Add(createMayCommit)
		}
		c.markers[name] = e
		c.setPending()
		select {
		case c.queued <- struct{}{}:
		default:
		}
	}
}

// waiting reports whether markers are queued.
func (c *cleaner) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.markers) > 0
}

// run retries queued deletes every cleanupEvery while any are queued, and
// deletes other replicas' markers older than orphanAge every half orphan
// age (at most every cleanupEvery), until ctx ends.
func (c *cleaner) run(ctx context.Context, probe, replica string, orphanAge time.Duration) {
	// At most a list per cleanupEvery, however small orphanAge is.
	sweepEvery := max(orphanAge/2, cleanupEvery)
	lastSweep := time.Now()
	timer := time.NewTimer(sweepEvery)
	defer timer.Stop()
	due := lastSweep.Add(sweepEvery)
	// arm makes the timer fire at at, unless it fires sooner: markers
	// queued faster than cleanupEvery must not keep putting the retry off.
	arm := func(at time.Time) {
		if due.IsZero() || at.Before(due) {
			due = at
			timer.Reset(time.Until(at))
		}
	}
	if c.waiting() {
		arm(time.Now().Add(cleanupEvery))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.queued:
			arm(time.Now().Add(cleanupEvery))
		case now := <-timer.C:
			due = time.Time{}
			c.retry(ctx, now)
			if now.Sub(lastSweep) >= sweepEvery {
				c.sweep(ctx, probe, replica, orphanAge, false)
				lastSweep = now
			}
			arm(lastSweep.Add(sweepEvery))
			if c.waiting() {
				arm(now.Add(cleanupEvery))
			}
		}
	}
}

// retry tries the queued markers that are due, a bounded number per pass.
func (c *cleaner) retry(ctx context.Context, now time.Time) {
	var due []string
	c.mu.Lock()
	for name, e := range c.markers {
		if len(due) == cleanupPerPass {
			break
		}
		if !now.Before(e.next) {
			due = append(due, name)
		}
	}
	c.mu.Unlock()
	for _, name := range due {
		if ctx.Err() != nil {
			return
		}
		found, err := c.delete(ctx, name)
		c.mu.Lock()
		e := c.markers[name]
		switch {
		case e == nil:
		case err == nil && !found && time.Now().Before(e.until):
			e.next = e.until // it may still appear
			e.absent = true
		case err == nil:
			delete(c.markers, name)
			if e.warned {
				c.logger.Info("deleted a marker left by a failed write", "marker", name)
			}
		default:
			e.absent = false // it may have been made since: a delete failed
			e.next = time.Now().Add(e.wait)
			e.wait = min(2*e.wait, cleanupMaxWait)
			if !e.warned {
				e.warned = true
				c.logger.Warn("deleting a marker failed; retrying in the background", "marker", name, "err", err)
			}
		}
		c.setPending()
		c.mu.Unlock()
	}
}

// setPending shows the queued markers that exist, or may: not those that a
// failed create never made, found absent and only waiting to be sure. The
// caller holds mu.
func (c *cleaner) setPending() {
	n := 0
	for _, e := range c.markers {
		if !e.absent {
			n++
		}
	}
	c.pending.Set(float64(n))
}

// delete deletes one marker; one that is already gone is not an error.
func (c *cleaner) delete(ctx context.Context, name string) (found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	err = c.api.delete(ctx, name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// sweep lists the probe's markers and deletes those no live writer needs:
// all of this replica's when ownToo is true (at start-up and shutdown
// nothing of ours is live), and other replicas' older than orphanAge.
func (c *cleaner) sweep(ctx context.Context, probe, replica string, orphanAge time.Duration, ownToo bool) {
	objs, _, err := listObjects(ctx, c.api.list, metav1.ListOptions{LabelSelector: markerSelector(probe, "")})
	if err != nil {
		c.logger.Warn("listing markers for cleanup failed", "err", err)
		return
	}
	for _, o := range objs {
		own := o.GetLabels()[LabelReplica] == replica
		orphan := !own && time.Since(o.GetCreationTimestamp().Time) > orphanAge
		if !(own && ownToo) && !orphan {
			continue
		}
		if _, err := c.delete(ctx, o.GetName()); err != nil {
			c.logger.Warn("deleting a stale marker failed", "marker", o.GetName(), "err", err)
			continue
		}
		c.logger.Info("deleted a stale marker", "marker", o.GetName(), "replica", o.GetLabels()[LabelReplica])
	}
	if !ownToo {
		return
	}
	// A queued marker the list did not show may still exist: a create in
	// flight when the run stopped can commit after the list. Deleting it
	// by name costs a request; one that is not there is gone.
	c.mu.Lock()
	var queued []string
	for name := range c.markers {
		if !listed(objs, name) {
			queued = append(queued, name)
		}
	}
	c.mu.Unlock()
	for _, name := range queued {
		found, err := c.delete(ctx, name)
		if err != nil {
			c.logger.Warn("deleting a marker left by a failed write failed", "marker", name, "err", err)
			continue
		}
		if found {
			c.logger.Info("deleted a marker left by a failed write", "marker", name)
		}
		c.mu.Lock()
		delete(c.markers, name)
		c.mu.Unlock()
	}
	c.mu.Lock()
	c.pending.Set(float64(len(c.markers)))
	c.mu.Unlock()
}

func listed(objs []metav1.Object, name string) bool {
	for _, o := range objs {
		if o.GetName() == name {
			return true
		}
	}
	return false
}

// taggedAPI sends every request of api with tag in its context, unless the
// request carries a tag of its own.
type taggedAPI struct {
	markerAPI
	tag *requestTag
}

func (a taggedAPI) ctx(ctx context.Context) context.Context {
	if ctx.Value(tagKey{}) != nil {
		return ctx
	}
	return withTag(ctx, a.tag)
}

func (a taggedAPI) create(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	return a.markerAPI.create(a.ctx(ctx), obj)
}

func (a taggedAPI) update(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	return a.markerAPI.update(a.ctx(ctx), obj)
}

func (a taggedAPI) annotate(ctx context.Context, name string, annotations map[string]string) (metav1.Object, error) {
	return a.markerAPI.annotate(a.ctx(ctx), name, annotations)
}

func (a taggedAPI) delete(ctx context.Context, name string) error {
	return a.markerAPI.delete(a.ctx(ctx), name)
}

func (a taggedAPI) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return a.markerAPI.list(a.ctx(ctx), opts)
}

func (a taggedAPI) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return a.markerAPI.watch(a.ctx(ctx), opts)
}
