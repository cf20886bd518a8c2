// Package watchlist is the WatchList sync probe kind: per resource type and
// apiserver, how long the sync a client-go informer makes takes, and
// whether it ends.
//
// client-go v0.35 and later list with WatchList by default (the
// WatchListClient gate): an informer's first list and every relist is a
// watch with sendInitialEvents=true, resourceVersionMatch=NotOlderThan
// and bookmarks, which the apiserver answers with the current objects,
// then a BOOKMARK annotated k8s.io/initial-events-end; the informer is
// synced at that bookmark, and until it comes, it waits. A check sends the
// same request for a name no object has, in the probe's own namespace
// (cluster-wide for a cluster-scoped resource), and times it to the end
// bookmark, just after a resourceVersion=0 watch of the same name that
// tells the time it waited in the apiserver's queue (the exporter's own
// priority level) from the time the WatchList took.
//
// The package takes what it needs through its constructor (a rest.Config,
// the pinned apiservers, a clock, its settings, the metrics); it does not
// import the marker probe.
package watchlist

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/resolve"
)

// Options are what a Checker is given.
type Options struct {
	// Probe names the probe (the probe label); Namespace is its own, where
	// every namespaced resource is watched.
	Probe, Namespace string
	Config           config.WatchListConfig
	// LoadBalanced reaches the apiservers as every client does.
	LoadBalanced *rest.Config
	// Pinned lists the addresses of the apiservers the probe pins now, nil
	// for none; each is dialled with its certificate verified against
	// ServerName.
	Pinned     func() []string
	ServerName string
	// Retired says how long the series of an apiserver no longer pinned
	// stay: Grace, as its marker paths' do, or for the whole run (Keep: a
	// one-shot report, which reads every count at the end). Keep also
	// says that nothing scrapes the series, so that a sync need not wait
	// a round for a scrape to see them at zero.
	Retired judge.RetiredSeries
	Metrics *metrics.Probe
	Logger  *slog.Logger
	// Now is the one clock of every measurement.
	Now func() time.Time
	// Observe, if set, hears every sync as it is judged (the status page,
	// check's report, tests).
	Observe func(Event)
}

// Event is one judged sync, or (Retired) an apiserver no longer pinned:
// its resources are no longer stuck there.
type Event struct {
	APIServer string
	Resource  string
	Verdict   Verdict
	Sync      Sync
	Baseline  Baseline
	Retired   bool
	// Stuck is the resource's stuck state on that apiserver after it.
	Stuck bool
}

// Checker runs the WatchList sync checks of one probe.
type Checker struct {
	opts     Options
	sink     *sink
	logger   *slog.Logger
	resolver *resolve.Resolver
	// labels are the configured resources as labelled.
	labels []string

	mu      sync.Mutex
	clients map[string]rest.Interface // by host
	windows map[[2]string][]Verdict
	// pinned are the apiservers whose series exist: those checked, and
	// those pinned since the last round, checked from the next.
	pinned map[string]bool
	// bound is the context of a sync's WatchList, or of its baseline,
	// ended when the bound passes (context.WithTimeout); tests end it on
	// an event instead.
	bound func(ctx context.Context, apiserver, resource string, baseline bool) (context.Context, context.CancelFunc)
}

// New prepares a Checker; nothing is sent, and no series made, until Run
// or Round.
func New(opts Options) (*Checker, error) {
	switch {
	case opts.Now == nil:
		return nil, errors.New("watchlist: a clock is required")
	case opts.LoadBalanced == nil:
		return nil, errors.New("watchlist: a rest.Config is required")
	case opts.Metrics == nil:
		return nil, errors.New("watchlist: metrics are required")
	}
	logger := opts.Logger.With("probe", opts.Probe, "check", "watch_list")
	wanted := opts.Config.ParseResources()
	c := &Checker{
		opts: opts, logger: logger, sink: newSink(opts.Metrics, opts.Probe, opts.Retired),
		resolver: resolve.New(opts.LoadBalanced, wanted, nil, 0, logger).Needs("watch"),
		clients:  map[string]rest.Interface{}, windows: map[[2]string][]Verdict{}, pinned: map[string]bool{},
	}
	c.bound = func(ctx context.Context, _, _ string, _ bool) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, time.Duration(opts.Config.Bound))
	}
	for _, w := range wanted {
		c.labels = append(c.labels, w.String())
	}
	return c, nil
}

// Run checks every Config.Every, from the start of one round to the
// start of the next, until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	defer c.sink.stop()
	wait.NonSlidingUntilWithContext(ctx, c.Round, time.Duration(c.opts.Config.Every))
}

// Round runs one round: on each target at once, every resource, one sync
// at a time. A target's first round (the load balancer's at the start, an
// apiserver's when it is pinned) only makes its series, at zero: its syncs
// start the round after, once a scrape could have seen the zero (unless
// Retired.Keep). A failing sync is counted and logged, never fatal.
// Rounds run one at a time: Run's, or a caller's own.
func (c *Checker) Round(ctx context.Context) {
	res := c.resolver.Every(ctx, resolveEvery)
	targets := c.targets()
	var wg sync.WaitGroup
	for _, t := range targets {
		client, err := c.client(t.config)
		if err != nil {
			c.logger.Error("cannot build a client", "apiserver", t.name, "err", err)
			continue
		}
		wg.Go(func() {
			for _, r := range res {
				if ctx.Err() != nil {
					return
				}
				c.check(ctx, client, t.name, r)
			}
		})
	}
	wg.Wait()
}

type target struct {
	name   string // "" for the load-balanced path, else the apiserver's address
	config *rest.Config
}

// targets are this round's: the load-balanced path and each apiserver
// pinned now, each with its series made; those made just now (a target
// not checked before) are left out but where nothing scrapes them. The
// apiservers no longer pinned are retired.
func (c *Checker) targets() []target {
	now := map[string]bool{}
	if c.opts.Pinned != nil {
		for _, a := range c.opts.Pinned() {
			now[a] = true
		}
	}
	c.mu.Lock()
	var gone []string
	for a := range c.pinned {
		if !now[a] {
			gone = append(gone, a)
			maps.DeleteFunc(c.windows, func(k [2]string, _ []Verdict) bool { return k[1] == a })
			delete(c.clients, resolve.Pinned(c.opts.LoadBalanced, a, c.opts.ServerName).Host)
		}
	}
	c.pinned = now
	c.mu.Unlock()
	for _, a := range gone {
		c.sink.retire(a)
		if c.opts.Observe != nil {
			for _, r := range c.labels {
				c.opts.Observe(Event{APIServer: a, Resource: r, Retired: true})
			}
		}
	}
	all := []target{{config: c.opts.LoadBalanced}}
	for _, a := range slices.Sorted(maps.Keys(now)) {
		all = append(all, target{name: a, config: resolve.Pinned(c.opts.LoadBalanced, a, c.opts.ServerName)})
	}
	var out []target
	for _, t := range all {
		if c.sink.open(t.name, c.labels) && !c.opts.Retired.Keep {
			continue
		}
		out = append(out, t)
	}
	return out
}

// client is the REST client of a target's host, made once: its
// connection stays open between rounds, as an informer's does.
func (c *Checker) client(rc *rest.Config) (rest.Interface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[rc.Host]; ok {
		return cl, nil
	}
	// As the dynamic client sends it, which dynamic informers list with:
	// JSON, read as unstructured whatever the resource; the initial
	// events of a name no object has are the end bookmark alone.
	dc := dynamic.ConfigFor(rc)
	dc.GroupVersion, dc.APIPath = nil, "/"
	dc.Wrap(recordAttempt)
	cl, err := rest.UnversionedRESTClientFor(dc)
	if err != nil {
		return nil, err
	}
	c.clients[rc.Host] = cl
	return cl, nil
}

// resolveEvery: the resources are resolved by discovery again every this
// many rounds, so that a resource served in a new preferred version, or
// served at last, is watched as it is served now.
const resolveEvery = 10

// noSuchName is the name every sync watches for: no object is named so,
// so that the initial events are none however many objects the cluster
// has, and priority and fairness prices the request as one object, as it
// does a GET (k8s.io/apiserver list_work_estimator.go: a request whose
// RequestInfo has a name), rather than as a list of the whole resource.
// The apiserver still waits for its watch cache to be as fresh as etcd's
// current revision before it sends the end bookmark.
const noSuchName = "watchprobe-watchlist-check-watches-nothing"

// check is one sync of r through one target, judged and counted: its
// baseline, then, unless the baseline was held or reached no apiserver,
// the WatchList.
func (c *Checker) check(ctx context.Context, client rest.Interface, apiserver string, r resolve.Resource) {
	var s Sync
	var base Baseline
	var v Verdict
	if r.Err != nil {
		v = Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}
	} else {
		base = c.baseline(ctx, client, apiserver, r)
		if base.Answered && !(base.Status != nil && admissionRefused(*base.Status)) {
			s = c.sync(ctx, client, apiserver, r)
		}
		if ctx.Err() != nil {
			return // our own shutdown, not the apiserver's failure
		}
		v = judgeSync(s, base, time.Duration(c.opts.Config.QueuedAfter))
	}
	stuck := c.window(r.Label, apiserver, v)
	c.sink.check(r.Label, apiserver, v, s, stuck)
	if v.Outcome != Synced {
		attrs := []any{"resource", r.Label, "apiserver", apiserver, "outcome", v.Outcome.String(), "reason", v.Reason,
			"took", s.Took, "sent", s.Sent, "events", s.Events, "baseline_took", base.Took}
		if s.Status != nil {
			attrs = append(attrs, "status", s.Status.Code, "message", s.Status.Message, "error_event", s.ErrorEvent)
		}
		if base.Status != nil {
			attrs = append(attrs, "baseline_status", base.Status.Code, "baseline_message", base.Status.Message)
		}
		for _, err := range []error{s.Err, base.Err, r.Err} {
			if err != nil {
				attrs = append(attrs, "err", err)
			}
		}
		level := slog.LevelWarn
		if v.Outcome == Refused {
			level = slog.LevelInfo // what informers do there too: no fault
		}
		c.logger.Log(ctx, level, outcomeMessage[v.Outcome], attrs...)
	}
	if c.opts.Observe != nil {
		c.opts.Observe(Event{APIServer: apiserver, Resource: r.Label, Verdict: v, Sync: s, Baseline: base, Stuck: stuck})
	}
}

// outcomeMessage is what the log says of a sync that did not sync.
var outcomeMessage = map[Outcome]string{
	Missed:  "WatchList sync did not reach its end bookmark within the bound",
	Refused: "WatchList refused as a request form; informers list instead",
	Failed:  "WatchList sync failed",
	Queued:  "WatchList sync held in the apiserver's queue (the exporter's priority level), not judged",
}

// window adds v to the stuck window of resource on apiserver, which keeps
// the syncs of the last stuck_window (at least minStuckChecks), and says
// whether the resource is stuck there now.
func (c *Checker) window(resource, apiserver string, v Verdict) bool {
	keep := max(minStuckChecks, int(time.Duration(c.opts.Config.StuckWindow)/time.Duration(c.opts.Config.Every)))
	k := [2]string{resource, apiserver}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := append(c.windows[k], v)
	c.windows[k] = w[max(0, len(w)-keep):]
	return isStuck(c.windows[k])
}

// path is where r is watched.
func (c *Checker) path(r resolve.Resource) string {
	if r.Cluster {
		return r.Path
	}
	return fmt.Sprintf(r.Path, url.PathEscape(c.opts.Namespace))
}

// watchOptions are a watch of the one name no object has; the apiserver
// ends it a second after the bound, so that a stream the probe gave up on
// does not outlive it there.
func (c *Checker) watchOptions() metav1.ListOptions {
	serverTimeout := int64(math.Ceil(time.Duration(c.opts.Config.Bound).Seconds())) + 1
	return metav1.ListOptions{
		Watch:          true,
		FieldSelector:  fields.OneTermEqualSelector("metadata.name", noSuchName).String(),
		TimeoutSeconds: &serverTimeout,
	}
}

// baseline is a resourceVersion=0 watch of the name the sync watches, on
// the same client, timed from the moment it had its connection to its
// response: the apiserver answers it from the watch cache at once (no
// etcd read, no wait for a fresh cache), after the same priority level's
// queue as the WatchList's. It is a watch, not a LIST, so that the
// checks need no more than watch permission. Its stream is closed at once.
func (c *Checker) baseline(ctx context.Context, client rest.Interface, apiserver string, r resolve.Resource) Baseline {
	opts := c.watchOptions()
	opts.ResourceVersion = "0"
	bctx, cancel := c.bound(ctx, apiserver, r.Label, true)
	defer cancel()
	tctx, tr := c.traced(bctx)
	w, err := c.watch(tctx, client, c.path(r), opts)
	b := Baseline{Took: tr.since(), Sent: tr.sent()}
	if err == nil {
		w.Stop()
		b.Answered = true
		return b
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		b.Status, b.Answered = new(st.Status()), true
		return b
	}
	b.Err, b.BoundPassed = err, bctx.Err() != nil
	return b
}

// watch sends one watch request, and returns its watch once its response
// came, or the error instead.
func (c *Checker) watch(ctx context.Context, client rest.Interface, path string, opts metav1.ListOptions) (watch.Interface, error) {
	var a attempt
	// No retries: a 429 is an answer to judge, not to wait out.
	w, err := client.Get().AbsPath(path).
		SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.SchemeGroupVersion).
		MaxRetries(0).Watch(context.WithValue(ctx, attemptKey{}, &a))
	if err == nil && !a.answered {
		// client-go answers a request that timed out or was cut before
		// its response with an empty watch and no error.
		err = a.err
		w.Stop()
	}
	return w, err
}

// sync is one WatchList request of r, read until its end bookmark, an
// ERROR event, its end or the bound, whichever comes first.
func (c *Checker) sync(ctx context.Context, client rest.Interface, apiserver string, r resolve.Resource) Sync {
	opts := c.watchOptions()
	opts.SendInitialEvents = new(true)
	opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	opts.AllowWatchBookmarks = true
	bctx, cancel := c.bound(ctx, apiserver, r.Label, false)
	defer cancel()
	tctx, tr := c.traced(bctx)
	start := c.opts.Now()
	w, err := c.watch(tctx, client, c.path(r), opts)
	if err != nil {
		s := Sync{Err: err, Took: c.opts.Now().Sub(start), BoundPassed: bctx.Err() != nil, Sent: tr.sent()}
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			status := st.Status()
			s.Status, s.Err = &status, nil
		}
		return s
	}
	defer w.Stop()
	s := Sync{Sent: true}
	for {
		select {
		case ev, ok := <-w.ResultChan():
			s.Took = c.opts.Now().Sub(start)
			switch {
			case !ok:
				// The stream's end; one the probe's own bound caused is
				// the bound's.
				s.Ended = bctx.Err() == nil
				return s
			case ev.Type == watch.Error:
				status := apierrors.FromObject(ev.Object)
				var st apierrors.APIStatus
				if errors.As(status, &st) {
					s.Status = new(st.Status())
				} else {
					s.Status = &metav1.Status{Message: status.Error()}
				}
				s.ErrorEvent = true
				return s
			case ev.Type == watch.Bookmark && endBookmark(ev):
				s.Bookmark = true
				return s
			}
			s.Events++
		case <-bctx.Done():
			s.Took = c.opts.Now().Sub(start)
			return s
		}
	}
}

// endBookmark tells the bookmark that ends the initial events.
func endBookmark(ev watch.Event) bool {
	m, ok := ev.Object.(metav1.Object)
	return ok && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// trace is what httptrace saw of one request: when it had its
// connection, and whether it was written to it.
type trace struct {
	now       func() time.Time
	start     time.Time
	connected atomic.Pointer[time.Time]
	wrote     atomic.Bool
}

// traced is ctx with a trace of the request sent in it.
func (c *Checker) traced(ctx context.Context) (context.Context, *trace) {
	t := &trace{now: c.opts.Now, start: c.opts.Now()}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			now := t.now()
			t.connected.Store(&now)
		},
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				t.wrote.Store(true)
			}
		},
	}), t
}

// since is the time from the request's connection (a kept one, or a new
// one once its handshake was done), or from the trace's start if it had
// none, to now.
func (t *trace) since() time.Duration {
	from := t.start
	if at := t.connected.Load(); at != nil {
		from = *at
	}
	return t.now().Sub(from)
}

// sent: the request was written to a connection.
func (t *trace) sent() bool { return t.wrote.Load() }

// attempt is what the transport saw of a sync's request: whether a
// response arrived, or the error instead.
type attempt struct {
	answered bool
	err      error
}

type attemptKey struct{}

// recordAttempt fills the attempt its request's context carries.
func recordAttempt(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if a, ok := req.Context().Value(attemptKey{}).(*attempt); ok {
			a.answered, a.err = err == nil, err
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
