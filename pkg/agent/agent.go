// Package agent is the node agent (watchprobe-agent), a probe kind of its
// own: on each node, one marker of its own, a Lease named after the node,
// written in place at an interval and watched the way a kubelet watches
// its objects, by a watch narrowed to that one object with a
// metadata.name field selector over a connection of its own. Its
// judgement is the exporter's (pkg/probe/judge), with one path, so that
// latency, late, lost, stalls, relists and stream ends mean what they mean
// there; only its node's clock times it, and nothing compares clocks
// across hosts.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/paths"
)

// Labels of every agent's Lease.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "watchprobe"
	// LabelZone is the node label the agent reads its zone from.
	LabelZone = "topology.kubernetes.io/zone"
)

// Options are an agent's settings.
type Options struct {
	// Config reaches the apiserver. The agent's watch and its writes each
	// go over a connection of their own, built from it.
	Config *rest.Config
	// Node is the node the agent runs on, and its Lease's name.
	Node string
	// Zone is the node's zone; empty: read from the Node's LabelZone
	// label when ReadNode, else none.
	Zone     string
	ReadNode bool
	// Namespace holds every agent's Lease.
	Namespace string
	// WriteBudget is the marker writes per second all agents together
	// may make; an agent writes every agents / WriteBudget seconds, and
	// at least MinInterval apart.
	WriteBudget float64
	MinInterval time.Duration
	// Deadline, StallAfter and LostAfter judge the agent's writes as a
	// probe's (pkg/config); LostAfter 0: the probe's default.
	Deadline, StallAfter, LostAfter time.Duration
	// WatchTimeout is the watch requests' timeout, as a reflector's.
	WatchTimeout time.Duration
	// Monitor is the agent's self-monitor; nil: none.
	Monitor  judge.Monitor
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// countEvery is how often an agent counts the agents, for its interval.
// After countTries failed counts in a row it writes every
// fallbackInterval (at least its minimum) until a count succeeds: the
// write budget then holds up to fallbackInterval x budget agents, 15,000
// at the default budget.
const (
	countEvery       = 10 * time.Minute
	countTries       = 3
	fallbackInterval = 5 * time.Minute
)

// Validate names each setting at fault and how to fix it.
func (o *Options) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: "+format, append([]any{flag}, args...)...))
	}
	if o.Node == "" {
		bad("node", "is required: set it, or NODE_NAME from the downward API (spec.nodeName)")
	} else if msgs := validation.IsDNS1123Subdomain(o.Node); len(msgs) > 0 {
		bad("node", "%q is not a node name: %s", o.Node, msgs[0])
	}
	if msgs := validation.IsDNS1123Label(o.Namespace); len(msgs) > 0 {
		bad("namespace", "%q is not a namespace name: %s", o.Namespace, msgs[0])
	}
	if o.WriteBudget <= 0 {
		bad("write-budget", "%g must be positive: the marker writes per second all agents together may make", o.WriteBudget)
	}
	if o.MinInterval < time.Second {
		bad("min-interval", "%s is too short; use at least 1s", o.MinInterval)
	}
	if o.Deadline <= 0 {
		bad("deadline", "%s must be positive", o.Deadline)
	}
	if o.StallAfter <= o.Deadline {
		bad("stall-after", "%s must be longer than the deadline (%s)", o.StallAfter, o.Deadline)
	}
	if o.LostAfter != 0 && o.LostAfter <= o.Deadline {
		bad("lost-after", "%s must be longer than the deadline (%s); 0 is the default, 2 x the deadline, at least 1m", o.LostAfter, o.Deadline)
	}
	if o.WatchTimeout < time.Minute {
		bad("watch-timeout", "%s is too short; use at least 1m", o.WatchTimeout)
	}
	return errors.Join(errs...)
}

// Agent is one node's agent.
type Agent struct {
	opts    Options
	writes  kube.MarkerAPI // over the writes' connection
	watches kube.MarkerAPI // over the watch's connection
	client  *kube.Client   // the writes' client, for the Node and the count
	reg     prometheus.Registerer
	tracker *judge.Tracker
	sink    *sink
	path    paths.Path
	logger  *slog.Logger

	seq      uint64
	interval atomic.Int64 // time.Duration
	// counted is closed once the agents have been counted (or could not
	// be, countTries times): no write goes before, so that agents started
	// together keep to the budget.
	counted chan struct{}
	// runCtx is Run's: what the agent starts ends with it.
	runCtx context.Context
	// watchConn is the connection the latest watch request went out on,
	// "local -> remote": on the node, conntrack and ss find it by it.
	watchConn atomic.Pointer[string]
	mu        sync.Mutex
	zone      string
	nodeRead  bool                   // the Node was read, or cannot be
	owner     *metav1.OwnerReference // the agent's Node, once read
}

// New prepares an agent and registers its series; nothing is sent until
// Run.
func New(o Options) (*Agent, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Config == nil {
		return nil, errors.New("no apiserver configuration")
	}
	if o.LostAfter == 0 {
		o.LostAfter = config.DefaultLostAfter(o.Deadline, config.DefaultRetention(o.Deadline))
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	// The watch on a connection of its own is what a dead connection
	// under it shows, while the writes that its judgement needs still go
	// through on theirs.
	writesCfg, watchCfg := kube.OwnConnection(o.Config), kube.OwnConnection(o.Config)
	writes, err := kube.InstrumentedAPI(writesCfg, config.KindLease, o.Namespace)
	if err != nil {
		return nil, err
	}
	client, err := kube.InstrumentedClient(writesCfg)
	if err != nil {
		return nil, err
	}
	watches, err := kube.InstrumentedAPI(watchCfg, config.KindLease, o.Namespace)
	if err != nil {
		return nil, err
	}
	a := &Agent{opts: o, writes: writes, client: client, reg: o.Registry, zone: o.Zone,
		counted: make(chan struct{}), runCtx: context.Background(), nodeRead: !o.ReadNode, logger: o.Logger.With("node", o.Node)}
	a.watches = tracedWatches{watches, a}
	a.interval.Store(int64(o.MinInterval))
	// The series exist from the start, unhealthy: an agent that cannot
	// prepare its Lease (no path to the apiserver, its permissions) is
	// scraped and seen as such, not as an agent without series.
	a.sink = newSink(metrics.RegisterAgent(a.reg, o.Node, o.Zone), time.Now())
	a.tracker = judge.New(judge.Settings{
		Paths: []string{metrics.PathWatch}, Deadline: o.Deadline, StallAfter: o.StallAfter,
		Retain: max(config.DefaultRetention(o.Deadline), o.LostAfter), LostAfter: o.LostAfter, Base: time.Now(), Monitor: o.Monitor,
	}, a.sink, &judge.LogSink{Logger: a.logger}, refusalChecks{a})
	a.path, err = paths.New(metrics.PathWatch, paths.Env{
		Handle: a.tracker.Handle(0), API: a.watches, FieldSelector: "metadata.name=" + o.Node,
		WatchTimeout: o.WatchTimeout, Logger: a.logger.With("path", metrics.PathWatch),
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Run prepares the agent's Lease, then watches and writes it until ctx
// ends. It returns early only if the Lease cannot be prepared and ctx
// ends while it retries.
func (a *Agent) Run(ctx context.Context) error {
	a.runCtx = ctx
	defer a.tracker.Close()
	defer a.path.Close()
	if err := a.prepare(ctx); err != nil {
		return err
	}
	sweeper := judge.NewSweeper()
	sweeper.Add(a.tracker, min(max(a.opts.Deadline/10, 10*time.Millisecond), time.Second))
	var wg sync.WaitGroup
	wg.Go(func() { sweeper.Run(ctx) })
	wg.Go(func() { a.path.Run(ctx) })
	wg.Go(func() { a.count(ctx) })
	select {
	case <-ctx.Done():
	case <-a.counted:
		a.waitSynced(ctx)
		a.write(ctx)
	}
	wg.Wait()
	return nil
}

// refusalChecks answers the judgement's checks of a refused list or watch
// (judge.ConfirmRefusal): the same request (a LIST or a WATCH of the
// agent's Lease) over the writes' connection, not the watch's. Refused there too, the refusal is
// the agent's own (its Role, its namespace, a policy): its writes are then
// unmeasurable, never the node's misses.
type refusalChecks struct{ a *Agent }

func (r refusalChecks) Outcome(o judge.Outcome) {
	if o.Kind != judge.ConfirmRefusal {
		return
	}
	// Not on the goroutine delivering outcomes: the answer takes the
	// tracker's lock.
	go r.a.checkRefusal(o.Request)
}

func (a *Agent) checkRefusal(request string) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(a.runCtx, kube.ListTimeout)
	defer cancel()
	leases := a.client.Leases(a.opts.Namespace)
	opts := metav1.ListOptions{FieldSelector: "metadata.name=" + a.opts.Node}
	var err error
	if request == metrics.RequestWatch {
		var w watch.Interface
		if w, err = leases.Watch(ctx, opts); err == nil {
			w.Stop()
		}
	} else {
		opts.Limit = 1
		_, err = leases.List(ctx, opts)
	}
	switch {
	case err == nil:
		a.tracker.RefusalChecked(request, began, true, time.Now())
	case judge.PathRefusal(err) != "":
		a.tracker.RefusalChecked(request, began, false, time.Now())
	default:
		a.tracker.RefusalCheckFailed(request, began, err, time.Now())
	}
}

// tracedWatches notes the connection each watch request goes out on.
type tracedWatches struct {
	kube.MarkerAPI
	a *Agent
}

func (t tracedWatches) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		conn := info.Conn.LocalAddr().String() + " -> " + info.Conn.RemoteAddr().String()
		if old := t.a.watchConn.Swap(&conn); old == nil || *old != conn {
			t.a.logger.Info("the agent's watch goes over a connection", "connection", conn)
		}
	}})
	return t.MarkerAPI.Watch(ctx, opts)
}

// WatchConn is the connection of the agent's latest watch request, "local
// -> remote"; "" before the first.
func (a *Agent) WatchConn() string {
	if c := a.watchConn.Load(); c != nil {
		return *c
	}
	return ""
}

// Synced reports whether the agent's watch has been live once.
func (a *Agent) Synced() bool { return a.path.Synced() }

// Zone is the node's zone, as the agent exports it.
func (a *Agent) Zone() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.zone
}

// Interval is how often the agent writes now.
func (a *Agent) Interval() time.Duration { return time.Duration(a.interval.Load()) }

// Status is the agent's Status now.
func (a *Agent) Status() Status {
	s := a.sink.snapshot(time.Now(), a.Interval())
	s.Zone = a.Zone()
	s.WatchConn = a.WatchConn()
	s.Deadline = Duration(a.opts.Deadline)
	return s
}

// firstSeq is the sequence number the agent's writes count on from: after
// the one its Lease carries, so that a restarted agent writes no number
// the Lease's history holds, and after the start's Unix millisecond times
// a thousand, so that two agents of one node (a DaemonSet rolling with a
// surge) never write the same number: the older one would need a thousand
// writes for each millisecond between their starts to reach the newer's.
func firstSeq(lease metav1.Object, now time.Time) uint64 {
	seq := uint64(now.UnixMilli()) * 1000
	if last, ok := judge.Seq(lease); ok && last > seq {
		seq = last
	}
	return seq
}

// prepare reads the node's zone and UID if asked to, and makes sure the
// agent's Lease exists, and where its sequence numbers start (firstSeq).
// It retries until it succeeds or ctx ends: an agent on a node that cannot
// reach the apiserver is up, unhealthy, and says so in its log.
func (a *Agent) prepare(ctx context.Context) error {
	retry := time.Second
	for {
		err := a.prepareOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.sink.setupFailed(err)
		if err == nil {
			return nil
		}
		a.logger.Warn("preparing the agent's Lease", "namespace", a.opts.Namespace, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
		retry = min(2*retry, 30*time.Second)
	}
}

func (a *Agent) prepareOnce(ctx context.Context) error {
	a.readNode(ctx)
	leases := a.client.Leases(a.opts.Namespace)
	lease, err := leases.Get(ctx, a.opts.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Owned by its Node, as the kubelet's node Lease is: the garbage
		// collector deletes it with the Node, so that removed nodes
		// leave no Lease to count or to report stale.
		om := metav1.ObjectMeta{Name: a.opts.Node, Namespace: a.opts.Namespace, Labels: a.labels()}
		if a.owner != nil {
			om.OwnerReferences = []metav1.OwnerReference{*a.owner}
		}
		lease, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: om}, metav1.CreateOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return err
	}
	a.seq = max(a.seq, firstSeq(lease, time.Now()))
	return nil
}

// readNode reads the agent's Node, until it has once or cannot (refused,
// or no such Node): its zone, before the first write (the series are
// registered again with it, all still at their start), and its UID, the
// owner of the agent's Lease. Without them the agent measures all the
// same: the zone only groups its series, and the owner only cleans up.
func (a *Agent) readNode(ctx context.Context) {
	if a.nodeRead {
		return
	}
	var node corev1.Node
	err := a.client.RESTClient().Get().Resource("nodes").Name(a.opts.Node).Do(ctx).Into(&node)
	if err != nil {
		a.nodeRead = apierrors.IsForbidden(err) || apierrors.IsNotFound(err)
		a.logger.Warn("reading the agent's Node: its series carry its zone only if --zone says it, and its Lease outlives the Node", "label", LabelZone, "retry", !a.nodeRead, "err", err)
		return
	}
	a.nodeRead = true
	a.owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}
	zone := node.Labels[LabelZone]
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.zone != "" || zone == "" || a.seq != 0 {
		return // given by --zone, none, or writes counted already
	}
	a.zone = zone
	a.sink.relabel(a.reg, a.opts.Node, zone)
}

func (a *Agent) labels() map[string]string {
	return map[string]string{labelManagedBy: managedBy, LabelComponent: ComponentAgent}
}

// waitSynced waits for the watch's first sync, at most judge.SyncTimeout:
// a watch that cannot sync must show as missed events, not as silence.
func (a *Agent) waitSynced(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, judge.SyncTimeout)
	defer cancel()
	for !a.path.Synced() {
		select {
		case <-ctx.Done():
			if !a.path.Synced() {
				a.logger.Warn("the agent's watch has not synced; writing anyway so that the failure is measured", "after", judge.SyncTimeout)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// write writes the Lease every interval, at a random phase within it, so
// that agents started together do not write in step; drawn again when
// the interval changes.
func (a *Agent) write(ctx context.Context) {
	iv := a.Interval()
	next := time.Now().Add(rand.N(iv))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		a.writeOnce(ctx)
		if now := a.Interval(); now != iv {
			iv = now
			next = time.Now().Add(rand.N(iv))
			continue
		}
		next = next.Add(iv)
		if now := time.Now(); next.Before(now) {
			next = now // a write longer than the interval: no burst to catch up
		}
	}
}

// writeOnce sends one write and tells the judgement what to expect of it.
// A Lease found gone (deleted by hand, or with its Node by the garbage
// collector while the Node was recreated) is made again, owned by the
// Node as it is now.
func (a *Agent) writeOnce(ctx context.Context) {
	a.seq++
	seq := a.seq
	annotations := map[string]string{
		judge.AnnotationSeq: strconv.FormatUint(seq, 10),
		AnnotationStatus:    a.Status().Encode(),
	}
	c := a.tracker.NewCycle()
	defer a.tracker.CloseCycle(c)
	w := a.tracker.Expect(c, judge.WriteKey{Name: a.opts.Node, Seq: seq}, metrics.EventModified, trace.SpanContext{}, time.Now)
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	wctx = kube.WithTag(wctx, &kube.RequestTag{
		Throttled: func(request string) { a.tracker.Throttled(-1, request) },
		Attempt:   func(at time.Time) { a.tracker.Attempted(w, at) },
	})
	// The write is timed from the connection in hand: at a long interval
	// the writes' idle connection is closed between writes (client-go's
	// transport keeps one 90 s), and a new one's dial and TLS handshake
	// are no part of the node's watch delivery.
	wctx = httptrace.WithClientTrace(wctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { a.tracker.Attempted(w, time.Now()) },
	})
	out, err := a.writes.PatchMeta(wctx, a.opts.Node, a.labels(), annotations)
	now := time.Now()
	if err != nil && ctx.Err() != nil {
		a.tracker.Abandon(w) // the agent's own shutdown
		return
	}
	var rv uint64
	if out != nil {
		rv = judge.RV(out)
	}
	a.tracker.Ack(w, rv, err, now)
	if apierrors.IsNotFound(err) {
		a.logger.Warn("the agent's Lease is gone: making it again")
		a.nodeRead = !a.opts.ReadNode
		if err := a.prepareOnce(ctx); err != nil {
			a.logger.Warn("making the agent's Lease again; trying at the next write", "err", err)
		}
	}
}

// writeTimeout bounds one write, as a probe's.
const writeTimeout = 30 * time.Second

// count sets the interval from the number of agents, now and every
// countEvery: agents / WriteBudget seconds, at least MinInterval. The
// agents are the Leases of the namespace, counted by a LIST of one item
// whose answer says how many remain (remainingItemCount, which the
// apiserver gives without a selector): one small read per agent every ten
// minutes, whatever the cluster's size. The first count gates the first
// write; a failed count is tried again within a minute.
func (a *Agent) count(ctx context.Context) {
	once := sync.OnceFunc(func() { close(a.counted) })
	retry := 5 * time.Second
	failures := 0
	for {
		n, err := a.agents(ctx)
		wait := countEvery/2 + rand.N(countEvery)
		if ctx.Err() == nil && (err == nil) == (failures > 0) {
			a.sink.setupFailed(err) // refused or not, once per change
		}
		switch {
		case err != nil && ctx.Err() == nil:
			failures++
			wait, retry = retry/2+rand.N(retry), min(2*retry, time.Minute)
			if failures == countTries {
				// An agent that cannot count must still measure: at an
				// interval the budget holds up to fallbackInterval x
				// budget nodes.
				a.interval.Store(int64(max(a.opts.MinInterval, fallbackInterval)))
				once()
			}
			a.logger.Warn("counting the agents for the write interval", "interval", a.Interval(), "tries", failures, "err", err)
		case err == nil:
			failures = 0
			retry = 5 * time.Second
			iv := max(a.opts.MinInterval, time.Duration(float64(n)/a.opts.WriteBudget*float64(time.Second)))
			if old := time.Duration(a.interval.Swap(int64(iv))); old != iv {
				a.logger.Info("write interval", "interval", iv, "agents", n, "write_budget", a.opts.WriteBudget)
			}
			once()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// agents is the number of Leases in the agents' namespace.
func (a *Agent) agents(ctx context.Context) (int64, error) {
	list, err := a.client.Leases(a.opts.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return 0, err
	}
	n := int64(len(list.Items))
	if r := list.RemainingItemCount; r != nil {
		n += *r
	} else if list.Continue != "" {
		return 0, errors.New("the apiserver did not say how many Leases remain")
	}
	return n, nil
}
