package main

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
)

// configMaps is the ConfigMaps of probe i's namespace: each probe has its
// own, as the bench gives the exporter's probes.
func (c *client) configMaps(i int) typedcorev1.ConfigMapInterface {
	return c.kube.CoreV1().ConfigMaps(c.o.namespace + "-" + probeName(i))
}

// selector selects probe i's markers.
func selector(i int) string {
	return labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelProbe: probeName(i), labelReplica: "bare"}).String()
}

// arrived stamps an arrival and counts it in n.
func (c *client) arrived(n *atomic.Int64) time.Time {
	at := time.Now()
	c.lastArrival.Store(at.UnixNano())
	n.Add(1)
	return at
}

// newInformer is probe i's shared informer, built as the exporter builds
// its own: LIST or WatchList, then WATCH, through the DeltaFIFO, no resync.
func (c *client) newInformer(i int) cache.SharedIndexInformer {
	cms, sel := c.configMaps(i), selector(i)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = sel
			return cms.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = sel
			return cms.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { c.informerArrived(i, watch.Added, obj) },
		UpdateFunc: func(_, obj any) { c.informerArrived(i, watch.Modified, obj) },
		DeleteFunc: func(obj any) { c.informerArrived(i, watch.Deleted, obj) },
	})
	return inf
}

func (c *client) informerArrived(probe int, ev watch.EventType, obj any) {
	at := c.arrived(&c.informerEvents)
	if c.series != nil {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		c.series.arrived(probe, "informer", ev, obj, at)
	}
}

// rawWatch is probe i's raw watch: it lists once, then watches, resuming
// from the newest resourceVersion seen after every end, and lists again
// only when that version has expired: the exporter's watch path, without
// the judging. It sets listed once it has listed.
func (c *client) rawWatch(ctx context.Context, i int, listed *atomic.Bool) {
	cms, sel := c.configMaps(i), selector(i)
	var rv string
	retry := 100 * time.Millisecond
	for ctx.Err() == nil {
		if rv == "" {
			list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				sleep(ctx, &retry)
				continue
			}
			rv = list.ResourceVersion
			listed.Store(true)
		}
		timeout := c.o.watchTimeout
		secs := int64((timeout + rand.N(timeout+1)).Seconds())
		w, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &secs})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			sleep(ctx, &retry)
			continue
		}
		var expired bool
		rv, expired = c.consume(ctx, w, rv, i)
		if expired {
			rv = ""
		}
		retry = 100 * time.Millisecond
	}
}

// consume reads one watch of probe's until it ends, and returns the newest
// resourceVersion seen and whether the watch ended because rv expired.
func (c *client) consume(ctx context.Context, w watch.Interface, rv string, probe int) (string, bool) {
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, false
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, false
		}
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			at := c.arrived(&c.watchEvents)
			if c.series != nil {
				c.series.arrived(probe, "watch", ev.Type, ev.Object, at)
			}
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			return rv, apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
		}
		if m, err := meta.Accessor(ev.Object); err == nil {
			rv = m.GetResourceVersion()
		}
	}
}

func sleep(ctx context.Context, d *time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(*d):
	}
	*d = min(2**d, 10*time.Second)
}
