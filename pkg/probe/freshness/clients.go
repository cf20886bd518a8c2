package freshness

import (
	"maps"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// clients are one target's HTTP clients, each with a transport, and so
// connections, of its own.
//
// warm carries the checks and the pinned reads: every request of a round
// on one kept connection, as client-go's clients do, so that no check
// waits for a TCP and TLS handshake. A pinned target's is kept between
// rounds; the load-balanced target's is closed before each round (rotate):
// HTTP/2 keeps one connection for as long as it is used, and the load
// balancer chooses an apiserver per connection, so a kept one would have
// the load-balanced checks measure, for the exporter's whole life, the one
// apiserver it first landed on. A new one each round has the load balancer
// choose anew, as for a client that connects then: the load-balanced
// series are the load balancer's mix of apiservers, and the stuck verdict
// there says most of them are. Requests are timed from the moment they have
// their connection, so the new connection's handshake is in no figure, and
// the baseline, sent first, takes the connection's first request.
// perRead carries the load-balanced reads, each on
// a new connection closed after it, so that behind a load balancer each
// read may reach another apiserver, as a client that reconnects does:
// that is where a list goes back in time. Apart, closing one read's
// connection never closes the one the checks keep.
//
// Neither is shared with the marker probe's clients: client-go's transport
// cache gives every rest.Config of equal TLS settings one transport, and so
// one HTTP/2 connection per apiserver, and the checks would then queue
// behind the paths' watch streams, and a read's closed connection would
// take theirs with it.
type clients struct {
	host          string
	warm, perRead *http.Client
}

// newClients builds a target's clients. The apiserver answers 504 at the
// timeout it is asked for; the clients wait a little longer to hear it.
func newClients(cfg *rest.Config, timeout time.Duration) (*clients, error) {
	warm, err := ownClient(cfg, timeout)
	if err != nil {
		return nil, err
	}
	perRead, err := ownClient(cfg, timeout)
	if err != nil {
		return nil, err
	}
	return &clients{host: cfg.Host, warm: warm, perRead: perRead}, nil
}

// ownClient is an HTTP client for cfg whose transport no other client
// shares. client-go cannot compare functions, so a config with a Proxy
// function is never cached: each call makes a transport. The function set
// is the one client-go uses when cfg has none.
func ownClient(cfg *rest.Config, timeout time.Duration) (*http.Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.Proxy == nil {
		cfg.Proxy = http.ProxyFromEnvironment
	}
	cl, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	cl.Timeout = timeout + 2*time.Second
	return cl, nil
}

// rotate closes the load-balanced target's kept connection, idle between
// rounds, so that the round's requests open a new one, wherever the load
// balancer sends it (clients).
func (c *Checker) rotate() {
	c.mu.Lock()
	cl := c.clients[c.opts.LoadBalanced.Host]
	c.mu.Unlock()
	if cl != nil {
		utilnet.CloseIdleConnectionsFor(cl.warm.Transport)
	}
}

// close closes the connections the clients keep.
func (cl *clients) close() {
	utilnet.CloseIdleConnectionsFor(cl.warm.Transport)
	utilnet.CloseIdleConnectionsFor(cl.perRead.Transport)
}

// client is the target's clients, made once per host.
func (c *Checker) client(t Target) (*clients, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[t.Config.Host]; ok {
		return cl, nil
	}
	cl, err := newClients(t.Config, time.Duration(c.opts.Config.Timeout))
	if err != nil {
		return nil, err
	}
	c.clients[t.Config.Host] = cl
	return cl, nil
}

// unbounded is a client on the load-balanced checks' connection without
// their timeout, for discovery and the list of CRDs, whose answers grow
// with the cluster: the checker's every request goes over connections it
// owns, and Close closes.
func (c *Checker) unbounded() (*http.Client, error) {
	cl, err := c.client(Target{Config: c.opts.LoadBalanced})
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: cl.warm.Transport}, nil
}

// dropClients closes and forgets the clients of hosts no target has now:
// an apiserver no longer pinned keeps no connection open.
func (c *Checker) dropClients(targets []Target) {
	now := map[string]bool{}
	for _, t := range targets {
		now[t.Config.Host] = true
	}
	c.mu.Lock()
	var gone []*clients
	maps.DeleteFunc(c.clients, func(host string, cl *clients) bool {
		if now[host] {
			return false
		}
		gone = append(gone, cl)
		return true
	})
	c.mu.Unlock()
	for _, cl := range gone {
		cl.close()
	}
}

// Close closes every connection the checks keep; Run closes them when it
// returns. A Round after Close opens new ones.
func (c *Checker) Close() {
	c.dropClients(nil)
}
