package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// MarkerVerbs are what a probe does with its markers, in their namespace:
// the verbs its Role must grant, and no other (the chart's Role and `check`'s
// preflight read them).
var MarkerVerbs = []string{"list", "watch", "create", "patch", "delete"}

// DiscoveryVerbs are what `apiservers: discover` does with the EndpointSlices
// of the kubernetes Service, in namespace default.
var DiscoveryVerbs = []string{"list", "watch"}

// MarkerResource is the API group and resource of a marker kind, a
// controller's marker kind (ControllerKind) too.
func MarkerResource(kind string) (group, resource string) {
	switch kind {
	case config.KindLease:
		return coordinationv1.GroupName, "leases"
	case ControllerKind(metrics.ControllerDeployment):
		return ControllerResource(metrics.ControllerDeployment)
	case ControllerKind(metrics.ControllerReplicaSet):
		return ControllerResource(metrics.ControllerReplicaSet)
	}
	return "", "configmaps"
}

// Labels and annotations on marker objects. Probe and replica labels keep
// probes and exporter replicas from ever matching each other's markers, and
// let each watch select only its own.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "watchprobe"
	LabelProbe     = "watchprobe.io/probe"
	LabelReplica   = "watchprobe.io/replica"
	// AnnotationSeq carries the write's sequence number, which the
	// judgement matches events by.
	AnnotationSeq = judge.AnnotationSeq
	// FieldManager is the field manager of every write of the probe's, so
	// that managedFields tell its changes from other clients'.
	FieldManager      = judge.FieldManager
	markerNamePattern = "watchprobe-%s-%s-%s-%d"
)

// markerNamePrefix starts the name of every marker of one run of a
// probe's replica: watchprobe-<probe>-<replica>-<run>-.
func markerNamePrefix(probe, replica, run string) string {
	return strings.TrimSuffix(fmt.Sprintf(markerNamePattern, probe, replica, run, 0), "0")
}

// markerSelector selects one probe's markers, of one replica if given.
func markerSelector(probe, replica string) string {
	set := labels.Set{LabelManagedBy: ManagedByValue, LabelProbe: probe}
	if replica != "" {
		set[LabelReplica] = replica
	}
	return labels.SelectorFromSet(set).String()
}

// markerAPI is what a probe needs from the apiserver for its marker kind.
type markerAPI interface {
	newObject(meta metav1.ObjectMeta) metav1.Object
	create(ctx context.Context, obj metav1.Object) (metav1.Object, error)
	update(ctx context.Context, obj metav1.Object) (metav1.Object, error)
	// patchMeta sets labels and annotations of the object name, and
	// nothing else, by a merge patch without a resourceVersion: another
	// client's change of the object since cannot make it conflict.
	patchMeta(ctx context.Context, name string, labels, annotations map[string]string) (metav1.Object, error)
	delete(ctx context.Context, name string) error
	list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	example() runtime.Object
}

// kubeObject is a typed Kubernetes object such as *corev1.ConfigMap.
type kubeObject interface {
	runtime.Object
	metav1.Object
}

// typedClient is the shape shared by the generated typed clients, e.g.
// corev1.ConfigMapInterface, so that one implementation serves every kind.
type typedClient[T kubeObject, L runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
}

type typedMarkers[T kubeObject, L runtime.Object] struct {
	client typedClient[T, L]
	make   func(metav1.ObjectMeta) T
}

func (m typedMarkers[T, L]) newObject(om metav1.ObjectMeta) metav1.Object { return m.make(om) }

func (m typedMarkers[T, L]) create(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	out, err := m.client.Create(ctx, obj.(T), metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m typedMarkers[T, L]) update(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	out, err := m.client.Update(ctx, obj.(T), metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m typedMarkers[T, L]) patchMeta(ctx context.Context, name string, labels, annotations map[string]string) (metav1.Object, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}})
	if err != nil {
		return nil, err
	}
	out, err := m.client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m typedMarkers[T, L]) delete(ctx context.Context, name string) error {
	return m.client.Delete(ctx, name, metav1.DeleteOptions{})
}

func (m typedMarkers[T, L]) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return m.client.List(ctx, opts)
}

func (m typedMarkers[T, L]) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return m.client.Watch(ctx, opts)
}

func (m typedMarkers[T, L]) example() runtime.Object { return m.make(metav1.ObjectMeta{}) }

func newMarkerAPI(client *Client, kind, namespace string) (markerAPI, error) {
	switch kind {
	case config.KindConfigMap:
		return typedMarkers[*corev1.ConfigMap, *corev1.ConfigMapList]{
			client: client.ConfigMaps(namespace),
			make:   func(om metav1.ObjectMeta) *corev1.ConfigMap { return &corev1.ConfigMap{ObjectMeta: om} },
		}, nil
	case config.KindLease:
		return typedMarkers[*coordinationv1.Lease, *coordinationv1.LeaseList]{
			client: client.Leases(namespace),
			make:   func(om metav1.ObjectMeta) *coordinationv1.Lease { return &coordinationv1.Lease{ObjectMeta: om} },
		}, nil
	}
	return nil, fmt.Errorf("kind %q is not supported", kind)
}

// MarkerNames lists the names of the markers of kind in namespace that
// replica's probes wrote and have not deleted.
func MarkerNames(ctx context.Context, client *Client, kind, namespace, replica string) ([]string, error) {
	api, err := newMarkerAPI(client, kind, namespace)
	if err != nil {
		return nil, err
	}
	selector := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelReplica: replica}).String()
	objs, _, err := listObjects(ctx, api.list, metav1.ListOptions{LabelSelector: selector})
	names := make([]string, 0, len(objs))
	for _, o := range objs {
		names = append(names, o.GetName())
	}
	return names, err
}

// listObjects lists with opts and returns the items and the list's
// resourceVersion.
func listObjects(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), opts metav1.ListOptions) ([]metav1.Object, string, error) {
	obj, err := list(ctx, opts)
	if err != nil {
		return nil, "", err
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return nil, "", err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, "", err
	}
	objs := make([]metav1.Object, 0, len(items))
	for _, item := range items {
		o, err := meta.Accessor(item)
		if err != nil {
			return nil, "", err
		}
		objs = append(objs, o)
	}
	return objs, lm.GetResourceVersion(), nil
}

// lastRun is the latest run ID handed out, in nanoseconds.
var lastRun atomic.Int64

// newRunID tells this run's markers from an earlier run's, of this process
// or of another with the same replica name (a restarted container keeps
// its pod's name): the start's instant in nanoseconds, made unique within
// the process, so that a probe a reload restarts within the same second
// never takes an earlier run's markers for its own.
func newRunID() string {
	now := time.Now().UnixNano()
	for {
		last := lastRun.Load()
		next := max(now, last+1)
		if lastRun.CompareAndSwap(last, next) {
			return strconv.FormatInt(next, 36)
		}
	}
}

// MarkerSelector selects this probe's markers (those of its replica).
func (p *Probe) MarkerSelector() string { return markerSelector(p.cfg.Name, p.opts.Replica) }
