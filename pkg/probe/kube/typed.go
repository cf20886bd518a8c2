package kube

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Resource is a typed client of one kind, namespaced or not: client-go's
// generic typed client (k8s.io/client-go/gentype, the code the generated
// typed clients run) without server-side apply, making the same requests.
// gentype's package also holds client-go's fake clients, which link
// k8s.io/client-go/testing and with it strategic merge patch, managed
// fields, structured-merge-diff and the OpenAPI models: 2.5 MB of the
// binary, and 1 MiB of the exporter's resident memory, for code no binary
// of watchprobe runs.
type Resource[T Object] struct {
	resource  string
	client    rest.Interface
	namespace string // "" for a cluster-scoped kind
	newObject func() T
}

// ResourceWithList is a Resource that lists, of list type L.
type ResourceWithList[T Object, L runtime.Object] struct {
	*Resource[T]
	newList func() L
}

func newResource[T Object](resource string, client rest.Interface, namespace string, newObject func() T) *Resource[T] {
	return &Resource[T]{resource: resource, client: client, namespace: namespace, newObject: newObject}
}

func newResourceWithList[T Object, L runtime.Object](resource string, client rest.Interface, namespace string, newObject func() T, newList func() L) *ResourceWithList[T, L] {
	return &ResourceWithList[T, L]{newResource(resource, client, namespace, newObject), newList}
}

// request is a request of verb for the resource: in protobuf, which every
// kind of Client's has, as the generated clients ask for them.
func (c *Resource[T]) request(r *rest.Request) *rest.Request {
	return r.UseProtobufAsDefaultIfPreferred(true).
		NamespaceIfScoped(c.namespace, c.namespace != "").
		Resource(c.resource)
}

// timeout is a list or watch request's timeout: its timeoutSeconds.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// GetClient is the REST client the requests go over.
func (c *Resource[T]) GetClient() rest.Interface { return c.client }

// GetNamespace is the namespace, "" for a cluster-scoped kind.
func (c *Resource[T]) GetNamespace() string { return c.namespace }

func (c *Resource[T]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	result := c.newObject()
	err := c.request(c.client.Get()).Name(name).VersionedParams(&opts, parameterCodec).Do(ctx).Into(result)
	return result, err
}

func (c *ResourceWithList[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	list := c.newList()
	err := c.request(c.client.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Do(ctx).Into(list)
	return list, err
}

func (c *Resource[T]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.request(c.client.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Watch(ctx)
}

func (c *Resource[T]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	result := c.newObject()
	err := c.request(c.client.Post()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(result)
	return result, err
}

func (c *Resource[T]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	result := c.newObject()
	err := c.request(c.client.Put()).Name(obj.GetName()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(result)
	return result, err
}

func (c *Resource[T]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	result := c.newObject()
	err := c.request(c.client.Put()).Name(obj.GetName()).SubResource("status").VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(result)
	return result, err
}

func (c *Resource[T]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.request(c.client.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

func (c *ResourceWithList[T, L]) DeleteCollection(ctx context.Context, opts metav1.DeleteOptions, listOpts metav1.ListOptions) error {
	return c.request(c.client.Delete()).VersionedParams(&listOpts, parameterCodec).Timeout(timeout(listOpts)).Body(&opts).Do(ctx).Error()
}

func (c *Resource[T]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	result := c.newObject()
	err := c.request(c.client.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, parameterCodec).Body(data).Do(ctx).Into(result)
	return result, err
}
