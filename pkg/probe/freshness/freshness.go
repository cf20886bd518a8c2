// Package freshness is the freshness probe kind: how far each resource
// type's watch cache is behind etcd, seen from outside, and whether an
// apiserver's cache lists the probe's own markers as they were written
// (stale and ghost reads).
//
// kube-apiserver 1.34 and later serve a LIST without resourceVersion from
// the resource's watch cache only once that cache has caught up with etcd's
// current revision (k8s.io/apiserver pkg/storage/cacher: GetList,
// waitUntilFreshLocked), waiting up to 3 s before it falls back to etcd. A
// resourceVersion=0 LIST is served from the cache at once, however stale:
// the time a consistent LIST of one name no object has takes over that of
// the same LIST with resourceVersion=0, one after the other on one kept
// connection, is the cache's lag, apart from the connection and the
// apiserver's queue. Judged against the writes the marker probe
// acknowledged, resourceVersion=0 LISTs of the markers show reads that
// went back in time, ghosts and missing objects.
//
// The package takes what it needs through its constructor (a rest.Config,
// the pinned apiservers, a clock, its settings, the metrics) and hears the
// marker probe's acknowledged writes through Acknowledged; it does not
// import the marker probe, which does not import it.
package freshness

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/resolve"
)

// Target is one way to an apiserver: Name is "" for the load-balanced
// path, else the apiserver's address (the apiserver label).
type Target struct {
	Name   string
	Config *rest.Config
}

// Targets returns the apiservers pinned now; called once per round.
type Targets func() []Target

// PinnedTargets are the targets of addrs, each dialled at its address with
// the serving certificate verified against serverName, as the marker
// probe's pinned paths are.
func PinnedTargets(base *rest.Config, serverName string, addrs func() []string) Targets {
	return func() []Target {
		var out []Target
		for _, a := range addrs() {
			out = append(out, Target{Name: a, Config: resolve.Pinned(base, a, serverName)})
		}
		return out
	}
}

// Options are what a Checker is given.
type Options struct {
	// Probe names the probe (the probe label); Namespace is its own, where
	// every namespaced resource is listed and its markers live.
	Probe, Namespace string
	Config           config.FreshnessConfig
	// LoadBalanced reaches the apiservers as every client does.
	LoadBalanced *rest.Config
	// Pinned lists the apiservers the probe pins, nil for none.
	Pinned Targets
	// MarkerKind (ConfigMap or Lease) and MarkerSelector (a label
	// selector) find the probe's markers for the read checks.
	MarkerKind, MarkerSelector string
	// LostAfter is the marker probe's horizon: a marker is judged by the
	// reads only this long after its acknowledgement. Retain bounds how
	// long a deleted marker is remembered.
	LostAfter, Retain time.Duration
	Metrics           *metrics.Probe
	Logger            *slog.Logger
	// Now is the one clock of every measurement and verdict.
	Now func() time.Time
	// Observe, if set, hears every check and read as it is judged (the
	// status page, check's report, tests).
	Observe func(Event)
	// Retired says how long the series of an apiserver no longer pinned
	// stay: Grace, as its marker paths' do, or for the whole run (Keep:
	// a one-shot report, which reads every count at the end). Keep also
	// says that nothing scrapes the series, so that a check need not wait
	// a round for a scrape to see them at zero.
	Retired judge.RetiredSeries
}

// Event is one judged check (Resource set) or read (Read set).
type Event struct {
	APIServer string
	Resource  string
	Verdict   Verdict
	// Answer is what the check's consistent LIST got back, Baseline the
	// resourceVersion=0 LIST sent before it.
	Answer, Baseline Answer
	// Stuck is the resource's stuck state after this check.
	Stuck bool
	// Read is a read check's judgement, with its Listing.
	Read    *ReadVerdict
	Listing Listing
}

// Checker runs the freshness checks of one probe.
type Checker struct {
	opts   Options
	sink   *sink
	logger *slog.Logger

	mu      sync.Mutex
	clients map[string]*clients // by target config's host
	// resolved are the resources' list paths (resolve), by label.
	resolver *resolve.Resolver
	resolved []resolved
	// windows are each resource's and target's recent verdicts.
	windows map[[2]string][]Verdict
	reads   map[string]*readState
	markers map[string]*Marker
	round   int
	// pinned are the apiservers of the previous round, whose series and
	// state go when they are no longer pinned.
	pinned map[string]bool
	// uncached is what is known of each resource's cache (uncached.go).
	uncached *uncachedState
}

// resolved is one resource to check.
type resolved struct {
	label   string
	path    string // under the namespace for namespaced ones
	cluster bool
	err     error // not served: every check of it fails not_found
}

// New prepares a Checker; nothing is sent until Run or Round.
func New(opts Options) (*Checker, error) {
	if opts.Now == nil {
		return nil, fmt.Errorf("freshness: a clock is required")
	}
	if opts.LoadBalanced == nil {
		return nil, fmt.Errorf("freshness: a rest.Config is required")
	}
	if opts.Metrics == nil {
		return nil, fmt.Errorf("freshness: metrics are required")
	}
	c := &Checker{
		opts: opts, logger: opts.Logger.With("probe", opts.Probe, "check", "freshness"),
		clients: map[string]*clients{},
		windows: map[[2]string][]Verdict{}, reads: map[string]*readState{}, markers: map[string]*Marker{},
		uncached: newUncachedState(),
	}
	c.sink = newSink(opts.Metrics, opts.Probe, opts.Retired)
	c.resolver = resolve.New(opts.LoadBalanced, opts.Config.ParseResources(), opts.Config.CRDs, opts.Config.MaxCRDs, c.logger).Over(c.unbounded)
	return c, nil
}

// Acknowledged is the marker probe's word that the apiserver acknowledged
// a write of marker name at rv (0 for a delete), at the probe's clock.
func (c *Checker) Acknowledged(name string, rv uint64, deleted bool, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.markers[name]
	if m == nil {
		m = &Marker{Name: name, Created: at}
		c.markers[name] = m
	}
	if deleted {
		m.Deleted = at
		return
	}
	if rv > m.RV {
		m.RV, m.RVAt = rv, at
	}
}

// Run checks every Config.Every until ctx ends, then closes its
// connections.
func (c *Checker) Run(ctx context.Context) {
	defer c.sink.stop()
	defer c.Close()
	every := time.Duration(c.opts.Config.Every)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		c.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// resolveEvery: the resources are resolved by discovery again every this
// many rounds, so that a custom resource installed, removed or given a new
// preferred version after the start is listed as it is served now, and
// every served CRD of the groups crds names is found.
const resolveEvery = 10

// Round runs one round: every resource on every target, one request at a
// time, then the reads on each target. A failing check is counted and
// logged, never fatal. The round in which a resource or a target first
// appears only makes its series, at zero: its checks start the round
// after, once a scrape could have seen the zero (unless Retired.Keep).
func (c *Checker) Round(ctx context.Context) {
	c.mu.Lock()
	rediscover := c.resolved == nil || c.round%resolveEvery == 0
	c.round++
	c.mu.Unlock()
	c.rotate()
	if rediscover {
		c.resolve(ctx)
		c.listAggregated(ctx)
	}
	targets := []Target{{Name: "", Config: c.opts.LoadBalanced}}
	if c.opts.Pinned != nil {
		targets = append(targets, c.opts.Pinned()...)
	}
	c.retire(targets)
	c.dropClients(targets)
	c.mu.Lock()
	res := slices.Clone(c.resolved)
	c.mu.Unlock()
	labels := make([]string, len(res))
	for i, r := range res {
		labels[i] = r.label
	}
	for _, t := range targets {
		made, readsMade := c.sink.open(t.Name, labels, c.opts.Config.Reads)
		cl, err := c.client(t)
		if err != nil {
			c.logger.Error("cannot build a client", "apiserver", t.Name, "err", err)
			continue
		}
		// Whether each resource is cached is judged again with every
		// resolution, and on a target's first round (pinned again, it may
		// have restarted with other flags).
		if rediscover || !c.detected(t.Name) {
			c.detectUncached(ctx, cl.warm, cl.host, t.Name, res)
		}
		for _, r := range res {
			if ctx.Err() != nil {
				return
			}
			reason := c.uncachedReason(r.label, t.Name)
			c.sink.uncached(r.label, t.Name, reason)
			if c.zeroFirst(made[r.label]) {
				continue
			}
			if reason != "" {
				c.notChecked(r, t.Name, reason)
				continue
			}
			c.check(ctx, cl, t.Name, r)
		}
		if c.opts.Config.Reads && !c.zeroFirst(readsMade) {
			c.read(ctx, cl, t.Name)
		}
	}
	c.prune()
}

// zeroFirst says whether a check whose series were just made (made)
// waits for the next round: unless nothing scrapes them, a scrape must be
// able to see them at zero first, or a rule's increase misses the first
// count.
func (c *Checker) zeroFirst(made bool) bool {
	return made && !c.opts.Retired.Keep
}

// retire forgets the apiservers pinned last round and not now: their
// windows and read state at once, their series after the grace, as the
// marker probe's pinned paths go.
func (c *Checker) retire(targets []Target) {
	now := map[string]bool{}
	for _, t := range targets[1:] {
		now[t.Name] = true
	}
	c.mu.Lock()
	var gone []string
	for a := range c.pinned {
		if !now[a] {
			gone = append(gone, a)
			delete(c.reads, a)
			maps.DeleteFunc(c.windows, func(k [2]string, _ []Verdict) bool { return k[1] == a })
		}
	}
	c.pinned = now
	c.mu.Unlock()
	for _, a := range gone {
		c.forgetUncached(a)
		c.sink.retire(a)
	}
}

// accept asks for metadata only: the checks need resourceVersions and
// names, never the objects.
const accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

// list is one GET of path on host with query, and what it returned. It is
// timed with the probe's clock from the moment the request has its
// connection (one kept from before, or a new one once its TLS handshake is
// done) to the end of its body, so that no figure holds a handshake.
// perConn: on a connection of its own, closed after.
func (c *Checker) list(ctx context.Context, client *http.Client, host, path string, query url.Values, perConn bool) (Answer, metadataList) {
	query.Set("timeout", time.Duration(c.opts.Config.Timeout).String())
	var connected atomic.Pointer[time.Time]
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) {
		now := c.opts.Now()
		connected.Store(&now)
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+path+"?"+query.Encode(), nil)
	if err != nil {
		return Answer{Err: err}, metadataList{}
	}
	req.Header.Set("Accept", accept)
	req.Close = perConn
	start := c.opts.Now()
	took := func() time.Duration {
		from := start
		if at := connected.Load(); at != nil {
			from = *at
		}
		return c.opts.Now().Sub(from)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{Err: err, Took: took()}, metadataList{}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	a := Answer{Status: resp.StatusCode, Err: err, Took: took()}
	if err != nil {
		a.Status = 0
		return a, metadataList{}
	}
	var out metadataList
	_ = json.Unmarshal(body, &out)
	if resp.StatusCode != http.StatusOK {
		a.Message = out.Message
		if a.Message == "" {
			// Not a Status: the apiserver's admission answers in plain
			// text.
			a.Message = strings.TrimSpace(string(body[:min(len(body), 512)]))
		}
	}
	return a, out
}

// metadataList is the part of a PartialObjectMetadataList (or a Status)
// the checks read.
type metadataList struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	} `json:"items"`
	Message string `json:"message"`
}

// noSuchName is the name every check lists: no object is named so.
const noSuchName = "watchprobe-freshness-check-lists-nothing"

// check is one consistent LIST of r through one target, and its baseline.
//
// Both list one name no object has (fieldSelector=metadata.name), in the
// probe's namespace or, for a cluster-scoped resource, the cluster: the
// apiserver looks up one key in the cache, however many objects the
// resource has, and the consistent read still waits for a fresh cache
// first (k8s.io/apiserver cacher: waitUntilFreshAndGetList). API Priority
// and Fairness prices a LIST that names one object at one seat, where a
// LIST of a namespace is priced by the resource's objects in the whole
// cluster. Not limit=1: a cache not ready passes an unfiltered LIST with a
// limit to etcd (shouldDelegateListOnNotReadyCache), and would be judged
// fresh.
//
// The baseline is the same LIST with resourceVersion=0, served from the
// cache at once, sent just before on the same connection: it waits in the
// same priority level's queue, and the consistent LIST's time over it is
// the cache's wait. One after the other, neither slows the other down.
func (c *Checker) check(ctx context.Context, cl *clients, apiserver string, r resolved) {
	var v Verdict
	var a, base Answer
	if r.err != nil {
		v = Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}
	} else {
		path := r.path
		if !r.cluster {
			path = fmt.Sprintf(r.path, url.PathEscape(c.opts.Namespace))
		}
		base, _ = c.list(ctx, cl.warm, cl.host, path, url.Values{"fieldSelector": {"metadata.name=" + noSuchName}, "resourceVersion": {"0"}}, false)
		a, _ = c.list(ctx, cl.warm, cl.host, path, url.Values{"fieldSelector": {"metadata.name=" + noSuchName}}, false)
		if ctx.Err() != nil {
			return // our own shutdown, not the apiserver's failure
		}
		v = judgeCheck(a, base, limits{bound: time.Duration(c.opts.Config.Bound), timeout: time.Duration(c.opts.Config.Timeout),
			queuedAfter: time.Duration(c.opts.Config.QueuedAfter)})
	}
	key := [2]string{r.label, apiserver}
	c.mu.Lock()
	n := max(minStuckChecks, int(time.Duration(c.opts.Config.StuckWindow)/time.Duration(c.opts.Config.Every)))
	w := append(c.windows[key], v)
	if len(w) > n {
		w = w[len(w)-n:]
	}
	c.windows[key] = w
	stuck := isStuck(w)
	c.mu.Unlock()
	c.sink.check(r.label, apiserver, v, a, stuck)
	switch v.Outcome {
	case Fresh:
	case Queued:
		c.logger.Warn("freshness check held in the apiserver's queue (the exporter's priority level), not judged", "resource", r.label, "apiserver", apiserver,
			"reason", v.Reason, "status", a.Status, "took", a.Took, "baseline_status", base.Status, "baseline_took", base.Took, "message", cmp.Or(a.Message, base.Message))
	default:
		c.logger.Warn("freshness check not answered from a fresh watch cache", "resource", r.label, "apiserver", apiserver,
			"outcome", v.Outcome.String(), "reason", v.Reason, "status", a.Status, "took", a.Took, "baseline_took", base.Took, "message", a.Message, "err", a.Err)
	}
	if c.opts.Observe != nil {
		c.opts.Observe(Event{APIServer: apiserver, Resource: r.label, Verdict: v, Stuck: stuck, Answer: a, Baseline: base})
	}
}

// markerPaths are the list paths of each marker kind, under the namespace.
var markerPaths = map[string]string{
	config.KindConfigMap: "/api/v1/namespaces/%s/configmaps",
	config.KindLease:     "/apis/coordination.k8s.io/v1/namespaces/%s/leases",
}

// read is one resourceVersion=0 LIST of the probe's markers on a target,
// judged against the acknowledged writes. Through the load balancer each
// read is on a connection of its own (clients).
func (c *Checker) read(ctx context.Context, cl *clients, apiserver string) {
	q := url.Values{"resourceVersion": {"0"}, "labelSelector": {c.opts.MarkerSelector}}
	client, perConn := cl.warm, apiserver == ""
	if perConn {
		client = cl.perRead
	}
	a, out := c.list(ctx, client, cl.host, fmt.Sprintf(markerPaths[c.opts.MarkerKind], url.PathEscape(c.opts.Namespace)), q, perConn)
	if ctx.Err() != nil {
		return
	}
	rv, err := strconv.ParseUint(out.Metadata.ResourceVersion, 10, 64)
	if a.Err != nil || a.Status != http.StatusOK || err != nil {
		c.logger.Warn("marker read failed", "apiserver", apiserver, "status", a.Status, "err", a.Err, "message", a.Message)
		return
	}
	list := Listing{RV: rv}
	for _, it := range out.Items {
		list.Names = append(list.Names, it.Metadata.Name)
	}
	c.mu.Lock()
	st := c.reads[apiserver]
	if st == nil {
		st = newReadState()
		c.reads[apiserver] = st
	}
	markers := make([]Marker, 0, len(c.markers))
	for _, m := range c.markers {
		markers = append(markers, *m)
	}
	slices.SortFunc(markers, func(a, b Marker) int { return a.Created.Compare(b.Created) })
	v := judgeRead(st, list, markers, c.opts.Now(), c.opts.LostAfter)
	c.mu.Unlock()
	c.sink.read(apiserver, v)
	for i, k := range v.Kinds {
		c.logger.Warn("stale read", "apiserver", apiserver, "kind", k, "marker", v.Names[i],
			"list_resource_version", list.RV, "against_resource_version", v.Against[i])
	}
	if c.opts.Observe != nil {
		c.opts.Observe(Event{APIServer: apiserver, Read: &v, Listing: list})
	}
}

// prune forgets markers deleted, or created, longer than Retain ago.
func (c *Checker) prune() {
	now := c.opts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for n, m := range c.markers {
		at := m.Created
		if !m.Deleted.IsZero() {
			at = m.Deleted
		}
		if now.Sub(at) > c.opts.Retain {
			delete(c.markers, n)
		}
	}
	for _, st := range c.reads {
		st.forget(func(n string) bool { return c.markers[n] != nil })
	}
}
