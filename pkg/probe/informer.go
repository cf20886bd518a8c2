package probe

import (
	"context"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// informerPath receives markers as a controller does: a client-go shared
// informer (LIST or WatchList, then WATCH, through the DeltaFIFO) with its
// handler called when the object reaches the controller's code.
type informerPath struct {
	informer cache.SharedIndexInformer
}

func newInformerPath(api markerAPI, selector string, observe observeFunc, logger *slog.Logger) (*informerPath, error) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return api.list(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return api.watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, api.example(), cache.SharedIndexInformerOptions{})
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
	return &informerPath{informer: inf}, nil
}

func (p *informerPath) run(ctx context.Context) { p.informer.RunWithContext(ctx) }

func (p *informerPath) synced() bool { return p.informer.HasSynced() }
