package config

import (
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// WatchListConfig has the probe, every Every, sync each resource as a
// client-go informer does since client-go 1.35 (WatchListClient): a watch
// with sendInitialEvents=true, resourceVersionMatch=NotOlderThan and
// bookmarks, in its own namespace, on the load-balanced path and on each
// apiserver it pins, timed to the bookmark annotated
// k8s.io/initial-events-end. An informer whose end bookmark does not come
// never syncs.
type WatchListConfig struct {
	// Resources are resource types watched in the probe's namespace, as
	// resource (core) or resource.group. Each needs watch permission on it
	// in that namespace only.
	Resources []string `yaml:"resources"`
	// ClusterResources are cluster-scoped types, watched for one name no
	// object has. They need a ClusterRole, which the chart renders only
	// when this is set.
	ClusterResources []string `yaml:"cluster_resources"`
	// Every is the time between the starts of two rounds of checks.
	Every model.Duration `yaml:"every"`
	// Bound is how long a check waits for the end bookmark: a sync without
	// it by then is missed.
	Bound model.Duration `yaml:"bound"`
	// QueuedAfter: each sync first times a resourceVersion=0 watch of the
	// same name on the same connection, answered at once after the
	// apiserver's queue; one that took this long says the sync waited in
	// the exporter's own priority level, and a sync whose verdict rests on
	// its time is then queued, not judged.
	QueuedAfter model.Duration `yaml:"queued_after"`
	// StuckWindow: a resource whose syncs mostly missed their end bookmark
	// over this window is stuck.
	StuckWindow model.Duration `yaml:"stuck_window"`
	// set: the probe's configuration has a watch_list setting.
	set bool
}

// Enabled reports whether the probe runs WatchList sync checks.
func (w WatchListConfig) Enabled() bool {
	return len(w.Resources) > 0 || len(w.ClusterResources) > 0
}

// DefaultWatchListConfig is what `watch_list: {}` sets: the resource types
// whose informers most controllers start, a round every 30s, a bound above
// kube-apiserver's own 3s wait for a fresh watch cache (so that a cache
// behind is told apart from a sync that hangs), and a stuck window of ten
// rounds.
func DefaultWatchListConfig() WatchListConfig {
	return WatchListConfig{
		Resources:   []string{"pods", "endpointslices.discovery.k8s.io", "leases.coordination.k8s.io", "configmaps"},
		Every:       model.Duration(30 * time.Second),
		Bound:       model.Duration(5 * time.Second),
		QueuedAfter: model.Duration(300 * time.Millisecond),
		StuckWindow: model.Duration(5 * time.Minute),
	}
}

const minWatchListEvery = time.Second

func (w WatchListConfig) validate(field func(name, format string, args ...any)) {
	if !w.set && !w.Enabled() {
		return
	}
	if !w.Enabled() {
		field("watch_list.resources", "is empty; list resources, e.g. [pods, configmaps], or remove watch_list to turn the checks off")
	}
	validateResources("watch_list", w.Resources, w.ClusterResources, field)
	if time.Duration(w.Every) < minWatchListEvery {
		field("watch_list.every", "%s is too short; use at least %s (30s is the default)", w.Every, model.Duration(minWatchListEvery))
	}
	if time.Duration(w.Bound) <= 0 {
		field("watch_list.bound", "must be positive, got %s; 5s is the default", w.Bound)
	} else if time.Duration(w.Bound) >= time.Duration(w.Every) {
		field("watch_list.bound", "%s must be shorter than every (%s), so that a check ends before the next round", w.Bound, w.Every)
	}
	if q, b := time.Duration(w.QueuedAfter), time.Duration(w.Bound); q <= 0 || (b > 0 && q >= b) {
		field("watch_list.queued_after", "%s is out of range; use more than 0 and less than the bound (%s): a sync whose baseline took that long waited in the apiserver's queue (300ms is the default)", w.QueuedAfter, w.Bound)
	}
	if time.Duration(w.StuckWindow) < 3*time.Duration(w.Every) {
		field("watch_list.stuck_window", "%s is too short; use at least 3 x every (%s), so that one slow sync is not a stuck one", w.StuckWindow, model.Duration(3*time.Duration(w.Every)))
	}
}

// UnmarshalYAML fills the defaults of DefaultWatchListConfig: `watch_list:
// {}` turns the checks on with them.
func (w *WatchListConfig) UnmarshalYAML(node *yaml.Node) error {
	*w = DefaultWatchListConfig()
	w.set = true
	type plain WatchListConfig
	return decodeSection[WatchListConfig](node, "watch_list", "{resources: [pods, configmaps], every: 30s}", func() error { return node.Decode((*plain)(w)) })
}

// MarshalYAML writes checks that are off as null, which loads back as off.
func (w WatchListConfig) MarshalYAML() (any, error) {
	type plain WatchListConfig
	return sectionOrNull(w.Enabled(), plain(w))
}

// ParseResources are the configured resources, namespaced first, in order.
func (w WatchListConfig) ParseResources() []Resource {
	return parseResources(w.Resources, w.ClusterResources)
}
