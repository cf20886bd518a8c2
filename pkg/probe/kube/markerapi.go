package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// MarkerAPI is what a probe needs from the apiserver for its marker kind.
type MarkerAPI interface {
	NewObject(meta metav1.ObjectMeta) metav1.Object
	Create(ctx context.Context, obj metav1.Object) (metav1.Object, error)
	Update(ctx context.Context, obj metav1.Object) (metav1.Object, error)
	// PatchMeta sets labels and annotations of the object name, and
	// nothing else, by a merge patch without a resourceVersion: another
	// client's change of the object since cannot make it conflict.
	PatchMeta(ctx context.Context, name string, labels, annotations map[string]string) (metav1.Object, error)
	// Delete deletes the object name, whose state the caller last knew
	// at resourceVersion rv ("": none known, deleted whatever its state).
	// held is the object the apiserver answered with when it did not
	// remove it: its finalizers hold its deletion, which it has marked
	// with a deletionTimestamp. It is nil when the object is gone. With
	// rv, removed is the resourceVersion of the state the deletion
	// removed (or marked deleting): its DELETED carries a later one, and
	// every other client's change of the object carries this one or an
	// earlier one. 0 without rv; judge.RemovedUnknown when the
	// deletion went without its precondition after conflicts.
	Delete(ctx context.Context, name, rv string) (held metav1.Object, removed uint64, err error)
	List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Example() runtime.Object
}

// Object is a typed Kubernetes object such as *corev1.ConfigMap.
type Object interface {
	runtime.Object
	metav1.Object
}

// TypedClient is the shape shared by the generated typed clients, e.g.
// corev1.ConfigMapInterface, so that one implementation serves every kind.
type TypedClient[T Object, L runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
	List(context.Context, metav1.ListOptions) (L, error)
	Watch(context.Context, metav1.ListOptions) (watch.Interface, error)
	// GetClient and GetNamespace send the deletes: the typed clients'
	// Delete discards the answer, which tells a deletion held by
	// finalizers from a completed one.
	GetClient() rest.Interface
	GetNamespace() string
}

// TypedMarkers is the MarkerAPI of one typed client: Make builds an empty
// object of its kind, Resource is its resource's name (configmaps), and
// every write goes as the probe's field manager.
type TypedMarkers[T Object, L runtime.Object] struct {
	Client   TypedClient[T, L]
	Make     func(metav1.ObjectMeta) T
	Resource string
}

func (m TypedMarkers[T, L]) NewObject(om metav1.ObjectMeta) metav1.Object { return m.Make(om) }

func (m TypedMarkers[T, L]) Create(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	out, err := m.Client.Create(ctx, obj.(T), metav1.CreateOptions{FieldManager: judge.FieldManager})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m TypedMarkers[T, L]) Update(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	out, err := m.Client.Update(ctx, obj.(T), metav1.UpdateOptions{FieldManager: judge.FieldManager})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m TypedMarkers[T, L]) PatchMeta(ctx context.Context, name string, labels, annotations map[string]string) (metav1.Object, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}})
	if err != nil {
		return nil, err
	}
	out, err := m.Client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: judge.FieldManager})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete is the typed clients' delete, with its answer: a Status when
// the object is gone, the object itself when its finalizers hold it
// (k8s.io/apiserver's Store.Delete marks it deleting and answers 200 with
// it).
//
// For a ConfigMap or a Lease the Status carries no resourceVersion (their
// stores do not set ReturnDeletedObject), so the deletion's own is not in
// the answer. What the delete removed is made certain instead: with rv, it
// is sent with rv as its precondition, so that it removes that state and
// no other. A conflict says another client changed the object since: the
// object is read again (untimed: it is not the write), by a LIST of its
// name, and the delete sent with the state read, at most deleteTries
// times, then without a precondition, removed judge.RemovedUnknown: the
// judge times no path's DELETED for it.
func (m TypedMarkers[T, L]) Delete(ctx context.Context, name, rv string) (metav1.Object, uint64, error) {
	ns := m.Client.GetNamespace()
	for try := 1; ; try++ {
		opts := &metav1.DeleteOptions{}
		if rv != "" && try <= deleteTries {
			opts.Preconditions = &metav1.Preconditions{ResourceVersion: &rv}
		}
		var attempts int
		out, err := m.Client.GetClient().Delete().NamespaceIfScoped(ns, ns != "").Resource(m.Resource).Name(name).
			Body(opts).Do(counted(ctx, &attempts)).Get()
		removed, _ := strconv.ParseUint(rv, 10, 64)
		if opts.Preconditions == nil && rv != "" {
			removed = judge.RemovedUnknown
		}
		switch {
		case err == nil:
			if held, ok := out.(T); ok {
				return held, removed, nil
			}
			return nil, removed, nil
		case apierrors.IsNotFound(err) && attempts > 1:
			// client-go sent the delete again after a 5xx with
			// Retry-After (the apiserver's answer when etcd does not
			// answer in time): an earlier attempt deleted the object,
			// and the 404 says so. Not another client's deletion.
			return nil, removed, nil
		case opts.Preconditions != nil && apierrors.IsConflict(err):
			// Read by a LIST of the name: the exporter's role may list
			// its markers, not get them.
			objs, _, err := ListObjects(untimed(ctx), func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return m.Client.List(ctx, opts)
			}, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
			if err != nil {
				return nil, 0, err
			}
			if len(objs) == 0 {
				return nil, 0, apierrors.NewNotFound(schema.GroupResource{Resource: m.Resource}, name)
			}
			rv = objs[0].GetResourceVersion()
			continue
		}
		return nil, 0, err
	}
}

// deleteTries bounds the preconditioned deletes of one Delete: another
// client that changes the object faster than it can be read and deleted
// gets it deleted without a precondition.
const deleteTries = 3

// counted is ctx with its tag (if any) also counting the attempts of the
// one request sent with it in n.
func counted(ctx context.Context, n *int) context.Context {
	tag, _ := ctx.Value(tagKey{}).(*RequestTag)
	c := RequestTag{}
	if tag != nil {
		c = *tag
	}
	attempt := c.Attempt
	c.Attempt = func(at time.Time) {
		*n++
		if attempt != nil {
			attempt(at)
		}
	}
	return WithTag(ctx, &c)
}

// untimed is ctx with its tag (if any) but none of its attempts stamped:
// a read the caller's write needed, not the write.
func untimed(ctx context.Context) context.Context {
	tag, _ := ctx.Value(tagKey{}).(*RequestTag)
	if tag == nil {
		return ctx
	}
	c := *tag
	c.Attempt = nil
	return WithTag(ctx, &c)
}

func (m TypedMarkers[T, L]) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return m.Client.List(ctx, opts)
}

func (m TypedMarkers[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return m.Client.Watch(ctx, opts)
}

func (m TypedMarkers[T, L]) Example() runtime.Object { return m.Make(metav1.ObjectMeta{}) }

// NewMarkerAPI is the MarkerAPI of the marker kind (config.KindConfigMap or
// config.KindLease) in namespace.
func NewMarkerAPI(client *Client, kind, namespace string) (MarkerAPI, error) {
	switch kind {
	case config.KindConfigMap:
		return TypedMarkers[*corev1.ConfigMap, *corev1.ConfigMapList]{
			Client:   client.ConfigMaps(namespace),
			Make:     func(om metav1.ObjectMeta) *corev1.ConfigMap { return &corev1.ConfigMap{ObjectMeta: om} },
			Resource: "configmaps",
		}, nil
	case config.KindLease:
		return TypedMarkers[*coordinationv1.Lease, *coordinationv1.LeaseList]{
			Client:   client.Leases(namespace),
			Make:     func(om metav1.ObjectMeta) *coordinationv1.Lease { return &coordinationv1.Lease{ObjectMeta: om} },
			Resource: "leases",
		}, nil
	}
	return nil, fmt.Errorf("kind %q is not supported", kind)
}

// ListObjects lists with opts and returns the items and the list's
// resourceVersion.
func ListObjects(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), opts metav1.ListOptions) ([]metav1.Object, string, error) {
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

// Tagged returns api sending every request with tag in its context, unless
// the request carries a tag of its own.
func Tagged(api MarkerAPI, tag *RequestTag) MarkerAPI { return taggedAPI{api, tag} }

type taggedAPI struct {
	MarkerAPI
	tag *RequestTag
}

func (a taggedAPI) ctx(ctx context.Context) context.Context {
	if ctx.Value(tagKey{}) != nil {
		return ctx
	}
	return WithTag(ctx, a.tag)
}

func (a taggedAPI) Create(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	return a.MarkerAPI.Create(a.ctx(ctx), obj)
}

func (a taggedAPI) Update(ctx context.Context, obj metav1.Object) (metav1.Object, error) {
	return a.MarkerAPI.Update(a.ctx(ctx), obj)
}

func (a taggedAPI) PatchMeta(ctx context.Context, name string, labels, annotations map[string]string) (metav1.Object, error) {
	return a.MarkerAPI.PatchMeta(a.ctx(ctx), name, labels, annotations)
}

func (a taggedAPI) Delete(ctx context.Context, name, rv string) (metav1.Object, uint64, error) {
	return a.MarkerAPI.Delete(a.ctx(ctx), name, rv)
}

func (a taggedAPI) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	return a.MarkerAPI.List(a.ctx(ctx), opts)
}

func (a taggedAPI) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return a.MarkerAPI.Watch(a.ctx(ctx), opts)
}

// ListTimeout bounds one LIST of a path's markers. kube-apiserver ends a
// LIST it has not answered at its own --request-timeout (60 s by default)
// with a 504, so a LIST with no answer by then will not get one: the
// connection is dead, or something between the exporter and the apiserver
// holds the request (a proxy, a load balancer, a half-open TCP connection
// after a network fault). Neither client-go's reflector nor the HTTP
// client bounds a LIST by itself; without this bound the path would wait
// in that relist for ever, up and counting nothing but missed events.
const ListTimeout = 60*time.Second + 10*time.Second

// ErrListTimeout is the cause of a LIST's context when ListTimeout ends it.
var ErrListTimeout = errors.New("the LIST got no answer within the list timeout")
