// Package resolve is what the list-side probe kinds (pkg/probe/freshness,
// pkg/probe/watchlist) share of how they reach what they check: each
// configured resource type resolved by discovery to the path it is listed
// and watched at, and the client configuration pinned to one apiserver.
// It knows no probe kind.
package resolve

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
)

// Resource is one resource type to check.
type Resource struct {
	// Label is the resource as configured and labelled.
	Label string
	// Path is where it is listed: under the namespace ("%s") for a
	// namespaced one.
	Path    string
	Cluster bool
	// Err is set when it is not served: every check of it fails not_found.
	Err error
}

// Resolver resolves a fixed set of resource types, and every served
// namespaced custom resource of the groups crds names, again on each
// Resolve, remembering the previous resolution.
type Resolver struct {
	config *rest.Config
	// client, when set, is the HTTP client discovery and the CRD listing
	// go over: a probe kind's own connection, not client-go's shared one.
	client func() (*http.Client, error)
	logger *slog.Logger
	wanted []config.Resource
	// crds are the API groups whose custom resources are added: only
	// those, the only ones the exporter is granted list on.
	crds    config.CRDGroups
	maxCRDs int
	// verb is the verb a resource must be served with besides list.
	verb string
	last []Resource
	// calls counts Every's calls.
	calls int
}

// Every is the resolution to use in a round: resolved again on the first
// call, every n-th after it, and on each call while nothing has been
// resolved; else the last resolution. Not for resolutions that drop
// resources (CRDs): it does not say which went.
func (r *Resolver) Every(ctx context.Context, n int) []Resource {
	due := r.last == nil || r.calls%n == 0
	r.calls++
	if due {
		r.Resolve(ctx)
	}
	return r.last
}

// New prepares a Resolver of wanted over rc; it adds every served
// namespaced custom resource of the groups crds names, up to maxCRDs.
func New(rc *rest.Config, wanted []config.Resource, crds config.CRDGroups, maxCRDs int, logger *slog.Logger) *Resolver {
	return &Resolver{config: rc, logger: logger, wanted: wanted, crds: crds, maxCRDs: maxCRDs}
}

// Needs makes r resolve only resources discovery says are served with
// verb as well as list (watch, for checks that watch): one without it
// fails, naming the verb, rather than answer every check 405.
func (r *Resolver) Needs(verb string) *Resolver {
	r.verb = verb
	return r
}

// Over makes r send its requests over the HTTP client client returns.
func (r *Resolver) Over(client func() (*http.Client, error)) *Resolver {
	r.client = client
	return r
}

// httpClient is the client r's requests go over: its own, or one built
// from its config.
func (r *Resolver) httpClient() (*http.Client, error) {
	if r.client != nil {
		return r.client()
	}
	return rest.HTTPClientFor(r.config)
}

// Resolve finds each configured resource's served version and scope by
// discovery, and adds every served namespaced custom resource of the
// groups crds names, up to max_crds. A resource discovery does not know is kept, failing
// not_found, so that its series say so rather than vanish. dropped are the
// labels of the previous resolution that this one no longer has (a custom
// resource whose CRD is gone). When discovery cannot even be asked (no
// group came back), the previous resolution stands, nil before any
// succeeded: an apiserver not reachable yet makes no resource not served.
func (r *Resolver) Resolve(ctx context.Context) (now []Resource, dropped []string) {
	var extra []config.Resource
	var crdErr error
	if len(r.crds) > 0 {
		crds, err := r.listCRDs(ctx)
		crdErr = err
		if err != nil {
			r.logger.Warn("cannot list CustomResourceDefinitions; crds adds none this time (the exporter needs list on them, cluster-wide)", "err", err)
		}
		for _, c := range crds {
			if len(extra) >= r.maxCRDs {
				r.logger.Warn("more served custom resources than max_crds; the rest are not checked", "max_crds", r.maxCRDs)
				break
			}
			if !slices.ContainsFunc(r.wanted, func(w config.Resource) bool { return w.String() == c.String() }) {
				extra = append(extra, c)
			}
		}
	}
	hc, err := r.httpClient()
	if err != nil {
		r.logger.Error("cannot discover resources", "err", err)
		return r.last, nil
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(r.config, hc)
	if err != nil {
		r.logger.Error("cannot discover resources", "err", err)
		return r.last, nil
	}
	// Partial results are fine: a group whose aggregated API is down must
	// not hide the others.
	groups, lists, derr := dc.ServerGroupsAndResources()
	if derr != nil && len(groups) == 0 {
		// Not one group: the apiserver was not asked at all (unreachable,
		// not ready, refusing). Nothing is known of any resource, so none
		// is judged not served; at the start there is then no resolution,
		// and Every asks again on its next call.
		r.logger.Warn("cannot discover resources; keeping the previous resolution", "err", derr, "resolved_before", r.last != nil)
		return r.last, nil
	}
	if derr != nil {
		r.logger.Warn("discovery was partial", "err", derr)
	}
	lists = preferredFirst(groups, lists)
	var out []Resource
	for _, w := range append(slices.Clone(r.wanted), extra...) {
		out = append(out, resolveOne(w, lists, r.verb))
	}
	before := r.last
	r.last = keepResolved(before, out, derr != nil, crdErr != nil)
	return r.last, droppedLabels(before, r.last)
}

// droppedLabels are the resources of before that now no longer has: the
// custom resources crds found whose CRD is gone (a configured resource
// stays, failing not_found).
func droppedLabels(before, now []Resource) []string {
	has := map[string]bool{}
	for _, r := range now {
		has[r.Label] = true
	}
	var out []string
	for _, r := range before {
		if !has[r.Label] {
			out = append(out, r.Label)
		}
	}
	return out
}

// keepResolved is the resolution to use: now's, but where discovery
// failed or was partial (partial), a resource it did not find keeps its
// earlier resolution, and where the CRDs could not be listed (noCRDs),
// the custom resources crds found earlier stay: an apiserver restarting
// under the load balancer must not turn every check into not_found for
// ten rounds, nor push real verdicts out of the stuck window.
func keepResolved(before, now []Resource, partial, noCRDs bool) []Resource {
	if before == nil || (!partial && !noCRDs) {
		return now
	}
	had := map[string]Resource{}
	for _, r := range before {
		had[r.Label] = r
	}
	out := make([]Resource, 0, len(now))
	seen := map[string]bool{}
	for _, r := range now {
		if p, ok := had[r.Label]; ok && partial && r.Err != nil && p.Err == nil {
			r = p
		}
		out = append(out, r)
		seen[r.Label] = true
	}
	if noCRDs {
		for _, r := range before {
			if !seen[r.Label] {
				out = append(out, r)
			}
		}
	}
	return out
}

// preferredFirst orders discovery's lists as its groups order their
// versions, each group's preferred version first. Aggregated discovery
// (which client-go uses wherever the apiserver serves it) returns the lists
// in the order of a map: taken as they come, a resource served in two
// versions would be listed in either, from one resolve to the next. Lists
// of a version no group names come last, by name.
func preferredFirst(groups []*metav1.APIGroup, lists []*metav1.APIResourceList) []*metav1.APIResourceList {
	byGV := make(map[string]*metav1.APIResourceList, len(lists))
	for _, l := range lists {
		byGV[l.GroupVersion] = l
	}
	out := make([]*metav1.APIResourceList, 0, len(lists))
	take := func(gv string) {
		if l := byGV[gv]; l != nil {
			out = append(out, l)
			delete(byGV, gv)
		}
	}
	for _, g := range groups {
		take(g.PreferredVersion.GroupVersion)
		for _, v := range g.Versions {
			take(v.GroupVersion)
		}
	}
	for _, gv := range slices.Sorted(maps.Keys(byGV)) {
		out = append(out, byGV[gv])
	}
	return out
}

// resolveOne is w's list path among discovery's lists: the first served
// version of its group that has it and can list it, in the order of lists
// (preferredFirst: the preferred first); with verb, one served without it
// fails.
func resolveOne(w config.Resource, lists []*metav1.APIResourceList, verb string) Resource {
	r := Resource{Label: w.String(), Cluster: w.Cluster}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil || gv.Group != w.Group {
			continue
		}
		for _, ar := range l.APIResources {
			if ar.Name != w.Resource || !slices.Contains(ar.Verbs, "list") {
				continue
			}
			if verb != "" && !slices.Contains(ar.Verbs, verb) {
				r.Err = fmt.Errorf("%s is served without %s (verbs %v), which these checks need", w, verb, ar.Verbs)
				return r
			}
			if ar.Namespaced == w.Cluster {
				r.Err = fmt.Errorf("%s is %s; list it under %s", w, scope(ar.Namespaced), map[bool]string{true: "resources", false: "cluster_resources"}[ar.Namespaced])
				return r
			}
			prefix := "/apis/" + gv.String()
			if gv.Group == "" {
				prefix = "/api/" + gv.Version
			}
			if w.Cluster {
				r.Path = prefix + "/" + w.Resource
			} else {
				r.Path = prefix + "/namespaces/%s/" + w.Resource
			}
			return r
		}
	}
	r.Err = fmt.Errorf("%s is not served", w)
	return r
}

func scope(namespaced bool) string {
	if namespaced {
		return "namespaced"
	}
	return "cluster-scoped"
}

// listCRDs are the namespaced custom resources of the groups r.crds
// names, in name order. A CRD of another group is not one of them, even
// where the exporter could list it: the groups are what the chart grants
// list on, and what the operator chose to measure.
func (r *Resolver) listCRDs(ctx context.Context) ([]config.Resource, error) {
	hc, err := r.httpClient()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(r.config, hc)
	if err != nil {
		return nil, err
	}
	// Read as unstructured: the apiextensions types are a module of
	// their own, for three fields.
	crdResource := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	l, err := dyn.Resource(crdResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []config.Resource
	for _, u := range l.Items {
		scope, _, _ := unstructured.NestedString(u.Object, "spec", "scope")
		group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
		if scope != "Namespaced" || plural == "" || !r.crds.Has(group) {
			continue
		}
		out = append(out, config.Resource{Resource: plural, Group: group})
	}
	slices.SortFunc(out, func(a, b config.Resource) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// Pinned is base dialled at one apiserver's address, with the serving
// certificate verified against serverName: a certificate names the
// Service, not necessarily each address.
func Pinned(base *rest.Config, addr, serverName string) *rest.Config {
	c := rest.CopyConfig(base)
	c.Host = "https://" + addr
	c.APIPath = ""
	c.TLSClientConfig.ServerName = serverName
	return c
}
