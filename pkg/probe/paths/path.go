package paths

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// Path is one way of receiving marker events from the apiserver. It tells
// the judgement what it receives and what its streams do through its
// handle, and nothing else.
type Path interface {
	// Run receives events until ctx ends.
	Run(ctx context.Context)
	// Synced reports whether the path has received its initial state and is
	// now waiting for new events.
	Synced() bool
	// Close releases what the path holds; it is called once, after run has
	// returned or instead of it.
	Close()
}

// Env is what a path is built from.
type Env struct {
	Handle judge.Handle
	// API lists and watches the probe's markers; Selector selects them by
	// label, FieldSelector by field: a node agent's watch of its one
	// marker by metadata.name, which the watch cache dispatches by name.
	API           kube.MarkerAPI
	Selector      string
	FieldSelector string
	WatchTimeout  time.Duration
	// Etcd reaches Etcd, for the Etcd path; etcdPrefix is the key prefix
	// of the markers of this run.
	Etcd       config.EtcdConfig
	EtcdPrefix string
	Logger     *slog.Logger
	// Failed, if set, hears every list or watch request that Failed.
	Failed func(error)
}

// pathKind builds one kind of path.
type pathKind struct {
	name string
	make func(Env) (Path, error)
}

// pathKinds are the kinds of path on the apiserver. The configured ones
// are those named in a probe's paths (KnownPaths); the apiserver kind is a
// watch pinned to one apiserver, which a probe's apiservers setting adds
// and removes. The etcd kind is etcdpath.New: a package of its own, so
// that a binary without it (the node agent) carries no etcd client.
var pathKinds = []pathKind{
	{metrics.PathInformer, newInformerPath},
	{metrics.PathWatch, newWatchPath},
	{metrics.PathAPIServer, newWatchPath},
}

// New builds a path of kind name.
func New(name string, env Env) (Path, error) {
	for _, k := range pathKinds {
		if k.name == name {
			return k.make(env)
		}
	}
	return nil, fmt.Errorf("%q is not a path", name)
}

// timeoutSlack absorbs the rounding of the requested timeout to whole
// seconds and the instants at which client and server start their clocks.
const timeoutSlack = 500 * time.Millisecond

// requestTimeout picks a watch's requested lifetime, between base and twice
// base, as client-go's reflector does, so that watches do not all end at once.
func requestTimeout(base time.Duration) time.Duration {
	return (base + rand.N(base+1)).Truncate(time.Second)
}

// Base is what every path does the same way: its list and watch
// requests, tagged so the transport can count throttling and observe the
// stream's body, and the bookkeeping of relists and stream ends.
type Base struct {
	judge.Handle
	api           kube.MarkerAPI
	selector      string
	fieldSelector string
	watchTimeout  time.Duration
	logger        *slog.Logger
	// failed, if set, hears every list or watch request that failed.
	failed func(error)

	mu         sync.Mutex
	listed     bool      // the initial relist has begun
	relisting  bool      // a relist has begun and not completed
	relistFrom time.Time // when it began
	nextReason string    // why the next relist happens
	// wlRefused: the apiserver refused the latest WatchList request as a
	// request form, which the log has said.
	wlRefused bool
}

func NewBase(env Env) *Base {
	return &Base{
		Handle: env.Handle, api: env.API, selector: env.Selector, fieldSelector: env.FieldSelector,
		watchTimeout: env.WatchTimeout, logger: env.Logger, nextReason: metrics.RelistError,
		failed: env.Failed,
	}
}

// list sends one LIST of the path's markers, bounded by the list timeout:
// one that gets no answer in time is a failed request (code 0, no
// response), and the path retries it as it retries any failed LIST.
func (p *Base) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.LabelSelector, opts.FieldSelector = p.selector, p.fieldSelector
	listCtx, cancel := context.WithTimeoutCause(ctx, kube.ListTimeout, fmt.Errorf("%w (%s)", kube.ErrListTimeout, kube.ListTimeout))
	defer cancel()
	list, err := p.api.List(kube.WithTag(listCtx, &kube.RequestTag{Throttled: p.Throttled}), opts)
	if err != nil && ctx.Err() == nil {
		p.failedRequest(metrics.RequestList, err)
	}
	return list, err
}

// ErrNoStream stands for a watch request that ended without a response:
// client-go then hands out an empty watch rather than the error.
var ErrNoStream = errors.New("the watch request got no response: connection reset, EOF or timeout")

// watch sends one watch request. A request that fails before a stream
// exists is not a stream: it is counted apart and has no lifetime. When
// client-go answers a connection lost before any response with an empty
// watch and no error, the stream is nil and the empty watch is returned
// for the caller to hand on or stop.
func (p *Base) watch(ctx context.Context, opts metav1.ListOptions) (*stream, watch.Interface, error) {
	requested := requestTimeout(p.watchTimeout)
	secs := int64(requested.Seconds())
	opts.LabelSelector, opts.FieldSelector = p.selector, p.fieldSelector
	opts.AllowWatchBookmarks = true
	opts.TimeoutSeconds = &secs
	s := &stream{path: p, requested: requested}
	w, err := p.api.Watch(kube.WithTag(ctx, &kube.RequestTag{Throttled: p.Throttled, Stream: &s.body}), opts)
	watchList := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	switch {
	case err != nil && ctx.Err() == nil && watchList && WatchListRefused(err):
		p.watchListRefused(err)
		return nil, nil, err
	case err != nil:
		if ctx.Err() == nil {
			p.failedRequest(metrics.RequestWatch, err)
		}
		return nil, nil, err
	case watchList:
		p.watchListServed()
	}
	opened, start := s.body.Started()
	if !opened {
		if ctx.Err() == nil {
			p.failedRequest(metrics.RequestWatch, ErrNoStream)
		}
		return nil, w, nil
	}
	s.start = start
	return s, w, nil
}

// failedRequest reports a list or watch request that failed.
func (p *Base) failedRequest(request string, err error) {
	p.RequestFailed(request, err, time.Now())
	if p.failed != nil {
		p.failed(err)
	}
}

// Logger is the path's logger.
func (p *Base) Logger() *slog.Logger { return p.logger }

// Synced reports whether the path has been live once: a stream open and
// caught up. The informer path answers with its informer's own sync.
func (p *Base) Synced() bool { return p.WasLive() }

// Close releases nothing: a path on the apiserver shares its client.
func (p *Base) Close() {}

// WatchListRefused tells a WatchList request the apiserver refused as a
// request form before anything else: kube-apiserver validates the options
// first (k8s.io/apiserver handlers: ValidateListOptions), and with its
// WatchList gate off (the default in 1.31 and 1.33) answers 422
// "sendInitialEvents is forbidden for watch unless the WatchList feature
// gate is enabled"; before 1.27 it refused resourceVersionMatch on a watch
// the same way. client-go's reflector then lists with LIST, as it does on
// every relist while the server refuses.
func WatchListRefused(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	st := status.Status()
	if st.Code != http.StatusUnprocessableEntity && st.Code != http.StatusBadRequest {
		return false
	}
	msg := strings.ToLower(st.Message)
	return strings.Contains(msg, "sendinitialevents") || strings.Contains(msg, "resourceversionmatch")
}

// watchListRefused notes a refused WatchList: no failure (the informer
// lists instead, and nothing is lost), said once while it lasts.
func (p *Base) watchListRefused(err error) {
	p.mu.Lock()
	said := p.wlRefused
	p.wlRefused = true
	p.mu.Unlock()
	if !said {
		p.logger.Info("the apiserver refuses WatchList requests (its WatchList feature gate is off, the default in kube-apiserver 1.31 and 1.33): the informer path lists with LIST on each relist, counted with mode=\"list\"", "err", err)
	}
}

// watchListServed ends a refusal: said again should it come back.
func (p *Base) watchListServed() {
	p.mu.Lock()
	p.wlRefused = false
	p.mu.Unlock()
}

// RelistAttempt records an attempt at fetching the whole state. Only the
// first attempt of a relist counts as one: retries after failures, and
// client-go's fallback from WatchList to LIST, are the same relist.
func (p *Base) RelistAttempt(mode string) { p.relistAttemptAt(mode, time.Now()) }

// relistAttemptAt is RelistAttempt for an attempt that began at from.
func (p *Base) relistAttemptAt(mode string, from time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.relisting {
		return
	}
	reason := p.nextReason
	if !p.listed {
		reason, p.listed = metrics.RelistInitial, true
	}
	p.nextReason = metrics.RelistError
	p.relisting, p.relistFrom = true, from
	p.RelistBegan(reason, mode, p.relistFrom)
}

// RelistCompleted records that the whole state has arrived, by mode.
func (p *Base) RelistCompleted(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.relisting {
		p.relisting = false
		p.nextReason = metrics.RelistError
		now := time.Now()
		p.RelistEnded(mode, now.Sub(p.relistFrom), now)
	}
}

// SetNextReason says why the next relist will happen. During a relist it
// changes nothing: an expiry inside a relist is part of that relist, and
// must not label the next one.
func (p *Base) SetNextReason(reason string) {
	p.mu.Lock()
	if !p.relisting {
		p.nextReason = reason
	}
	p.mu.Unlock()
}
