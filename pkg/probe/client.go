package probe

import (
	"fmt"

	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1client "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Client is the part of kubernetes.Clientset that the exporter uses: the
// API groups of its markers (ConfigMaps, Leases), of apiserver discovery
// (EndpointSlices) and of `check`'s permission preflight.
//
// It exists for the binary's size, and so its resident memory: the binary
// links text/template (kingpin's usage, and golang.org/x/net/trace through
// gRPC and exporter-toolkit's config), whose calls of methods by name make
// the linker keep every exported method of every type that can reach an
// interface. A Clientset reaches a client for each of the 50-odd API
// groups, and through their methods every resource's typed client and
// apply configurations; that was 18 MB of the binary and 7 MiB of RSS.
// Keep the group clients concrete: returned as their interfaces, they would
// bring every method of their own back.
type Client struct {
	core          *corev1client.CoreV1Client
	coordination  *coordinationv1client.CoordinationV1Client
	discovery     *discoveryv1client.DiscoveryV1Client
	authorization *authorizationv1client.AuthorizationV1Client
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
	var cl Client
	if cl.core, err = corev1client.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cl.coordination, err = coordinationv1client.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cl.discovery, err = discoveryv1client.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	if cl.authorization, err = authorizationv1client.NewForConfigAndClient(&config, httpClient); err != nil {
		return nil, err
	}
	return &cl, nil
}

func (c *Client) CoreV1() *corev1client.CoreV1Client { return c.core }

func (c *Client) CoordinationV1() *coordinationv1client.CoordinationV1Client {
	return c.coordination
}

func (c *Client) DiscoveryV1() *discoveryv1client.DiscoveryV1Client { return c.discovery }

func (c *Client) AuthorizationV1() *authorizationv1client.AuthorizationV1Client {
	return c.authorization
}
