package probe

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// Cleanup bounds: each delete has its own timeout, a pass tries a bounded
// number of markers, a marker that keeps failing is retried less often,
// and a bounded number of markers is tracked by name.
const (
	cleanupEvery     = time.Second
	cleanupTimeout   = 10 * time.Second
	cleanupPerPass   = 20
	cleanupMaxWait   = time.Minute
	cleanupFirstWait = time.Second
	// cleanupMaxQueued bounds the markers tracked by name. While deletes
	// keep failing (no delete permission, an apiserver refusing them) a
	// probe leaves one marker per cycle; past the bound the cleaner lists
	// the replica's markers instead, so that its memory and its work under
	// the lock stay bounded however long the failure lasts.
	cleanupMaxQueued = 100
)

// cleaner deletes the markers a probe's cycles could not, beside the cycles
// and never in their way: a marker whose delete failed (no permission, the
// apiserver down), or whose create failed although it may have been
// committed. A marker whose delete other clients' finalizers hold it
// tracks until they let go: it is theirs to release, never the cleaner's.
type cleaner struct {
	api kube.MarkerAPI
	// pending hears how many markers wait for deletion, and how many of
	// them other clients' finalizers hold.
	pending func(n, held int)
	logger  *slog.Logger
	cfg     cleanerConfig

	mu      sync.Mutex
	markers map[string]*cleanupEntry
	// queued hears of each marker add queues, so that run ticks only while
	// markers wait: a tick a second for each of many probes would keep the
	// process from ever idling between cycles, which costs more CPU than
	// the ticks' work.
	queued chan struct{}
	// live is the marker of the cycle under way, which no list deletes.
	live string
	// overflow: a marker came while cleanupMaxQueued were queued, so not
	// every marker left is in markers. Retries then list the replica's
	// markers too, until a list finds none left and no create that failed
	// may still commit (until).
	overflow overflowState
	// untracked are held markers known by a hold or a list but not
	// tracked by name, at most cleanupMaxQueued of them: who hears of
	// deleted markers was told they exist, so a list that no longer shows
	// one, or a path that sees it deleted, tells it gone.
	untracked map[string]struct{}
}

// cleanerConfig is what the cleaner works on: the probe and replica whose
// markers it deletes, the name prefix of this run's markers, how old
// another replica's marker must be to be taken for one left by a crash,
// its clock, who hears of each marker it found deleted (nil for
// none), held ones included once their finalizers let them go, and who
// hears of each held marker the cleaner itself found absent (its delete
// answered 404, or a complete list no longer shows it), not a path's
// DELETED.
type cleanerConfig struct {
	probe, replica, runPrefix string
	orphanAge                 time.Duration
	now                       func() time.Time
	deleted                   func(name string, at time.Time)
	heldGone                  func(name string, at time.Time)
}

// overflowState is what the cleaner knows of the markers it did not queue.
type overflowState struct {
	on    bool
	until time.Time
	// left counts the markers the latest list found and could not delete,
	// and those not queued since: they exist, or may. added counts every
	// marker not queued, so that a list can tell those that came after it.
	left, added int
	// held counts those of left that the latest list found held by
	// finalizers.
	held       int
	next, wait time.Duration // next: after the cleaner's first instant
	started    time.Time
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
	// held is set while other clients' finalizers hold the marker's
	// deletion.
	held *HeldMarker
}

// HeldMarker is a marker a probe deleted whose deletion other clients'
// finalizers hold: the marker stays, marked deleting, until they remove
// them.
type HeldMarker struct {
	Name string
	// Finalizers are the marker's, and Managers the clients that set
	// them (from its managedFields).
	Finalizers, Managers []string
	// Since is when the cleaner first found it held.
	Since time.Time
}

// createMayCommit bounds how long after a failed create the marker may still
// appear: the client gave up after WriteTimeout, the apiserver's own request
// timeout is a minute by default.
const createMayCommit = 2 * time.Minute

func newCleaner(api kube.MarkerAPI, pending func(n, held int), logger *slog.Logger, cfg cleanerConfig) *cleaner {
	return &cleaner{api: api, pending: pending, logger: logger, cfg: cfg, markers: map[string]*cleanupEntry{},
		untracked: map[string]struct{}{}, queued: make(chan struct{}, 1)}
}

// cycling says which marker the cycle under way writes ("" between cycles).
func (c *cleaner) cycling(name string) {
	c.mu.Lock()
	c.live = name
	c.mu.Unlock()
}

// add queues a marker for deletion. createFailed says its create failed,
// so it may exist or appear later, rather than exist for sure.
func (c *cleaner) add(name string, createFailed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.markers[name]; ok {
		return
	}
	now := c.cfg.now()
	switch {
	case len(c.markers) < cleanupMaxQueued:
		e := &cleanupEntry{wait: cleanupFirstWait}
		if createFailed {
			e.until = now.Add(createMayCommit)
		}
		c.markers[name] = e
	default:
		c.queueOverflow(now, createFailed)
	}
	c.setPending()
	select {
	case c.queued <- struct{}{}:
	default:
	}
}

// queueOverflow counts a marker left unqueued, the cleanupMaxQueued
// tracked by name already. The caller holds mu.
func (c *cleaner) queueOverflow(now time.Time, createFailed bool) {
	o := &c.overflow
	if !o.on {
		c.logger.Warn("more markers wait for deletion than are tracked by name; listing the replica's markers to delete them", "tracked", cleanupMaxQueued)
		*o = overflowState{on: true, wait: cleanupFirstWait, started: now, added: o.added}
	}
	o.left++
	o.added++
	if createFailed {
		o.until = judge.Later(o.until, now.Add(createMayCommit))
	}
}

// hold tracks the marker obj, whose deletion other clients' finalizers
// hold, until it is gone: it exists, so it waits for deletion, retried
// as a failed delete is (a delete of a marker marked deleting changes
// nothing, and answers whether it is still there), and released at once
// when a path sees it go. One log line names who holds it.
func (c *cleaner) hold(obj metav1.Object) {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := obj.GetName()
	now := c.cfg.now()
	e := c.markers[name]
	switch {
	case e != nil:
	case len(c.markers) < cleanupMaxQueued:
		e = &cleanupEntry{wait: cleanupFirstWait, next: now.Add(cleanupFirstWait)}
		c.markers[name] = e
	default:
		c.queueOverflow(now, false)
		c.overflow.held++
		c.holdUntracked(name)
		c.logHeld(obj)
		c.setPending()
		return
	}
	if e.held == nil {
		c.logHeld(obj)
	}
	e.held = heldMarker(obj, e.held, now)
	e.absent = false
	c.setPending()
	select {
	case c.queued <- struct{}{}:
	default:
	}
}

func (c *cleaner) logHeld(obj metav1.Object) {
	c.logger.Info("other clients' finalizers hold a deleted marker; it stays until they remove them, and its delete is judged unmeasurable",
		"marker", obj.GetName(), "finalizers", obj.GetFinalizers(), "managers", judge.FinalizerManagers(obj))
}

// heldMarker is what the marker obj, held, shows; since from was, if
// known.
func heldMarker(obj metav1.Object, was *HeldMarker, now time.Time) *HeldMarker {
	h := &HeldMarker{Name: obj.GetName(), Finalizers: obj.GetFinalizers(), Managers: judge.FinalizerManagers(obj), Since: now}
	if was != nil {
		h.Since = was.Since
	}
	return h
}

// deleting reports whether o is marked deleting and held by finalizers:
// a delete of it changes nothing.
func deleting(o metav1.Object) bool {
	return o.GetDeletionTimestamp() != nil && len(o.GetFinalizers()) > 0
}

// released drops a held marker that a path saw deleted.
func (c *cleaner) released(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.markers[name]; e != nil && e.held != nil {
		c.forget(name, e, c.cfg.now(), false)
		c.setPending()
		return
	}
	if _, ok := c.untracked[name]; ok {
		delete(c.untracked, name)
		c.gone(name, c.cfg.now())
		o := &c.overflow
		o.left, o.held = max(o.left-1, 0), max(o.held-1, 0)
		c.setPending()
	}
}

// holdUntracked remembers the held marker name, not tracked by name, if
// there is room. The caller holds mu.
func (c *cleaner) holdUntracked(name string) {
	if _, tracked := c.markers[name]; !tracked && len(c.untracked) < cleanupMaxQueued {
		c.untracked[name] = struct{}{}
	}
}

// untrackedGone tells gone, at now, the untracked held markers that a
// complete list of the replica's markers, objs, no longer shows. The
// caller holds mu.
func (c *cleaner) untrackedGone(objs []metav1.Object, now time.Time) {
	for name := range c.untracked {
		if !listed(objs, name) {
			delete(c.untracked, name)
			c.gone(name, now)
			if c.cfg.heldGone != nil {
				c.cfg.heldGone(name, now)
			}
		}
	}
}

// forget drops the entry e of a marker that is gone, found so at now (by
// the cleaner itself if absent, else by a path's DELETED), and tells who
// hears of deleted markers. The caller holds mu.
func (c *cleaner) forget(name string, e *cleanupEntry, now time.Time, absent bool) {
	delete(c.markers, name)
	c.gone(name, now)
	if absent && e.held != nil && c.cfg.heldGone != nil {
		c.cfg.heldGone(name, now)
	}
	switch {
	case e.held != nil:
		c.logger.Info("the finalizers holding a deleted marker are gone, and so is the marker", "marker", name, "held_for", now.Sub(e.held.Since))
	case e.warned:
		c.logger.Info("deleted a marker left by a failed write", "marker", name)
	}
}

// held lists the markers tracked as held, oldest first.
func (c *cleaner) held() []HeldMarker {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []HeldMarker
	for _, e := range c.markers {
		if e.held != nil {
			out = append(out, *e.held)
		}
	}
	slices.SortFunc(out, func(a, b HeldMarker) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Name, b.Name))
	})
	return out
}

// waiting reports whether markers are queued, or left unqueued.
func (c *cleaner) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.markers) > 0 || c.overflow.on
}

// run retries queued deletes every cleanupEvery while any are queued, and
// deletes other replicas' markers older than orphanAge every half orphan
// age (at most every cleanupEvery), until ctx ends. It begins with the
// start-up sweep of this replica's markers left by an earlier run, beside
// the paths rather than before them.
func (c *cleaner) run(ctx context.Context) {
	c.sweep(ctx, sweepStart)
	// At most a list per cleanupEvery, however small orphanAge is.
	sweepEvery := max(c.cfg.orphanAge/2, cleanupEvery)
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
			c.retry(ctx)
			if now.Sub(lastSweep) >= sweepEvery {
				c.sweep(ctx, sweepOrphans)
				lastSweep = now
			}
			arm(lastSweep.Add(sweepEvery))
			if c.waiting() {
				arm(now.Add(cleanupEvery))
			}
		}
	}
}

// retry tries the queued markers that are due, a bounded number per pass,
// and, when markers were left unqueued, the replica's markers a list finds.
func (c *cleaner) retry(ctx context.Context) {
	now := c.cfg.now()
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
	listing := c.overflow.on && now.Sub(c.overflow.started) >= c.overflow.next
	c.mu.Unlock()
	for _, name := range due {
		if ctx.Err() != nil {
			return
		}
		found, held, err := c.delete(ctx, name)
		now := c.cfg.now()
		c.mu.Lock()
		e := c.markers[name]
		switch {
		case e == nil:
		case err == nil && held != nil:
			// Other clients' finalizers hold it: theirs to release.
			if e.held == nil {
				c.logHeld(held)
			}
			e.held = heldMarker(held, e.held, now)
			e.absent = false
			e.next = now.Add(e.wait)
			e.wait = min(2*e.wait, cleanupMaxWait)
		case err == nil && !found && now.Before(e.until):
			e.next = e.until // it may still appear
			e.absent = true
		case err == nil:
			c.forget(name, e, now, true)
		default:
			e.absent = false // it may have been made since: a delete failed
			e.next = now.Add(e.wait)
			e.wait = min(2*e.wait, cleanupMaxWait)
			if !e.warned {
				e.warned = true
				c.logger.Warn("deleting a marker failed; retrying in the background", "marker", name, "err", err)
			}
		}
		c.setPending()
		c.mu.Unlock()
	}
	if listing && ctx.Err() == nil {
		c.deleteListed(ctx)
	}
}

// deleteListed lists the replica's markers and deletes, a bounded number
// per pass, those neither queued by name nor the live one; it leaves the
// overflow once a list finds none left.
func (c *cleaner) deleteListed(ctx context.Context) {
	c.mu.Lock()
	addedBefore := c.overflow.added
	c.mu.Unlock()
	objs, err := c.list(ctx, markerSelector(c.cfg.probe, c.cfg.replica))
	c.mu.Lock()
	skip := make(map[string]bool, len(c.markers)+1)
	for name := range c.markers {
		skip[name] = true
	}
	skip[c.live] = true
	c.mu.Unlock()
	var left, held, tried int
	var heldNames []string
	failed := err != nil
	for _, o := range objs {
		name := o.GetName()
		switch {
		case skip[name]:
			continue
		case deleting(o):
			left++
			held++
			heldNames = append(heldNames, name)
			continue
		case tried == cleanupPerPass || ctx.Err() != nil:
			left++
			continue
		}
		tried++
		switch _, h, err := c.delete(ctx, name); {
		case err != nil:
			left++
			failed = true
			continue
		case h != nil:
			left++
			held++
			heldNames = append(heldNames, name)
			continue
		}
		c.gone(name, c.cfg.now())
	}
	// Held markers are other clients' to release: a list sooner than a
	// failure's would not find them gone sooner.
	failed = failed || held > 0
	now := c.cfg.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	o := &c.overflow
	left += o.added - addedBefore // left unqueued while the list was under way
	if err == nil {
		c.untrackedGone(objs, now)
		for _, name := range heldNames {
			c.holdUntracked(name)
		}
	}
	switch {
	case err != nil:
		// Nothing learnt: what was counted stays.
	case left == 0 && !now.Before(o.until):
		c.logger.Info("the markers left unqueued are deleted", "after", now.Sub(o.started))
		*o = overflowState{added: o.added}
	default:
		o.left, o.held = left, min(held, left)
	}
	if o.on {
		if failed {
			o.wait = min(2*o.wait, cleanupMaxWait)
		} else {
			o.wait = cleanupFirstWait
		}
		o.next = now.Sub(o.started) + o.wait
	}
	c.setPending()
}

// setPending shows the markers that exist, or may: the queued ones but
// those that a failed create never made, found absent and only waiting to
// be sure, and those left unqueued; and of them, those held by other
// clients' finalizers. The caller holds mu.
func (c *cleaner) setPending() {
	n, held := c.overflow.left, c.overflow.held
	for _, e := range c.markers {
		if !e.absent {
			n++
		}
		if e.held != nil {
			held++
		}
	}
	c.pending(n, held)
}

// gone tells cfg.deleted that the marker is deleted (200), or was gone
// already (404): only once no failed create can still make it, so that a
// list showing it later is a stale read, not a late create.
func (c *cleaner) gone(name string, at time.Time) {
	if c.cfg.deleted != nil {
		c.cfg.deleted(name, at)
	}
}

// delete deletes one marker; one that is already gone is not an error.
// held is the marker when other clients' finalizers hold its deletion.
func (c *cleaner) delete(ctx context.Context, name string) (found bool, held metav1.Object, err error) {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	held, _, err = c.api.Delete(ctx, name, "")
	if apierrors.IsNotFound(err) {
		return false, nil, nil
	}
	return err == nil, held, err
}

// list lists markers by selector, bounded as every LIST of the probe's is.
func (c *cleaner) list(ctx context.Context, selector string) ([]metav1.Object, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, kube.ListTimeout, kube.ErrListTimeout)
	defer cancel()
	objs, _, err := kube.ListObjects(ctx, c.api.List, metav1.ListOptions{LabelSelector: selector})
	return objs, err
}

// orphan tells another replica's marker untouched for orphanAge: left by a
// replica gone for good, since a live one changes its markers every
// interval. Untouched since the last change a controller marker records,
// else since it was made.
func orphan(o metav1.Object, replica string, orphanAge time.Duration) bool {
	if o.GetLabels()[LabelReplica] == replica {
		return false
	}
	touched, err := time.Parse(time.RFC3339, o.GetAnnotations()[annotationChangedAt])
	if err != nil {
		touched = o.GetCreationTimestamp().Time
	}
	return time.Since(touched) > orphanAge
}

// sweepOf says which of the probe's markers a sweep deletes.
type sweepOf uint8

const (
	// sweepOrphans: other replicas' markers older than orphanAge, left by
	// a replica gone for good.
	sweepOrphans sweepOf = iota
	// sweepStart: those, and this replica's of earlier runs, at start-up,
	// beside the first cycles, whose markers are this run's to handle.
	sweepStart
	// sweepStop: those, and every one of this replica's, at shutdown.
	sweepStop
)

// sweep lists the probe's markers and deletes those of which, as what
// says; the live one never.
func (c *cleaner) sweep(ctx context.Context, what sweepOf) {
	ownToo := what != sweepOrphans
	c.mu.Lock()
	addedBefore := c.overflow.added
	c.mu.Unlock()
	objs, err := c.list(ctx, markerSelector(c.cfg.probe, ""))
	if err != nil {
		if ctx.Err() == nil {
			c.logger.Warn("listing markers for cleanup failed", "err", err)
		}
		return
	}
	left := 0 // own markers not deleted and not queued
	for _, o := range objs {
		name := o.GetName()
		own := o.GetLabels()[LabelReplica] == c.cfg.replica
		orphaned := orphan(o, c.cfg.replica, c.cfg.orphanAge)
		c.mu.Lock()
		live := name == c.live
		_, queued := c.markers[name]
		c.mu.Unlock()
		thisRun := strings.HasPrefix(name, c.cfg.runPrefix)
		if !(own && ownToo && !live && (what == sweepStop || !thisRun)) && !orphaned {
			continue
		}
		if deleting(o) {
			// Its delete can change nothing: other clients' finalizers
			// hold it. This replica's is tracked until they let go.
			if own {
				c.hold(o)
			}
			continue
		}
		_, held, err := c.delete(ctx, name)
		switch {
		case err != nil:
			c.logger.Warn("deleting a stale marker failed", "marker", name, "err", err)
			if own && !queued {
				left++
			}
			continue
		case held != nil:
			if own {
				c.hold(held)
			}
			continue
		}
		c.logger.Info("deleted a stale marker", "marker", name, "replica", o.GetLabels()[LabelReplica])
		c.gone(name, c.cfg.now())
		if queued {
			c.mu.Lock()
			delete(c.markers, name)
			c.mu.Unlock()
		}
	}
	if !ownToo {
		return
	}
	if what == sweepStop {
		c.deleteQueued(ctx, objs)
	}
	// The list saw every marker of the replica: besides those queued, what
	// it could not delete is left, and what was left unqueued since it.
	c.mu.Lock()
	c.untrackedGone(objs, c.cfg.now())
	o := &c.overflow
	since := o.added - addedBefore
	switch {
	case left+since == 0:
		added := o.added
		*o = overflowState{added: added}
	case !o.on:
		*o = overflowState{on: true, wait: cleanupFirstWait, started: c.cfg.now(), added: o.added}
		fallthrough
	default:
		o.left = left + since
	}
	c.setPending()
	c.mu.Unlock()
}

// deleteQueued deletes, at shutdown, the queued markers a sweep's list
// (objs) did not show: a create in flight when the run stopped can commit
// after the list. Deleting one by name costs a request; one that is not
// there is gone.
func (c *cleaner) deleteQueued(ctx context.Context, objs []metav1.Object) {
	c.mu.Lock()
	var queued []string
	for name := range c.markers {
		if !listed(objs, name) {
			queued = append(queued, name)
		}
	}
	c.mu.Unlock()
	for _, name := range queued {
		found, held, err := c.delete(ctx, name)
		if err != nil {
			c.logger.Warn("deleting a marker left by a failed write failed", "marker", name, "err", err)
			continue
		}
		if held != nil {
			continue // other clients' finalizers hold it: theirs to release
		}
		if found {
			c.logger.Info("deleted a marker left by a failed write", "marker", name)
		}
		now := c.cfg.now()
		c.mu.Lock()
		// Found absent, it is gone unless its failed create may still
		// commit.
		if e := c.markers[name]; found || (e != nil && !now.Before(e.until)) {
			c.gone(name, now)
			if e != nil && e.held != nil && c.cfg.heldGone != nil {
				c.cfg.heldGone(name, now)
			}
		}
		delete(c.markers, name)
		c.mu.Unlock()
	}
}

func listed(objs []metav1.Object, name string) bool {
	for _, o := range objs {
		if o.GetName() == name {
			return true
		}
	}
	return false
}
