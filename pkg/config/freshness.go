package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FreshnessConfig has the probe, every Every, time a consistent LIST (no
// resourceVersion) of each resource in its own namespace, on the
// load-balanced path and on each apiserver it pins: kube-apiserver 1.34
// and later serve it from the resource's watch cache only once that cache
// has caught up with etcd's current revision, so its wait is that cache's
// lag. And, on each pinned apiserver, a resourceVersion=0 LIST of the
// probe's own markers, served from that apiserver's cache as it is, judged
// against the writes the probe had acknowledged: stale and ghost reads.
type FreshnessConfig struct {
	// Resources are resource types listed in the probe's namespace, as
	// resource (core) or resource.group: pods,
	// endpointslices.discovery.k8s.io, widgets.example.com. Each needs
	// list permission on it in that namespace only.
	Resources []string `yaml:"resources"`
	// ClusterResources are cluster-scoped types (nodes, a cluster-scoped
	// CRD's resource), listed by a name no object has, as every resource
	// is, so that the answer stays empty however large the cluster. They
	// need a ClusterRole, which the chart renders only when this is set.
	ClusterResources []string `yaml:"cluster_resources"`
	// CRDs are API groups (example.com) whose served namespaced custom
	// resources are added, found by listing the CRDs again every 10
	// rounds, up to MaxCRDs of them. Only named groups: list on each is
	// all these checks need in the probe's namespace, and a grant on every
	// group would include Secrets.
	CRDs CRDGroups `yaml:"crds"`
	// MaxCRDs bounds the resources CRDs adds: each is a label value and a
	// request per check and apiserver.
	MaxCRDs int `yaml:"max_crds"`
	// Every is the time between the starts of two rounds of checks.
	Every model.Duration `yaml:"every"`
	// Timeout bounds one LIST; the apiserver is asked to give up at it (a
	// 504), and the client waits a little longer for that answer. It is at
	// least 4/3 x (Bound + 500ms): a quarter of it may go to the
	// apiserver's queue, and a LIST that falls back at the bound must
	// still be answered.
	Timeout model.Duration `yaml:"timeout"`
	// Bound is the apiserver's own wait for a fresh cache (k8s.io/apiserver
	// cacher's blockTimeout, 3s in 1.34-1.37): a check whose wait (its
	// consistent LIST's time over its resourceVersion=0 baseline's) was at
	// least this long waited for it, and then fell back to etcd.
	Bound model.Duration `yaml:"bound"`
	// QueuedAfter: each check also times a resourceVersion=0 LIST of the
	// resource, sent before the consistent one on the same connection and
	// served from the cache at once; when it took this long or longer, the
	// apiserver held both in its queue (API Priority and Fairness), and the
	// check is queued, not judged.
	QueuedAfter model.Duration `yaml:"queued_after"`
	// StuckWindow: a resource whose checks mostly fell back (or timed
	// out, or waited at the bound) over this window is stuck.
	StuckWindow model.Duration `yaml:"stuck_window"`
	// Reads turns the stale and ghost read checks of the markers on each
	// pinned apiserver on or off (on by default when freshness is set).
	Reads bool `yaml:"reads"`
	// set: the probe's configuration has a freshness setting.
	set bool
}

// Enabled reports whether the probe runs freshness checks.
func (f FreshnessConfig) Enabled() bool {
	return len(f.Resources) > 0 || len(f.ClusterResources) > 0 || len(f.CRDs) > 0
}

// CRDGroups are the API groups whose custom resources freshness.crds adds.
type CRDGroups []string

// crdsHint is how to write freshness.crds, for its errors.
const crdsHint = "name the API groups of the CRDs to check, e.g. `crds: [example.com, cert-manager.io]`; the chart grants list on those groups only"

// UnmarshalYAML takes a list of groups only: `crds: true` once meant every
// group, which cannot be granted without Secrets.
func (g *CRDGroups) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.SequenceNode {
		return fmt.Errorf("freshness.crds: %q is not a list of API groups; %s", node.Value, crdsHint)
	}
	var groups []string
	if err := node.Decode(&groups); err != nil {
		return fmt.Errorf("freshness.crds: %w; %s", err, crdsHint)
	}
	*g = groups
	return nil
}

// Has reports whether group is one of g.
func (g CRDGroups) Has(group string) bool {
	return slices.Contains(g, group)
}

// builtinGroups are the dotted API groups kube-apiserver (1.31 to 1.37)
// serves itself. They hold no custom resources, so naming one in crds
// would only widen the grant; the groups without a dot (apps, batch, ...)
// are refused as no CRD's group.
var builtinGroups = []string{
	"admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io",
	"authentication.k8s.io", "authorization.k8s.io", "certificates.k8s.io",
	"coordination.k8s.io", "discovery.k8s.io", "events.k8s.io",
	"flowcontrol.apiserver.k8s.io", "internal.apiserver.k8s.io", "networking.k8s.io",
	"node.k8s.io", "rbac.authorization.k8s.io", "resource.k8s.io",
	"scheduling.k8s.io", "storage.k8s.io", "storagemigration.k8s.io",
}

// crdGroupProblem says what is wrong with a group named in crds, "" if
// nothing.
func crdGroupProblem(g string) string {
	switch {
	case g == "":
		return `"" is the core group (Secrets, ConfigMaps, ...), which has no custom resources`
	case strings.Contains(g, "*"):
		return fmt.Sprintf("%q is a wildcard: it would grant list on every group, Secrets included", g)
	case len(validation.IsDNS1123Subdomain(g)) > 0:
		return fmt.Sprintf("%q is not an API group (a lowercase DNS name)", g)
	case !strings.Contains(g, "."):
		return fmt.Sprintf("%q has no dot: a CRD's group is a domain with at least one dot, and the groups without one are kube-apiserver's own", g)
	case slices.Contains(builtinGroups, g):
		return fmt.Sprintf("%q is a group kube-apiserver serves itself, which has no custom resources", g)
	}
	return ""
}

// DefaultFreshnessConfig is what `freshness: {}` sets: the resource types
// whose caches most controllers wait on, a round every 30s (docs/
// performance.md: 4 resources on 3 apiservers and the load balancer are
// 0.53 requests/s at 30s), and a stuck window of ten rounds.
func DefaultFreshnessConfig() FreshnessConfig {
	return FreshnessConfig{
		Resources:   []string{"pods", "endpointslices.discovery.k8s.io", "leases.coordination.k8s.io", "configmaps"},
		MaxCRDs:     20,
		Every:       model.Duration(30 * time.Second),
		Timeout:     model.Duration(5 * time.Second),
		Bound:       model.Duration(3 * time.Second),
		QueuedAfter: model.Duration(300 * time.Millisecond),
		StuckWindow: model.Duration(5 * time.Minute),
		Reads:       true,
	}
}

// Bounds of the freshness settings.
const (
	maxResources      = 30
	minFreshnessEvery = time.Second
	maxMaxCRDs        = 100
)

// etcdAfterBound is the time a LIST that waited the bound is given to be
// answered by etcd before its timeout.
const etcdAfterBound = 500 * time.Millisecond

// minFreshnessTimeout is the shortest timeout a LIST that falls back at
// bound is still answered in: API Priority and Fairness queues a request
// for up to a quarter of its timeout (k8s.io/apiserver pkg/server/filters:
// getRequestWaitContext), the cache then waits up to the bound, and etcd
// answers in etcdAfterBound: timeout x 3/4 >= bound + etcdAfterBound. It
// also makes a timeout the evidence of a fault, never of the queue (the
// freshness judgement), rounded up to 100ms.
func minFreshnessTimeout(bound time.Duration) time.Duration {
	least := (bound + etcdAfterBound) * 4 / 3
	return (least + 100*time.Millisecond - 1).Truncate(100 * time.Millisecond)
}

func (f FreshnessConfig) validate(field func(name, format string, args ...any)) {
	if !f.set && !f.Enabled() {
		return
	}
	if !f.Enabled() {
		field("freshness.resources", "is empty; list resources, e.g. [pods, configmaps], name API groups in crds, e.g. [example.com], or remove freshness to turn the checks off")
	}
	validateResources("freshness", f.Resources, f.ClusterResources, field)
	seen := map[string]int{}
	for i, g := range f.CRDs {
		name := fmt.Sprintf("freshness.crds[%d]", i)
		if msg := crdGroupProblem(g); msg != "" {
			field(name, "%s; %s", msg, crdsHint)
			continue
		}
		if j, dup := seen[g]; dup {
			field(name, "%q is listed twice (also freshness.crds[%d])", g, j)
		}
		seen[g] = i
	}
	if f.MaxCRDs < 1 || f.MaxCRDs > maxMaxCRDs {
		field("freshness.max_crds", "%d is out of range; use 1 to %d", f.MaxCRDs, maxMaxCRDs)
	}
	if time.Duration(f.Every) < minFreshnessEvery {
		field("freshness.every", "%s is too short; use at least %s (30s is the default)", f.Every, model.Duration(minFreshnessEvery))
	}
	if time.Duration(f.Bound) <= 0 {
		field("freshness.bound", "must be positive, got %s; kube-apiserver 1.34-1.37 waits 3s", f.Bound)
	}
	if q := time.Duration(f.QueuedAfter); q <= 0 || q >= time.Duration(f.Bound) {
		field("freshness.queued_after", "%s is out of range; use more than 0 and less than the bound (%s): a cache read slower than that was queued (300ms is the default)", f.QueuedAfter, f.Bound)
	}
	if least := minFreshnessTimeout(time.Duration(f.Bound)); time.Duration(f.Timeout) < least {
		field("freshness.timeout", "%s is too short for the bound (%s); use at least %s (4/3 x (bound + %s)), or lower the bound: the apiserver may queue a LIST for a quarter of its timeout, then wait the bound before it asks etcd, so a shorter timeout turns every fallback into a timeout",
			f.Timeout, f.Bound, model.Duration(least), model.Duration(etcdAfterBound))
	} else if time.Duration(f.Timeout) >= time.Duration(f.Every) {
		field("freshness.timeout", "%s must be shorter than every (%s), so that rounds do not overlap", f.Timeout, f.Every)
	}
	if time.Duration(f.StuckWindow) < 3*time.Duration(f.Every) {
		field("freshness.stuck_window", "%s is too short; use at least 3 x every (%s), so that one slow check is not a stuck cache", f.StuckWindow, model.Duration(3*time.Duration(f.Every)))
	}
}

// validateResources checks a section's resources and cluster_resources:
// each a resource name, none twice, at most maxResources together.
func validateResources(section string, resources, cluster []string, field func(name, format string, args ...any)) {
	if n := len(resources) + len(cluster); n > maxResources {
		field(section+".resources", "lists %d resources with cluster_resources; use at most %d: each is a label value and a request per round and apiserver", n, maxResources)
	}
	seen := map[string]string{}
	for _, list := range []struct {
		name  string
		items []string
	}{{section + ".resources", resources}, {section + ".cluster_resources", cluster}} {
		for i, r := range list.items {
			name := fmt.Sprintf("%s[%d]", list.name, i)
			if msg := resourceProblem(r); msg != "" {
				field(name, "%q %s; write resource or resource.group, e.g. pods or endpointslices.discovery.k8s.io", r, msg)
				continue
			}
			if prev, dup := seen[r]; dup {
				field(name, "%q is listed twice (also %s)", r, prev)
			}
			seen[r] = name
		}
	}
}

// resourceProblem says what is wrong with a resource name, "" if nothing.
func resourceProblem(r string) string {
	resource, group, _ := strings.Cut(r, ".")
	if resource == "" || len(validation.IsDNS1123Label(resource)) > 0 {
		return "is not a resource name (lowercase plural, as in kubectl api-resources)"
	}
	if group != "" && len(validation.IsDNS1123Subdomain(group)) > 0 {
		return "has an invalid group"
	}
	return ""
}

// UnmarshalYAML fills the defaults of DefaultFreshnessConfig: `freshness:
// {}` turns the checks on with them.
func (f *FreshnessConfig) UnmarshalYAML(node *yaml.Node) error {
	*f = DefaultFreshnessConfig()
	f.set = true
	type plain FreshnessConfig
	return decodeSection[FreshnessConfig](node, "freshness", "{resources: [pods, configmaps], every: 30s}", func() error { return node.Decode((*plain)(f)) })
}

// MarshalYAML writes checks that are off as null, which loads back as off.
func (f FreshnessConfig) MarshalYAML() (any, error) {
	type plain FreshnessConfig
	return sectionOrNull(f.Enabled(), plain(f))
}

// Resource is one configured resource type, split.
type Resource struct {
	Resource, Group string
	Cluster         bool
}

// String is the resource as configured and labelled: resource or
// resource.group.
func (r Resource) String() string {
	if r.Group == "" {
		return r.Resource
	}
	return r.Resource + "." + r.Group
}

// ParseResources are the configured resources, namespaced first, in order.
func (f FreshnessConfig) ParseResources() []Resource {
	return parseResources(f.Resources, f.ClusterResources)
}

// parseResources are resources and cluster, split, namespaced first.
func parseResources(resources, cluster []string) []Resource {
	var out []Resource
	for _, list := range []struct {
		items   []string
		cluster bool
	}{{resources, false}, {cluster, true}} {
		for _, r := range list.items {
			res, group, _ := strings.Cut(r, ".")
			out = append(out, Resource{Resource: res, Group: group, Cluster: list.cluster})
		}
	}
	return slices.Clip(out)
}
