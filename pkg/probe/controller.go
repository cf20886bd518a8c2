package probe

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// A controller probe times how long a built-in controller of
// kube-controller-manager takes to see and act on a change: the probe keeps
// one marker object per listed controller in its namespace, scaled to zero
// replicas, changes a field of its spec every interval, and waits on a
// watch of its own for the status whose observedGeneration reaches the
// generation the change produced. The loop measured is the apiserver, the
// controller-manager's informer, its work queue, its reconcile and status
// write, and the status's way back, for two small writes per cycle and not
// a single pod.
//
// The field changed must bump metadata.generation and nothing else that
// matters:
//
//   - Deployment: spec.revisionHistoryLimit, between 1 and 2. It is not part
//     of the pod template, so the template's hash, and with it the
//     ReplicaSet, stay the same: no new revision, no rollout. The controller
//     only prunes old ReplicaSets beyond the limit, and the object has none:
//     its template never changes. spec.minReadySeconds would do as well but
//     costs a third write, as the controller copies it into the ReplicaSet;
//     anything in the template (an annotation, say) would roll out a new
//     ReplicaSet every cycle.
//   - ReplicaSet: spec.minReadySeconds, between 0 and 1: it only delays when
//     a pod counts available, and there are none.
//
// A suspended Job is not as cheap, and cannot be timed this way: a Job's
// status has no observedGeneration to say which change it answers.

// ControllerVerbs are what a probe with controllers does with their marker
// objects (apps deployments, replicasets) in its namespace: the verbs its
// Role must grant for them (the chart's Role and `check`'s preflight read
// them).
var ControllerVerbs = []string{"get", "list", "watch", "create", "update", "delete"}

// ControllerResource is the API group and resource of a controller's
// marker object.
func ControllerResource(controller string) (group, resource string) {
	if controller == metrics.ControllerReplicaSet {
		return appsv1.GroupName, "replicasets"
	}
	return appsv1.GroupName, "deployments"
}

// ControllerKind is the kind of a controller's marker object.
func ControllerKind(controller string) string {
	if controller == metrics.ControllerReplicaSet {
		return "ReplicaSet"
	}
	return "Deployment"
}

// ControllerMarkerNames lists the names of the marker objects of
// controller in namespace that replica's probes made and have not deleted.
func ControllerMarkerNames(ctx context.Context, client *kube.Client, controller, namespace, replica string) ([]string, error) {
	api := newControllerKind(client, controller, namespace).api
	return listNames(ctx, api.List, labels.Set{LabelManagedBy: ManagedByValue, LabelReplica: replica, LabelController: controller})
}

// Labels and annotations of controller markers besides those of every
// marker: which controller it is for, the selector of its pod template
// (matching no pod anyone else makes), and when it was last changed, so
// that another replica can tell a marker left by a replica gone for good.
const (
	LabelController       = "watchprobe.io/controller"
	labelControllerMarker = "watchprobe.io/controller-marker"
	annotationChangedAt   = "watchprobe.io/changed-at"
	controllerNamePattern = "watchprobe-%s-%s-%s-%s"
)

// controllerTracker is the tracker's entry points for controller probes.
type controllerTracker interface {
	ControllerStamp(slot int) time.Time
	ControllerHanded(slot int)
	ControllerSeen(slot int, uid types.UID, gen, observed int64, at time.Time)
	ControllerWrote(slot int, verb string, uid types.UID, gen int64, sent, answered time.Time, err error)
	Throttled(slot int, request string)
}

// controllerEnv is what a probe's controller probes are built from.
type controllerEnv struct {
	// probe is the probe's settings; replica and runID name its markers,
	// labels are its markers' labels.
	probe          config.Config
	replica, runID string
	labels         map[string]string
	config         *rest.Config
	orphanAge      time.Duration
	tracker        controllerTracker
	// stopWriting is closed when the probe stops writing.
	stopWriting <-chan struct{}
	logger      *slog.Logger
}

// controllerProbes are a probe's controller probes.
type controllerProbes struct {
	controllerEnv
	probes []*controllerProbe
}

// controllerProbe is one controller of a probe: its marker object, the
// exporter's watch of it, and the changes.
type controllerProbe struct {
	env      *controllerEnv
	slot     int // in the tracker's controllers
	name     string
	marker   string
	kind     controllerKind
	informer cache.SharedIndexInformer
	logger   *slog.Logger

	// Used by the changing goroutine only: the object as last written, and
	// which of the values its field holds.
	obj  metav1.Object
	next int
}

// newControllerProbes builds the probe's controller probes, none without
// any configured.
func newControllerProbes(env controllerEnv) (*controllerProbes, error) {
	cs := &controllerProbes{controllerEnv: env}
	if len(env.probe.Controllers) == 0 {
		return cs, nil
	}
	client, err := kube.InstrumentedClient(env.config)
	if err != nil {
		return nil, err
	}
	for i, name := range env.probe.Controllers {
		c := &controllerProbe{
			env: &cs.controllerEnv, slot: i, name: name,
			marker: fmt.Sprintf(controllerNamePattern, env.probe.Name, env.replica, env.runID, name),
			kind:   newControllerKind(client, name, env.probe.Namespace),
			logger: env.logger.With("controller", name),
		}
		c.informer = c.newInformer()
		if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.seen(obj) },
			UpdateFunc: func(_, obj any) { c.seen(obj) },
		}); err != nil {
			return nil, err
		}
		cs.probes = append(cs.probes, c)
	}
	return cs, nil
}

// newInformer watches the marker object alone, by name.
func (c *controllerProbe) newInformer() cache.SharedIndexInformer {
	byName := func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.marker).String()
	}
	lw := kube.FilteredListWatch(c.kind.api.List, c.kind.api.Watch, byName)
	return cache.NewSharedIndexInformerWithOptions(lw, c.kind.api.Example(), cache.SharedIndexInformerOptions{})
}

// seen hands an arrival of the marker object to the judgement: its
// generation, and the generation its controller last observed; stamped in
// flight, as a path's arrivals are.
func (c *controllerProbe) seen(obj any) {
	arrival := c.env.tracker.ControllerStamp(c.slot)
	m, err := meta.Accessor(obj)
	if err != nil {
		c.env.tracker.ControllerHanded(c.slot)
		return
	}
	c.env.tracker.ControllerSeen(c.slot, m.GetUID(), m.GetGeneration(), c.kind.observed(m), arrival)
}

// run runs the controller probes until ctx ends: their watches until
// then, their changes every interval until the probe stops writing.
func (cs *controllerProbes) run(ctx context.Context) {
	if len(cs.probes) == 0 {
		return
	}
	// The watches run until ctx ends, after the changes stop, so that
	// every change sent is answered or missed; the run waits for them.
	var watches sync.WaitGroup
	defer func() {
		<-ctx.Done()
		watches.Wait()
	}()
	for _, c := range cs.probes {
		watches.Go(func() { c.informer.RunWithContext(ctx) })
	}
	syncCtx, cancel := context.WithTimeout(ctx, judge.SyncTimeout)
	for _, c := range cs.probes {
		if !cache.WaitForCacheSync(syncCtx.Done(), c.informer.HasSynced) && ctx.Err() == nil {
			c.logger.Warn("the watch of the controller's marker object has not synced; changing it anyway so that the failure is measured", "after", judge.SyncTimeout)
		}
	}
	cancel()
	ticker := time.NewTicker(time.Duration(cs.probe.Interval))
	defer ticker.Stop()
	// Other replicas' markers left by a crash are looked for every half
	// orphan age, as the other markers are: a live one is changed every
	// interval, a dead one's changed-at only ages.
	cleaned := time.Now()
	for ctx.Err() == nil && !closed(cs.stopWriting) {
		for _, c := range cs.probes {
			c.step(ctx)
		}
		if time.Since(cleaned) > cs.orphanAge/2 {
			cs.clean(ctx, false)
			cleaned = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-cs.stopWriting:
		case <-ticker.C:
		}
	}
}

// closed tells whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// step creates the marker object if it has none, else changes it.
func (c *controllerProbe) step(ctx context.Context) {
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, WriteTimeout)
	defer cancel()
	labels := maps.Clone(c.env.labels)
	labels[LabelController] = c.name
	// The send time as a time.Time, monotonic reading included: latencies
	// and deadlines are measured on the monotonic clock, which wall-clock
	// steps do not bend.
	var sent atomic.Pointer[time.Time]
	stamp := func(at time.Time) { sent.Store(&at) }
	ctx = kube.WithTag(ctx, &kube.RequestTag{
		Throttled: func(request string) { c.env.tracker.Throttled(-1, request) },
		Attempt:   stamp,
	})
	at := func() time.Time { return *sent.Load() }
	annotations := map[string]string{annotationChangedAt: time.Now().UTC().Format(time.RFC3339)}
	if c.obj == nil {
		obj := c.kind.make(metav1.ObjectMeta{Name: c.marker, Namespace: c.env.probe.Namespace, Labels: labels, Annotations: annotations}, c.kind.values[c.next])
		stamp(time.Now())
		out, err := c.kind.api.Create(ctx, obj)
		answered := time.Now()
		if apierrors.IsAlreadyExists(err) {
			// Created by an attempt whose answer was lost: go on with it.
			out, err = c.kind.get(ctx, c.marker)
		}
		if err != nil && runCtx.Err() != nil {
			return // our own shutdown
		}
		if err != nil {
			c.env.tracker.ControllerWrote(c.slot, metrics.VerbCreate, "", 0, at(), answered, err)
			return
		}
		c.obj = out
		c.env.tracker.ControllerWrote(c.slot, metrics.VerbCreate, out.GetUID(), out.GetGeneration(), at(), answered, nil)
		return
	}
	c.next = 1 - c.next
	base := c.base()
	before := max(base.GetGeneration(), c.obj.GetGeneration())
	obj := c.kind.set(base, c.kind.values[c.next])
	// Unconditional, which the apps kinds accept: an update conditional on
	// a copy the controller's status write has outdated would conflict.
	obj.SetResourceVersion("")
	obj.SetAnnotations(mergeAnnotations(obj.GetAnnotations(), annotations))
	stamp(time.Now())
	out, err := c.kind.api.Update(ctx, obj)
	answered := time.Now()
	if err != nil && runCtx.Err() != nil {
		return
	}
	switch {
	case apierrors.IsNotFound(err):
		// Deleted behind the probe's back: made again at the next step.
		c.logger.Warn("the controller's marker object is gone; creating it again", "marker", c.marker)
		c.obj = nil
	case err == nil && out.GetGeneration() <= before:
		// The object held the value already: a change whose answer was
		// lost had set it. Nothing changed, and nothing is owed; the next
		// step sets the other value.
		c.obj = out
		c.logger.Debug("the change found its value already set", "generation", out.GetGeneration())
		return
	case err == nil:
		c.obj = out
		c.env.tracker.ControllerWrote(c.slot, metrics.VerbUpdate, out.GetUID(), out.GetGeneration(), at(), answered, nil)
		return
	}
	c.next = 1 - c.next // not changed: the same value is still to be set
	c.env.tracker.ControllerWrote(c.slot, metrics.VerbUpdate, c.uid(), 0, at(), answered, err)
}

// base is the object a change starts from: the controller writes the
// object too (its status, and once an annotation), so the copy the probe
// last wrote is out of date by the time it changes it again. The watch's
// copy carries what the controller added to the metadata; the spec is the
// probe's alone, and the field a change sets is set anew.
func (c *controllerProbe) base() metav1.Object {
	if item, ok, _ := c.informer.GetStore().GetByKey(c.env.probe.Namespace + "/" + c.marker); ok {
		if m, err := meta.Accessor(item); err == nil && m.GetUID() == c.obj.GetUID() {
			return m
		}
	}
	return c.obj
}

func (c *controllerProbe) uid() (uid types.UID) {
	if c.obj != nil {
		uid = c.obj.GetUID()
	}
	return uid
}

func mergeAnnotations(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, b)
	return out
}

// cleanControllerMarkers deletes the controller markers of the probe that
// no live writer needs: this replica's from earlier runs, and other
// replicas' not changed for orphanAge (a live one is changed every
// interval); with ownToo, this run's as well (at shutdown).
func (cs *controllerProbes) clean(ctx context.Context, ownToo bool) {
	for _, c := range cs.probes {
		// Bounded: it runs between the changes, which a hung list would stop.
		lctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		objs, _, err := kube.ListObjects(lctx, c.kind.api.List, metav1.ListOptions{LabelSelector: markerSelector(cs.probe.Name, "") + "," + LabelController + "=" + c.name})
		cancel()
		if err != nil {
			c.logger.Warn("listing controller markers for cleanup failed", "err", err)
			continue
		}
		for _, o := range objs {
			own := o.GetLabels()[LabelReplica] == cs.replica
			if !(own && (ownToo || o.GetName() != c.marker)) && !orphan(o, cs.replica, cs.orphanAge) {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
			_, _, err := c.kind.api.Delete(dctx, o.GetName(), "")
			cancel()
			if err != nil && !apierrors.IsNotFound(err) {
				c.logger.Warn("deleting a controller marker failed", "marker", o.GetName(), "err", err)
				continue
			}
			if o.GetName() != c.marker {
				c.logger.Info("deleted a stale controller marker", "marker", o.GetName(), "replica", o.GetLabels()[LabelReplica])
			}
		}
		if ownToo {
			// A create in flight when the list was taken may commit after it.
			dctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
			if _, _, err := c.kind.api.Delete(dctx, c.marker, ""); err != nil && !apierrors.IsNotFound(err) {
				c.logger.Warn("deleting the controller marker failed", "marker", c.marker, "err", err)
			}
			cancel()
		}
	}
}
