// Package kube is the exporter's access to the apiserver: a client of the
// few types it uses, the marker kinds behind one interface, and a transport
// that sees every attempt and how watch response bodies end.
package kube

import (
	"errors"
	"fmt"
	"net/http"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is the exporter's typed access to the few resources it uses: its
// markers (ConfigMaps, Leases), apiserver discovery (EndpointSlices),
// `check`'s permission preflight (SelfSubjectAccessReviews) and the
// controller markers (Deployments, ReplicaSets). Its clients are
// client-go's own generic ones (gentype), the very code the generated typed
// clients run, with the same content types and options, as Resource
// (typed.go says why a copy).
//
// It exists for the binary's size, and so its resident memory. The
// generated typed clients (k8s.io/client-go/kubernetes/typed/...) use
// k8s.io/client-go/kubernetes/scheme, which registers every type of all
// 50-odd built-in API groups; registered, each type's methods are reachable
// through runtime.Object and the linker keeps them, with every group's
// apply configurations. And the binary links text/template (kingpin's
// usage, golang.org/x/net/trace through gRPC), whose calls of methods by
// name make the linker keep every exported method of every type that can
// reach an interface: a Clientset, or the typed group clients through that
// scheme, weigh on the binary and its RSS (docs/performance.md has the
// figures). Scheme here registers the five groups the exporter reads and
// writes, and nothing else.
type Client struct {
	core, coordination, discovery, authorization, apps *rest.RESTClient
}

// Scheme holds the API types the exporter decodes: those of Client's
// resources, as kubernetes/scheme holds them for all groups.
var Scheme = runtime.NewScheme()

var (
	Codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	utilruntime.Must(corev1.AddToScheme(Scheme))
	utilruntime.Must(coordinationv1.AddToScheme(Scheme))
	utilruntime.Must(discoveryv1.AddToScheme(Scheme))
	utilruntime.Must(authorizationv1.AddToScheme(Scheme))
	utilruntime.Must(appsv1.AddToScheme(Scheme))
}

// NewClient is kubernetes.NewForConfig for these groups: one HTTP client
// (and so one connection) shared by the groups, and one rate limiter if c
// asks for one.
func NewClient(c *rest.Config) (*Client, error) {
	config := *c
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&config)
	if err != nil {
		return nil, err
	}
	if config.RateLimiter == nil && config.QPS > 0 {
		if config.Burst <= 0 {
			return nil, fmt.Errorf("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(config.QPS, config.Burst)
	}
	// As each generated group client's setConfigDefaults does.
	group := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		gc := config
		gc.GroupVersion = &gv
		gc.APIPath = apiPath
		gc.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(Scheme, Codecs).WithoutConversion()
		return rest.RESTClientForConfigAndClient(&gc, httpClient)
	}
	var cl Client
	if cl.core, err = group(corev1.SchemeGroupVersion, "/api"); err != nil {
		return nil, err
	}
	if cl.coordination, err = group(coordinationv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, err
	}
	if cl.discovery, err = group(discoveryv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, err
	}
	if cl.authorization, err = group(authorizationv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, err
	}
	if cl.apps, err = group(appsv1.SchemeGroupVersion, "/apis"); err != nil {
		return nil, err
	}
	return &cl, nil
}

// RESTClient is the core group's client, for requests such as /version.
func (c *Client) RESTClient() rest.Interface { return c.core }

func (c *Client) ConfigMaps(namespace string) *ResourceWithList[*corev1.ConfigMap, *corev1.ConfigMapList] {
	return newResourceWithList("configmaps", c.core, namespace,
		func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
		func() *corev1.ConfigMapList { return &corev1.ConfigMapList{} })
}

func (c *Client) Leases(namespace string) *ResourceWithList[*coordinationv1.Lease, *coordinationv1.LeaseList] {
	return newResourceWithList("leases", c.coordination, namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} },
		func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} })
}

func (c *Client) EndpointSlices(namespace string) *ResourceWithList[*discoveryv1.EndpointSlice, *discoveryv1.EndpointSliceList] {
	return newResourceWithList("endpointslices", c.discovery, namespace,
		func() *discoveryv1.EndpointSlice { return &discoveryv1.EndpointSlice{} },
		func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} })
}

func (c *Client) SelfSubjectAccessReviews() *Resource[*authorizationv1.SelfSubjectAccessReview] {
	return newResource("selfsubjectaccessreviews", c.authorization, "",
		func() *authorizationv1.SelfSubjectAccessReview { return &authorizationv1.SelfSubjectAccessReview{} })
}

// Deployments and ReplicaSets are the marker objects of the controller
// probes (controller.go).
func (c *Client) Deployments(namespace string) *ResourceWithList[*appsv1.Deployment, *appsv1.DeploymentList] {
	return newResourceWithList("deployments", c.apps, namespace,
		func() *appsv1.Deployment { return &appsv1.Deployment{} },
		func() *appsv1.DeploymentList { return &appsv1.DeploymentList{} })
}

func (c *Client) ReplicaSets(namespace string) *ResourceWithList[*appsv1.ReplicaSet, *appsv1.ReplicaSetList] {
	return newResourceWithList("replicasets", c.apps, namespace,
		func() *appsv1.ReplicaSet { return &appsv1.ReplicaSet{} },
		func() *appsv1.ReplicaSetList { return &appsv1.ReplicaSetList{} })
}

// InstrumentedAPI is the marker API over a client whose transport counts
// throttling and observes watch bodies (see instrument).
func InstrumentedAPI(config *rest.Config, kind, namespace string) (MarkerAPI, error) {
	if config == nil {
		return nil, errors.New("no apiserver configuration")
	}
	client, err := InstrumentedClient(config)
	if err != nil {
		return nil, err
	}
	return NewMarkerAPI(client, kind, namespace)
}

// OwnConnection is a copy of c whose client has connections of its own.
// This package shares a client per configuration, and client-go shares a
// transport, and so its HTTP/2 connection, between configurations whose
// TLS settings are equal, unless a Proxy function is set (functions have
// no equality): ProxyFromEnvironment, what client-go uses when none is.
func OwnConnection(c *rest.Config) *rest.Config {
	c = rest.CopyConfig(c)
	if c.Proxy == nil {
		c.Proxy = http.ProxyFromEnvironment
	}
	return c
}

// clients holds one instrumented client per configuration. client-go does
// not share transports between configs that wrap theirs, so a client per
// probe would be a connection per probe; probes built from one
// configuration share one client and its connection.
var clients sync.Map // *rest.Config -> *Client

func InstrumentedClient(config *rest.Config) (*Client, error) {
	if c, ok := clients.Load(config); ok {
		return c.(*Client), nil
	}
	wrapped := rest.CopyConfig(config)
	wrapped.Wrap(Instrument)
	client, err := NewClient(wrapped)
	if err != nil {
		return nil, err
	}
	c, _ := clients.LoadOrStore(config, client)
	return c.(*Client), nil
}
