package freshness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Resources served without a watch cache. Their consistent LIST is read
// from etcd (or from another server), so its time is no cache's wait and
// its failures no cache's: such a resource is reported uncached, and not
// checked. Each signal is the apiserver's own word:
//
//   - aggregated: the resource's group/version has an APIService that
//     names a service. kube-apiserver proxies every request of it to that
//     server, whatever it caches (metrics.k8s.io answers from memory).
//     Read from the APIServices, with list on
//     apiservices.apiregistration.k8s.io.
//   - no_watch_cache: kube-apiserver stores the resource without a cacher
//     (--watch-cache-sizes=<resource>#0, --watch-cache=false). A cacher
//     exports its watch_cache_capacity series from the moment it is made,
//     for its group and resource, and every storage its object count
//     (apiserver_resource_objects): a resource stored but never cached has
//     no cacher. Read from each target's /metrics, with get on that
//     nonResourceURL.
//
// The apiserver's behaviour would need no permission beyond list, but
// every request whose answer differs between a cacher and etcd (a LIST or
// watch from a resourceVersion ahead of the cache) makes the cacher wait up
// to 3 s for it: the cluster's own LIST latency and watch-cache read-wait
// metrics would show a wait the probe made. Without either permission the
// resource is checked as a cache, and the log says why.
//
// A resource none of these signals settles (its storage not made yet, a
// failed request) keeps what was known of it: unknown is checked as a
// cache.

// uncachedState is what the checks know of each resource's cache.
type uncachedState struct {
	mu sync.Mutex
	// aggregated are the group/versions ("group/version") whose
	// APIService names a service, nil until the APIServices were listed.
	aggregated map[string]bool
	// reasons are each resource's (label) and apiserver's uncached
	// reason, "" while it is served from a cache or not known.
	reasons map[[2]string]string
	// detected are the apiservers judged since they were last pinned.
	detected map[string]bool
	// problems are the detection failures logged, by what failed, so
	// that one that persists is logged once.
	problems map[string]string
}

func newUncachedState() *uncachedState {
	return &uncachedState{reasons: map[[2]string]string{}, detected: map[string]bool{}, problems: map[string]string{}}
}

// apiServices is the APIServices' resource.
var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// listAggregated lists the APIServices, for the group/versions another
// server serves, over the checker's own connection.
func (c *Checker) listAggregated(ctx context.Context) {
	hc, err := c.unbounded()
	var out map[string]bool
	if err == nil {
		out, err = aggregatedGroupVersions(ctx, c.opts.LoadBalanced, hc)
	}
	c.problem("apiservices", err, "cannot list APIServices, so resources of aggregated APIs are checked as if kube-apiserver cached them (the exporter needs list on apiservices.apiregistration.k8s.io)")
	if err != nil {
		return // what was known stays
	}
	c.uncached.mu.Lock()
	c.uncached.aggregated = out
	c.uncached.mu.Unlock()
}

func aggregatedGroupVersions(ctx context.Context, rc *rest.Config, hc *http.Client) (map[string]bool, error) {
	dyn, err := dynamic.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, err
	}
	l, err := dyn.Resource(apiServices).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, u := range l.Items {
		spec, _ := u.Object["spec"].(map[string]any)
		if spec == nil || spec["service"] == nil {
			continue // served by kube-apiserver itself
		}
		g, _ := spec["group"].(string)
		v, _ := spec["version"].(string)
		out[g+"/"+v] = true
	}
	return out, nil
}

// detectUncached judges each resource's cache on one target from its
// /metrics and the APIServices last listed.
func (c *Checker) detectUncached(ctx context.Context, client *http.Client, host, apiserver string, res []resolved) {
	cm, err := readCacheMetrics(ctx, client, host)
	c.problem("metrics "+apiserver, err, "cannot read the apiserver's /metrics, so a resource it stores without a watch cache is checked as a cache (the exporter needs get on the nonResourceURL /metrics)")
	c.uncached.mu.Lock()
	defer c.uncached.mu.Unlock()
	c.uncached.detected[apiserver] = true
	// A resource no longer resolved (its CRD deleted) is forgotten.
	for k := range c.uncached.reasons {
		if k[1] == apiserver && !slices.ContainsFunc(res, func(r resolved) bool { return r.label == k[0] }) {
			delete(c.uncached.reasons, k)
		}
	}
	for _, r := range res {
		if r.err != nil {
			continue
		}
		gr, gv := servedAt(r.path)
		var m *cacheMetrics
		if err == nil {
			m = &cm
		}
		reason, known := judgeUncached(c.uncached.aggregated[gv], m, gr)
		if !known {
			continue
		}
		k := [2]string{r.label, apiserver}
		if c.uncached.reasons[k] != reason {
			if reason != "" {
				c.logger.Info("the apiserver serves this resource without a watch cache; its freshness checks are not sent", "resource", r.label, "apiserver", apiserver, "reason", reason)
			} else if c.uncached.reasons[k] != "" {
				c.logger.Info("the apiserver serves this resource from a watch cache again; its freshness checks resume", "resource", r.label, "apiserver", apiserver)
			}
		}
		c.uncached.reasons[k] = reason
	}
}

// judgeUncached is a resource's uncached reason, "" for a cache, and
// whether the signals settle it: aggregated, its group/version is another
// server's; else m (nil when unread) says whether kube-apiserver caches
// the resource gr it stores.
func judgeUncached(aggregated bool, m *cacheMetrics, gr schema.GroupResource) (reason string, known bool) {
	switch {
	case aggregated:
		return metrics.UncachedAggregated, true
	case m == nil:
		return "", false
	case m.cached[gr]:
		return "", true
	case m.stored[gr]:
		return metrics.UncachedNoWatchCache, true
	}
	return "", false // not stored yet: a custom resource's storage is made on its first request
}

// detected reports whether apiserver was judged since it was pinned.
func (c *Checker) detected(apiserver string) bool {
	c.uncached.mu.Lock()
	defer c.uncached.mu.Unlock()
	return c.uncached.detected[apiserver]
}

// uncachedReason is what detectUncached found of resource on apiserver.
func (c *Checker) uncachedReason(resource, apiserver string) string {
	c.uncached.mu.Lock()
	defer c.uncached.mu.Unlock()
	return c.uncached.reasons[[2]string{resource, apiserver}]
}

// forgetUncached drops what is known of apiserver's caches, for one no
// longer pinned: when it is pinned again it may have restarted with other
// flags.
func (c *Checker) forgetUncached(apiserver string) {
	c.uncached.mu.Lock()
	defer c.uncached.mu.Unlock()
	for k := range c.uncached.reasons {
		if k[1] == apiserver {
			delete(c.uncached.reasons, k)
		}
	}
	delete(c.uncached.detected, apiserver)
	delete(c.uncached.problems, "metrics "+apiserver)
}

// notChecked reports a resource the apiserver serves without a watch
// cache, in place of its check: its state, no count, and a window that
// starts over should it be cached again.
func (c *Checker) notChecked(r resolved, apiserver, reason string) {
	c.mu.Lock()
	delete(c.windows, [2]string{r.label, apiserver})
	c.mu.Unlock()
	if c.opts.Observe != nil {
		c.opts.Observe(Event{APIServer: apiserver, Resource: r.label, Verdict: Verdict{Outcome: Uncached, Reason: reason}})
	}
}

// problem logs err, for what, with why, once while it persists.
func (c *Checker) problem(what string, err error, why string) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	c.uncached.mu.Lock()
	same := c.uncached.problems[what] == msg
	if msg == "" {
		delete(c.uncached.problems, what)
	} else {
		c.uncached.problems[what] = msg
	}
	c.uncached.mu.Unlock()
	if err != nil && !same {
		c.logger.Warn(why, "err", err)
	}
}

// servedAt is the group and resource of a list path (resolve's), and its
// group/version as an APIService names it.
func servedAt(path string) (schema.GroupResource, string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	gr := schema.GroupResource{Resource: parts[len(parts)-1]}
	if parts[0] == "api" {
		return gr, "/" + parts[1]
	}
	gr.Group = parts[1]
	return gr, parts[1] + "/" + parts[2]
}

// cacheMetrics are the resources an apiserver's /metrics show stored, and
// cached.
type cacheMetrics struct {
	stored, cached map[schema.GroupResource]bool
}

// Families of an apiserver's /metrics labelled by group and resource: one
// series per stored resource, and one per cached resource (a cacher's
// capacity from its creation on, its initializations once it lists).
// Before 1.34 the stored resources are apiserver_storage_objects's, and
// every family is labelled by resource alone, as "resource.group"
// (k8s.io/apiserver v0.31 to v0.33: GroupResource.String()).
const (
	storedFamily       = "apiserver_resource_objects"
	legacyStoredFamily = "apiserver_storage_objects"
)

var (
	cachedFamilies = []string{"watch_cache_capacity", "apiserver_watch_cache_initializations_total"}
	parsedFamilies = append([]string{storedFamily, legacyStoredFamily}, cachedFamilies...)
)

// maxMetricsBytes bounds what is read of an apiserver's /metrics.
const maxMetricsBytes = 64 << 20

// readCacheMetrics reads host's /metrics: only the lines of the families
// that say what is stored and cached are parsed.
func readCacheMetrics(ctx context.Context, client *http.Client, host string) (cacheMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/metrics", nil)
	if err != nil {
		return cacheMetrics{}, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := client.Do(req)
	if err != nil {
		return cacheMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return cacheMetrics{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var kept bytes.Buffer
	sc := bufio.NewScanner(io.LimitReader(resp.Body, maxMetricsBytes))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if line := sc.Bytes(); wanted(line) {
			kept.Write(line)
			kept.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return cacheMetrics{}, fmt.Errorf("reading /metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&kept)
	if err != nil {
		return cacheMetrics{}, fmt.Errorf("parsing /metrics: %w", err)
	}
	storedFam := fams[storedFamily]
	if len(storedFam.GetMetric()) == 0 {
		storedFam = fams[legacyStoredFamily]
	}
	stored, err := groupResources(storedFam)
	if err != nil {
		return cacheMetrics{}, err
	}
	if len(stored) == 0 {
		return cacheMetrics{}, fmt.Errorf("/metrics has no %s or %s series: this apiserver's metrics cannot say what it stores", storedFamily, legacyStoredFamily)
	}
	out := cacheMetrics{stored: stored, cached: map[schema.GroupResource]bool{}}
	for _, f := range cachedFamilies {
		cached, err := groupResources(fams[f])
		if err != nil {
			return cacheMetrics{}, err
		}
		for gr := range cached {
			out.cached[gr] = true
		}
	}
	return out, nil
}

// wanted tells the lines of /metrics readCacheMetrics parses: the
// families', and their HELP and TYPE.
func wanted(line []byte) bool {
	name := line
	if rest, ok := bytes.CutPrefix(line, []byte("# ")); ok {
		if _, after, ok := bytes.Cut(rest, []byte(" ")); ok {
			name = after
		}
	}
	for _, f := range parsedFamilies {
		if n, ok := bytes.CutPrefix(name, []byte(f)); ok && len(n) > 0 && (n[0] == '{' || n[0] == ' ') {
			return true
		}
	}
	return false
}

// groupResources are the group and resource labels of a family's series;
// a series without both says the family is labelled otherwise than this
// reading knows (a group left out would make every grouped resource look
// uncached), an error.
func groupResources(f *dto.MetricFamily) (map[schema.GroupResource]bool, error) {
	out := map[schema.GroupResource]bool{}
	if f == nil {
		return out, nil
	}
	for _, m := range f.GetMetric() {
		var gr schema.GroupResource
		grouped, named := false, false
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "group":
				gr.Group, grouped = l.GetValue(), true
			case "resource":
				gr.Resource, named = l.GetValue(), true
			}
		}
		if !grouped && named {
			// Before 1.34: "deployments.apps", "configmaps".
			gr = schema.ParseGroupResource(gr.Resource)
		}
		if !named || gr.Resource == "" {
			return nil, fmt.Errorf("%s is not labelled by group and resource on this apiserver", f.GetName())
		}
		out[gr] = true
	}
	return out, nil
}
