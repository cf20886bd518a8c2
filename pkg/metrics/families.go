package metrics

// Type is a family's metric type.
type Type uint8

const (
	Counter Type = iota
	Gauge
	Histogram
)

func (t Type) String() string { return [...]string{"counter", "gauge", "histogram"}[t] }

// Scope says which series a family belongs to, and so the labels every
// one of its series starts with.
type Scope uint8

const (
	// ScopePath: one probe's path, labels probe, path, apiserver (empty
	// but on a path pinned to one apiserver).
	ScopePath Scope = iota
	// ScopeProbe: one probe, label probe.
	ScopeProbe
	// ScopeController: one controller a probe times, labels probe and
	// controller.
	ScopeController
	// ScopeResource: one resource type a probe's freshness checks list,
	// through one apiserver: labels probe, resource, apiserver (empty on
	// the load-balanced path).
	ScopeResource
	// ScopeReads: a probe's stale and ghost read checks of its markers on
	// one apiserver: labels probe, apiserver.
	ScopeReads
	// ScopeWatchList: one resource type a probe's WatchList sync checks
	// watch, through one apiserver: labels probe, resource, apiserver
	// (empty on the load-balanced path).
	ScopeWatchList
	// ScopeInfo: the exporter's own, on the probe registry beside the
	// results it qualifies.
	ScopeInfo
	// ScopeExporter: the exporter process's, on a registry of its own
	// (--web.disable-exporter-metrics leaves them out).
	ScopeExporter
	// ScopeAgent: a node agent's (watchprobe-agent), labels node and zone,
	// constant for the agent: the node is what its verdicts are about.
	ScopeAgent
)

// scopeLabels are the labels each scope's series start with.
var scopeLabels = [...][]string{
	ScopePath:       {"probe", "path", "apiserver"},
	ScopeProbe:      {"probe"},
	ScopeController: {"probe", "controller"},
	ScopeResource:   {"probe", "resource", "apiserver"},
	ScopeReads:      {"probe", "apiserver"},
	ScopeWatchList:  {"probe", "resource", "apiserver"},
	ScopeInfo:       nil,
	ScopeExporter:   nil,
	ScopeAgent:      {"node", "zone"},
}

// Label is a label of a family beyond its scope's.
type Label struct {
	Name string
	// Values, when the label's values are a closed set, are all of them:
	// every combination is a series from the first scrape, at zero, so
	// that rules and absent() see it, unless the family is Lazy. Nil: the
	// values come as they happen (an HTTP status code).
	Values []string
	// Zero is, for a label whose values come as they happen, the value
	// that is a series from the start, at zero: code 0 (no response), so
	// that an error ratio is 0 rather than empty.
	Zero string
}

// Family is one metric family, declared once: its name (after
// watchprobe_), one sentence of help (the explanations are in
// docs/metrics.md), its type, scope and labels, its buckets, and which
// series carry it. Registration, each probe's, path's and controller's
// series, the series at zero and the metrics reference derive from it.
type Family struct {
	Name   string
	Help   string
	Type   Type
	Scope  Scope
	Labels []Label
	// Buckets are a histogram's classic buckets; Native adds native
	// buckets beside them (with Options.NativeHistogramsOnly every
	// histogram has native buckets alone).
	Buckets []float64
	Native  bool
	// Lazy: no series exists until its first value (a relist of a reason
	// and mode, a resume window).
	Lazy bool
	// Lag: only on a probe's paths other than etcd, when it has an etcd
	// path to pair their arrivals with.
	Lag bool
	// Resume: one of a path's resume checks' (ForResume), not of the path.
	Resume bool
	// Collected: exported by a collector of its own (computed at scrape
	// time, or client_golang's); the row documents it.
	Collected bool
	// Group is the section of the metrics reference it is listed in.
	Group string
	// Report is the key under which a `watchprobe check` report counts a
	// path's family in total (docs/check-report.schema.json); empty for a
	// family the report counts otherwise or not at all.
	Report string
}

// The groups of the metrics reference, in order.
const (
	groupLatency     = "Latency and writes"
	groupVerdicts    = "Delivery verdicts"
	groupWatch       = "Watch health"
	groupResume      = "Resume checks"
	groupControllers = "Controller reactions"
	groupFreshness   = "List freshness"
	groupWatchList   = "WatchList syncs"
	groupSelfHealth  = "Self-health"
	groupAgent       = "Node agents"
	groupExporter    = "The exporter itself"
)

// Groups are the sections of the metrics reference, in order.
var Groups = []string{groupLatency, groupVerdicts, groupWatch, groupResume, groupControllers, groupFreshness, groupWatchList, groupSelfHealth, groupAgent, groupExporter}

var (
	events  = Label{Name: "event", Values: []string{EventAdded, EventModified, EventDeleted}}
	reasons = Label{Name: "reason", Values: MissedReasons}
	verbs   = Label{Name: "verb", Values: []string{VerbCreate, VerbUpdate, VerbDelete}}
	code    = Label{Name: "code", Zero: "0"}
)

var (
	modes               = Label{Name: "mode", Values: []string{ModeList, ModeWatchList}}
	reactionReasons     = Label{Name: "reason", Values: ReactionReasons}
	unmeasurableReasons = Label{Name: "reason", Values: UnmeasurableReasons}
	refusalCauses       = Label{Name: "cause", Values: RefusalCauses}
	pathRefusals        = Label{Name: "reason", Values: PathRefusals}
)

// FullName is the family's name as exported.
func (f *Family) FullName() string { return namespace + "_" + f.Name }

// LabelNames are every label of the family's series, its scope's first.
func (f *Family) LabelNames() []string {
	names := append([]string(nil), scopeLabels[f.Scope]...)
	for _, l := range f.Labels {
		names = append(names, l.Name)
	}
	return names
}
