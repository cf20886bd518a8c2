package freshness

import (
	"context"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/watchprobe/watchprobe/pkg/config"
)

// resolve finds each configured resource's served version and scope by
// discovery, and, with crds, adds every served namespaced custom resource
// up to max_crds. A resource discovery does not know is kept, failing
// not_found, so that its series say so rather than vanish.
func (c *Checker) resolve(ctx context.Context) {
	wanted := c.opts.Config.ParseResources()
	var extra []config.Resource
	var crdErr error
	if c.opts.Config.CRDs {
		crds, err := c.crds(ctx)
		crdErr = err
		if err != nil {
			c.logger.Warn("cannot list CustomResourceDefinitions; crds adds none this time (the exporter needs list on them, cluster-wide)", "err", err)
		}
		for _, r := range crds {
			if len(extra) >= c.opts.Config.MaxCRDs {
				c.logger.Warn("more served custom resources than max_crds; the rest are not checked", "max_crds", c.opts.Config.MaxCRDs)
				break
			}
			if !slices.ContainsFunc(wanted, func(w config.Resource) bool { return w.String() == r.String() }) {
				extra = append(extra, r)
			}
		}
	}
	hc, err := c.unbounded()
	if err != nil {
		c.logger.Error("cannot discover resources", "err", err)
		return
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(c.opts.LoadBalanced, hc)
	if err != nil {
		c.logger.Error("cannot discover resources", "err", err)
		return
	}
	// Partial results are fine: a group whose aggregated API is down must
	// not hide the others.
	groups, lists, derr := dc.ServerGroupsAndResources()
	if derr != nil {
		c.logger.Warn("discovery was partial", "err", derr)
	}
	lists = preferredFirst(groups, lists)
	var out []resolved
	for _, w := range append(wanted, extra...) {
		out = append(out, resolveOne(w, lists))
	}
	c.mu.Lock()
	before := c.resolved
	c.resolved = keepResolved(before, out, derr != nil, crdErr != nil)
	dropped := droppedLabels(before, c.resolved)
	for _, l := range dropped {
		maps.DeleteFunc(c.windows, func(k [2]string, _ []Verdict) bool { return k[0] == l })
	}
	c.mu.Unlock()
	for _, l := range dropped {
		c.logger.Info("a custom resource is no longer served; its freshness series are removed", "resource", l)
		c.sink.forgetResource(l)
	}
}

// droppedLabels are the resources of before that now no longer has: the
// custom resources crds found whose CRD is gone (a configured resource
// stays, failing not_found).
func droppedLabels(before, now []resolved) []string {
	has := map[string]bool{}
	for _, r := range now {
		has[r.label] = true
	}
	var out []string
	for _, r := range before {
		if !has[r.label] {
			out = append(out, r.label)
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
func keepResolved(before, now []resolved, partial, noCRDs bool) []resolved {
	if before == nil || (!partial && !noCRDs) {
		return now
	}
	had := map[string]resolved{}
	for _, r := range before {
		had[r.label] = r
	}
	out := make([]resolved, 0, len(now))
	seen := map[string]bool{}
	for _, r := range now {
		if p, ok := had[r.label]; ok && partial && r.err != nil && p.err == nil {
			r = p
		}
		out = append(out, r)
		seen[r.label] = true
	}
	if noCRDs {
		for _, r := range before {
			if !seen[r.label] {
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
// (preferredFirst: the preferred first).
func resolveOne(w config.Resource, lists []*metav1.APIResourceList) resolved {
	r := resolved{label: w.String(), cluster: w.Cluster}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil || gv.Group != w.Group {
			continue
		}
		for _, ar := range l.APIResources {
			if ar.Name != w.Resource || !slices.Contains(ar.Verbs, "list") {
				continue
			}
			if ar.Namespaced == w.Cluster {
				r.err = fmt.Errorf("%s is %s; list it under %s", w, scope(ar.Namespaced), map[bool]string{true: "resources", false: "cluster_resources"}[ar.Namespaced])
				return r
			}
			prefix := "/apis/" + gv.String()
			if gv.Group == "" {
				prefix = "/api/" + gv.Version
			}
			if w.Cluster {
				r.path = prefix + "/" + w.Resource
			} else {
				r.path = prefix + "/namespaces/%s/" + w.Resource
			}
			return r
		}
	}
	r.err = fmt.Errorf("%s is not served", w)
	return r
}

func scope(namespaced bool) string {
	if namespaced {
		return "namespaced"
	}
	return "cluster-scoped"
}

// crds are the served namespaced custom resources, established, in name
// order.
func (c *Checker) crds(ctx context.Context) ([]config.Resource, error) {
	hc, err := c.unbounded()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(c.opts.LoadBalanced, hc)
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
		if scope != "Namespaced" || plural == "" {
			continue
		}
		out = append(out, config.Resource{Resource: plural, Group: group})
	}
	slices.SortFunc(out, func(a, b config.Resource) int { return compareStrings(a.String(), b.String()) })
	return out, nil
}
