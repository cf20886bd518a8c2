package probe

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/paths"
)

// kubernetesService selects the EndpointSlices of the `kubernetes` Service,
// whose endpoints are the apiservers.
const kubernetesService = discoveryv1.LabelServiceName + "=kubernetes"

// pinnedPaths keeps one watch path per apiserver: started when an apiserver
// appears, retired when it is gone.
type pinnedPaths struct {
	pinnedEnv
	mu     sync.Mutex
	byAddr map[string]*pinned
	// reconciled: the apiservers have been listed once.
	reconciled bool
}

// pinned is one apiserver's path.
type pinned struct {
	addr   string
	slot   int
	cancel context.CancelFunc
	done   chan struct{}
	// withdrawn is when the apiserver's endpoint left the EndpointSlice,
	// zero while it is listed.
	withdrawn time.Time
	// unreachableAt is when a connection to it last could not be opened
	// (refused, no route, dial timeout), in Unix nanoseconds. After its
	// withdrawal, that means the apiserver is gone (stopped, or its node
	// lost). A frozen or wedged apiserver still accepts connections, and
	// stays.
	unreachableAt atomic.Int64
}

// pathSlots are the tracker's entry points for paths that come and go.
type pathSlots interface {
	AddPath(kind, apiserver string, now time.Time) int
	RemovePath(slot int, now time.Time)
	WasLive(slot int) bool
}

// pathBuilder makes a path of kind in the tracker's slot, receiving the
// probe's markers through api; apiserver names the apiserver it is pinned
// to, if any, and failed hears every request of it that failed.
type pathBuilder func(kind string, slot int, api kube.MarkerAPI, apiserver string, failed func(error)) (paths.Path, error)

// pinnedEnv is what pinned paths are built from.
type pinnedEnv struct {
	cfg config.APIServersConfig
	// config reaches the apiservers through the load balancer; kind and
	// namespace are the markers'.
	config          *rest.Config
	kind, namespace string
	slots           pathSlots
	build           pathBuilder
	logger          *slog.Logger
	now             func() time.Time
}

func newPinnedPaths(env pinnedEnv) *pinnedPaths {
	return &pinnedPaths{pinnedEnv: env, byAddr: map[string]*pinned{}}
}

// unreachable tells an error of opening a connection: the apiserver's
// address answers no more.
func unreachable(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// run follows the apiservers until ctx ends, then stops every pinned path.
func (pp *pinnedPaths) run(ctx context.Context) {
	defer pp.stopAll()
	if !pp.cfg.Discover {
		pp.reconcile(ctx, pp.cfg.Endpoints, pp.now())
		<-ctx.Done()
		return
	}
	client, err := kube.InstrumentedClient(pp.config)
	if err != nil {
		pp.logger.Error("cannot discover apiservers", "err", err)
		return
	}
	// The informer an informer factory would build for EndpointSlices
	// (informers/discovery/v1), without the factory: it links every API
	// group's informers and listers (see Client).
	eps := client.EndpointSlices(metav1.NamespaceDefault)
	lw := kube.FilteredListWatch(eps.List, eps.Watch, func(opts *metav1.ListOptions) { opts.LabelSelector = kubernetesService })
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, eps),
		&discoveryv1.EndpointSlice{}, cache.SharedIndexInformerOptions{})
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		pp.logger.Warn("watching the kubernetes EndpointSlices in default failed; per-apiserver paths do not follow apiservers until it works (the exporter needs list and watch on endpointslices there)", "err", err)
	}); err != nil {
		pp.logger.Error("cannot discover apiservers", "err", err)
		return
	}
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, DeleteFunc: poke, UpdateFunc: func(_, n any) { poke(n) },
	}); err != nil {
		pp.logger.Error("cannot discover apiservers", "err", err)
		return
	}
	var informerDone sync.WaitGroup
	defer informerDone.Wait()
	informerDone.Go(func() { inf.RunWithContext(ctx) })
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-ticker.C:
		}
		if !inf.HasSynced() {
			continue
		}
		var list []*discoveryv1.EndpointSlice
		for _, o := range inf.GetStore().List() {
			list = append(list, o.(*discoveryv1.EndpointSlice))
		}
		pp.reconcile(ctx, endpointAddresses(list), pp.now())
	}
}

// endpointAddresses lists host:port of every endpoint not known to be
// unready, as kube-proxy would route to them.
func endpointAddresses(list []*discoveryv1.EndpointSlice) []string {
	var addrs []string
	for _, s := range list {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				for _, port := range s.Ports {
					if port.Port != nil {
						addrs = append(addrs, net.JoinHostPort(a, strconv.Itoa(int(*port.Port))))
					}
				}
			}
		}
	}
	slices.Sort(addrs)
	return slices.Compact(addrs)
}

// reconcile starts a path for each new apiserver, marks the paths of
// apiservers no longer listed withdrawn, and retires withdrawn paths whose
// apiserver refuses connections or has been gone longer than RetireAfter.
func (pp *pinnedPaths) reconcile(ctx context.Context, addrs []string, now time.Time) {
	// A retired path is waited for without the lock: its goroutine may
	// take a while to return, and synced, addrs and the series timers
	// must not wait for it.
	var retiring []*pinned
	defer func() {
		for _, p := range retiring {
			pp.retire(p)
		}
	}()
	pp.mu.Lock()
	defer pp.mu.Unlock()
	pp.reconciled = true
	for _, addr := range addrs {
		if p, ok := pp.byAddr[addr]; ok {
			p.withdrawn = time.Time{}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p, err := pp.start(ctx, addr)
		if err != nil {
			pp.logger.Error("cannot watch through apiserver", "apiserver", addr, "err", err)
			continue
		}
		pp.byAddr[addr] = p
		pp.logger.Info("watching through apiserver", "apiserver", addr)
	}
	for addr, p := range pp.byAddr {
		if slices.Contains(addrs, addr) {
			continue
		}
		if p.withdrawn.IsZero() {
			p.withdrawn = now
		}
		gone := p.unreachableAt.Load() > p.withdrawn.UnixNano()
		if gone || now.Sub(p.withdrawn) > time.Duration(pp.cfg.RetireAfter) {
			retiring = append(retiring, p)
			delete(pp.byAddr, addr)
			pp.logger.Info("apiserver left; its path is removed, its series follow", "apiserver", addr, "unreachable", gone)
		}
	}
}

// start builds and runs the watch path pinned to addr.
func (pp *pinnedPaths) start(ctx context.Context, addr string) (*pinned, error) {
	client, err := kube.NewClient(pinnedConfig(pp.config, addr, pp.cfg.ServerName))
	if err != nil {
		return nil, err
	}
	api, err := kube.NewMarkerAPI(client, pp.kind, pp.namespace)
	if err != nil {
		return nil, err
	}
	slot := pp.slots.AddPath(metrics.PathAPIServer, addr, pp.now())
	p := &pinned{addr: addr, slot: slot, done: make(chan struct{})}
	// Whether its apiserver still answers says whether it is gone.
	failed := func(err error) {
		if unreachable(err) {
			p.unreachableAt.Store(pp.now().UnixNano())
		}
	}
	path, err := pp.build(metrics.PathAPIServer, slot, api, addr, failed)
	if err != nil {
		pp.slots.RemovePath(slot, pp.now())
		return nil, err
	}
	var pathCtx context.Context
	pathCtx, p.cancel = context.WithCancel(ctx)
	go func() {
		defer close(p.done)
		defer path.Close()
		path.Run(pathCtx)
	}()
	return p, nil
}

// retire stops p's path, which is no longer in byAddr, and, once its
// goroutine has returned and can no longer report, removes it from the
// tracker (whose outcome tells the sinks). The caller does not hold mu.
func (pp *pinnedPaths) retire(p *pinned) {
	p.cancel()
	<-p.done
	pp.slots.RemovePath(p.slot, pp.now())
}

// stopAll stops every pinned path; series are left to the caller, which
// deletes a removed probe's.
func (pp *pinnedPaths) stopAll() {
	pp.mu.Lock()
	running := slices.Collect(maps.Values(pp.byAddr))
	pp.mu.Unlock()
	for _, p := range running {
		p.cancel()
	}
	// A retired path's goroutine has returned already; these are the rest,
	// waited for without the lock, as retire does.
	for _, p := range running {
		<-p.done
	}
}

// synced reports whether the apiservers are known and every path pinned to
// one has been live once, so that the first writes are not missed merely
// because the paths were still starting.
func (pp *pinnedPaths) synced() bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if !pp.reconciled {
		return false
	}
	for _, p := range pp.byAddr {
		if !pp.slots.WasLive(p.slot) {
			return false
		}
	}
	return true
}

// addrs lists the apiservers that have a path: the log, and the freshness
// checks that read through each.
func (pp *pinnedPaths) addrs() []string {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	var out []string
	for a := range pp.byAddr {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// pinnedConfig is config dialled at one apiserver's address. The serving
// certificate is verified against serverName: a certificate names the
// Service, not necessarily each address. Connections are per address, so
// each apiserver's watch is its own.
func pinnedConfig(config *rest.Config, addr, serverName string) *rest.Config {
	c := rest.CopyConfig(config)
	c.Host = "https://" + addr
	c.APIPath = ""
	c.TLSClientConfig.ServerName = serverName
	c.Wrap(kube.Instrument)
	return c
}

// PinnedAPIServers lists the apiservers the probe has a pinned path to now.
func (p *Probe) PinnedAPIServers() []string {
	if p.pinned == nil {
		return nil
	}
	return p.pinned.addrs()
}

// pinnedAddrs lists the apiservers with a pinned path now, nil without
// pinned paths.
func (p *Probe) pinnedAddrs() func() []string {
	if p.pinned == nil {
		return nil
	}
	return p.pinned.addrs
}
