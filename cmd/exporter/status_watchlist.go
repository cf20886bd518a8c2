package main

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

// watchList hears the WatchList sync checks of the probe run track started
// last under name; an apiserver no longer pinned (Retired, not stuck)
// leaves the line.
func (b *board) watchList(name string) func(watchlist.Event) {
	b.mu.Lock()
	s := &boardSink{b: b, name: name, gen: b.gen}
	b.mu.Unlock()
	return func(e watchlist.Event) {
		b.mu.Lock()
		defer b.mu.Unlock()
		ps := b.status(s)
		if ps == nil {
			return
		}
		key := e.Resource + " on " + cmp.Or(e.APIServer, "the load balancer")
		if e.Stuck {
			ps.syncsStuck[key] = true
		} else {
			delete(ps.syncsStuck, key)
		}
	}
}

// watchListLine is the status page's line on the probe's WatchList syncs:
// which are stuck; "" when none is.
func (b *board) watchListLine(name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.probes[name]
	if ps == nil || len(ps.syncsStuck) == 0 {
		return ""
	}
	return "syncs stuck (no end bookmark within the bound): " + strings.Join(slices.Sorted(maps.Keys(ps.syncsStuck)), ", ")
}
