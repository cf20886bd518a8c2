package probe

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Kind says what an Outcome concluded.
type Kind uint8

// The outcomes of a probe. Per write and path: what became of the write on
// the path. Per path: what its streams did. Per write: its send and its
// answer. Per cycle: its verdict.
const (
	// Arrived: the first delivery of an acknowledged write on a path, At,
	// Latency after the write's send; Late when after the deadline (the
	// write is also Missed there).
	Arrived Kind = iota + 1
	// Missed: not delivered by the deadline, for Reason.
	Missed
	// Lost: not delivered by the lost horizon (Limit after the write's
	// answer), for Reason; Gone when its path was removed first.
	Lost
	// ArrivedAfterLost: a delivery of a write already counted Lost.
	ArrivedAfterLost
	// Duplicate: delivered again with no relist in between.
	Duplicate
	// Replayed: delivered again after a relist, as a relist is expected to.
	Replayed
	// OutOfOrder: delivered after AfterSeq, a later write of the same writer.
	OutOfOrder
	// AfterFailedWrite: a delivery of a write whose answer was an error.
	AfterFailedWrite
	// APIServerLag: Latency is the write's arrival on the path, At, minus
	// its arrival on the etcd path.
	APIServerLag
	// ForeignChange: someone else's change of the write's marker arrived,
	// At: a resourceVersion carrying the write's sequence number that is
	// not the write's own; Manager names the client, when known.
	ForeignChange

	// Activity: an event of the probe's arrived on the path, At.
	Activity
	// Bookmark: a BOOKMARK arrived, At.
	Bookmark
	// Up: the path has a stream open and caught up; Down: it has not.
	Up
	Down
	// Stalled: the path's live stream has delivered nothing for Limit
	// while writes were answered; Unstalled: no longer.
	Stalled
	Unstalled
	// StreamEnded: a watch stream ended, for Reason, after Latency, with Err.
	StreamEnded
	// RequestFailed: a list or watch Request failed before any stream
	// existed, with Code (0: no response) and Err.
	RequestFailed
	// Relisted: the path began fetching its whole state, for Reason, by Mode.
	Relisted
	// RelistDone: that fetch completed, At, by Mode, after Latency.
	RelistDone
	// Throttled: a Request was answered 429; Path nil for a write's.
	Throttled

	// Sent: the write is about to be sent, At.
	Sent
	// Answered: the apiserver answered the write of Verb after a round trip
	// of Latency, with Err and its Code when it failed.
	Answered
	// Settled: every path delivered, missed or lost the write, or it failed.
	Settled

	// CycleJudged: the verdict OK of Cycle; Newest when no newer cycle has
	// been judged, so that it is the probe's current verdict.
	CycleJudged

	// ResumeChecked: a watch resumed on the path from Limit ago; Reason is
	// the verdict (replayed, expired, incomplete, error), Resume its detail.
	ResumeChecked
	// ResumeWindow: Limit is the largest age that replayed exactly in a
	// round of resume checks on the path that judged every age.
	ResumeWindow

	// The outcomes of a Controller's marker object (controller.go), with
	// Path nil. ControllerChanged: the apiserver answered a spec change
	// (or the object's create, Verb) to generation Seq after a round trip
	// of Latency, with Err and its Code when it failed.
	ControllerChanged
	// Reacted: the status whose observedGeneration reached generation Seq
	// arrived, At, Latency after the change was sent; Late when after the
	// deadline (the reaction is also ReactionMissed there). Share is the
	// arrival minus that of the change itself on the exporter's watch,
	// negative when the change was not seen there first.
	Reacted
	// ReactionMissed: no reaction to generation Seq by the deadline, Limit.
	ReactionMissed
	// ReactionLost: no reaction to generation Seq by the lost horizon,
	// Limit after the change was answered.
	ReactionLost
)

// Outcome is one conclusion of a probe's judgement. Which fields are set
// depends on its Kind.
type Outcome struct {
	Kind Kind
	// Path is the path concluded about; nil for outcomes of a write or a
	// cycle as a whole.
	Path *PathInfo
	// The write concluded about: its marker, sequence number and the watch
	// event it causes.
	Marker string
	Seq    uint64
	Event  string

	At       time.Time
	Latency  time.Duration
	Limit    time.Duration // the deadline, the lost horizon, the stall bound
	Late     bool
	Gone     bool
	Reason   string
	Mode     string
	Request  string
	Verb     string
	Code     int
	Err      error
	AfterSeq uint64
	Cycle    uint64
	OK       bool
	Newest   bool
	Resume   *ResumeVerdict
	// Controller names the controller of a controller outcome; Share is a
	// Reacted outcome's controller share.
	Controller string
	Share      time.Duration
	// Manager is the field manager of a ForeignChange's client.
	Manager string

	// trace is the write's span, nil unless the write is traced; rv the
	// resourceVersion the path delivered, for its events; ended that the
	// span had ended when the outcome was concluded; missedOn the paths
	// that missed it, for a Settled span's status.
	trace    *writeTrace
	rv       string
	ended    bool
	missedOn []string
}

// span is the outcome's write's span, one that does nothing if it has none.
func (o *Outcome) span() trace.Span {
	if o.trace == nil {
		return noopSpan
	}
	return o.trace.span
}

// A Sink hears a probe's outcomes, in the order they were concluded, after
// the probe's judgement has let go of its lock. It must be quick: the next
// outcomes wait for it.
type Sink interface {
	Outcome(Outcome)
}

// PathInfo names a path: its label and, for a path pinned to one
// apiserver, that apiserver's address.
type PathInfo struct {
	Name      string
	APIServer string
	series    *metrics.PathSeries
	attrs     []attribute.KeyValue
}

func newPathInfo(name, apiserver string, series *metrics.PathSeries) *PathInfo {
	p := &PathInfo{Name: name, APIServer: apiserver, series: series,
		attrs: []attribute.KeyValue{attribute.String("watchprobe.path", name)}}
	if apiserver != "" {
		p.attrs = append(p.attrs, attribute.String("watchprobe.apiserver", apiserver))
	}
	return p
}

// Label names the path for a person: the apiserver's address too for a
// path pinned to one.
func (p *PathInfo) Label() string {
	if p.APIServer != "" {
		return p.Name + " " + p.APIServer
	}
	return p.Name
}

// logArgs prefixes args with what names the path in a log line.
func (p *PathInfo) logArgs(args ...any) []any {
	if p.APIServer != "" {
		return append([]any{"path", p.Name, "apiserver", p.APIServer}, args...)
	}
	return append([]any{"path", p.Name}, args...)
}

// Anomaly names what went wrong, as the series it is counted in (without
// the watchprobe_ prefix and the probe label), for a person reading a
// cycle's anomalies: `events_missed_total{path="watch",reason="silent"}`.
// It is empty for an outcome that is no anomaly: an arrival on time, a
// replay after a relist, a watch that ended at its timeout or by the
// exporter's own stop, the initial relist. Someone else's change of a
// marker is named too: List-Watch did nothing wrong, but whoever reads the
// cycle should know that another client touches the probe's markers.
func (o Outcome) Anomaly() string {
	path := func(series string, labels ...string) string {
		l := []string{}
		if o.Path.APIServer != "" {
			l = append(l, "apiserver", o.Path.APIServer)
		}
		return seriesKey(series, append(append(l, "path", o.Path.Name), labels...)...)
	}
	switch o.Kind {
	case ReactionMissed:
		return seriesKey("controller_reactions_missed_total", "controller", o.Controller)
	case ReactionLost:
		return seriesKey("controller_reactions_lost_total", "controller", o.Controller)
	case Reacted:
		if o.Late {
			return seriesKey("controller_reactions_late_total", "controller", o.Controller)
		}
	case ControllerChanged:
		if o.Err != nil {
			return seriesKey("controller_change_errors_total", "controller", o.Controller)
		}
	case Missed:
		return path("events_missed_total", "reason", o.Reason)
	case Lost:
		return path("events_lost_total", "reason", o.Reason)
	case Duplicate:
		return path("events_duplicate_total")
	case ForeignChange:
		return path("marker_foreign_changes_total")
	case OutOfOrder:
		return path("events_out_of_order_total")
	case Arrived:
		if o.Late {
			return path("events_late_total")
		}
	case AfterFailedWrite:
		return path("events_after_failed_write_total")
	case RequestFailed:
		return path("requests_failed_total", "code", strconv.Itoa(o.Code), "request", o.Request)
	case Throttled:
		if o.Path == nil {
			return seriesKey("requests_throttled_total", "path", metrics.SourceWrite, "request", o.Request)
		}
		return path("requests_throttled_total", "request", o.Request)
	case StreamEnded:
		if o.Reason != metrics.EndTimeout && o.Reason != metrics.EndClient {
			return path("watch_restarts_total", "reason", o.Reason)
		}
	case Relisted:
		if o.Reason != metrics.RelistInitial {
			return path("relists_total", "mode", o.Mode, "reason", o.Reason)
		}
	case Answered:
		if o.Err != nil {
			return seriesKey("write_errors_total", "code", strconv.Itoa(o.Code), "verb", o.Verb)
		}
	case ResumeChecked:
		// An expired resume is the window's answer, not a fault.
		if o.Reason == metrics.ResumeIncomplete || o.Reason == metrics.ResumeError {
			return path("resume_checks_total", "age", model.Duration(o.Limit).String(), "outcome", o.Reason)
		}
	}
	return ""
}

// seriesKey writes a series as PromQL would select it, its labels sorted.
func seriesKey(name string, kv ...string) string {
	type label struct{ k, v string }
	var ls []label
	for i := 0; i+1 < len(kv); i += 2 {
		ls = append(ls, label{kv[i], kv[i+1]})
	}
	slices.SortFunc(ls, func(a, b label) int { return strings.Compare(a.k, b.k) })
	var b strings.Builder
	b.WriteString(name)
	for i, l := range ls {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", l.k, l.v)
	}
	if len(ls) > 0 {
		b.WriteByte('}')
	}
	return b.String()
}
