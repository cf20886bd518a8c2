package freshness

import (
	"context"
	"maps"
)

// resolve takes the resources' list paths from discovery (resolve.Resolver)
// and forgets the windows and series of those no longer checked.
func (c *Checker) resolve(ctx context.Context) {
	now, dropped := c.resolver.Resolve(ctx)
	var out []resolved
	for _, r := range now {
		out = append(out, resolved{label: r.Label, path: r.Path, cluster: r.Cluster, err: r.Err})
	}
	c.mu.Lock()
	c.resolved = out
	for _, l := range dropped {
		maps.DeleteFunc(c.windows, func(k [2]string, _ []Verdict) bool { return k[0] == l })
	}
	c.mu.Unlock()
	for _, l := range dropped {
		c.logger.Info("a custom resource is no longer served; its freshness series are removed", "resource", l)
		c.sink.forgetResource(l)
	}
}
