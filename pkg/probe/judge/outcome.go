package judge

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
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
	// Unmeasurable: the write's delivery on the path cannot be judged
	// against the cluster, for Reason (metrics.UnmeasurableReasons): never
	// timed, missed, late or lost there. Manager names the clients whose
	// finalizers hold a delete_blocked delete, when known.
	Unmeasurable
	// Released: the DELETED of a delete that other clients' finalizers
	// held arrived on the path, At: they let go, and the marker is gone.
	Released

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
	// Refused: the path's list or watch requests are refused, for Reason
	// (metrics.PathRefusals), the exporter's own permissions or
	// configuration; with Reason empty, no longer.
	Refused
	// Relisted: the path began fetching its whole state, for Reason, by Mode.
	Relisted
	// RelistDone: that fetch completed, At, by Mode, after Latency.
	RelistDone
	// Throttled: a Request was answered 429; Path nil for a write's.
	Throttled

	// Sent: the write is about to be sent, At.
	Sent
	// Answered: the apiserver answered the write of Verb after a round trip
	// of Latency, with Err and its Code when it failed; Reason is the
	// cause (metrics.RefusalCauses) when it refused the write for the
	// probe's own namespace, permissions or policies, and RefusedBy names
	// the policy or webhook of an admission denial.
	Answered
	// Settled: every path delivered, missed or lost the write, or it failed.
	Settled

	// CycleJudged: the verdict OK of Cycle; Newest when no newer cycle has
	// been judged, so that it is the probe's current verdict. A Reason
	// (metrics.UnmeasurableStarved) says the cycle settled without a
	// verdict: a write of it could not be judged, and nothing else failed.
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

	// PathAdded: a path pinned to an apiserver was added; PathRemoved: it
	// was removed, its apiserver gone.
	PathAdded
	PathRemoved
	// MarkersPending: Count markers wait for deletion, Held of them
	// deleted and held by other clients' finalizers.
	MarkersPending

	// ConfirmRefusal: the path's Request was refused, for Reason, at least
	// refusedAfter times in a row since Since, the latest At. The
	// judgement takes the refusal for the exporter's own only once the
	// same request sent over fresh connections is refused there too
	// (Tracker.RefusalChecked): the path's own retries reuse its
	// connection, and so the one apiserver that refused.
	ConfirmRefusal

	// kinds is one past the last kind: the size of a table by kind.
	kinds
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
	// RefusedBy names the admission policy or webhook that denied an
	// Answered write (Refusal.By).
	RefusedBy string
	// RV is the resourceVersion the path delivered, 0 when not an integer
	// or not a delivery.
	RV uint64
	// Since is when a ConfirmRefusal's run of refusals began: a check
	// begun before it answers nothing about them.
	Since time.Time
	// Trace is the write's trace context, for a traced write.
	Trace trace.SpanContext
	// Count is how many markers wait for deletion, for MarkersPending,
	// and Held how many of them other clients' finalizers hold.
	Count, Held int
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

// counts are, per kind, the counter family an outcome of that kind counts
// one in (a path's, a probe's or a controller's, as the family's scope
// says), its labels' values taken from the outcome (labelValue). The
// metrics sink and a check's tally count them and Anomaly names them; a
// kind that counts only under a condition, or in a gauge or histogram, is
// the sinks' own.
var counts = [kinds]*metrics.Family{
	Missed:           metrics.EventsMissed,
	Lost:             metrics.EventsLost,
	Duplicate:        metrics.EventsDuplicate,
	Replayed:         metrics.EventsReplayed,
	OutOfOrder:       metrics.EventsOutOfOrder,
	AfterFailedWrite: metrics.EventsAfterFailedWrite,
	ForeignChange:    metrics.ForeignChanges,
	Unmeasurable:     metrics.EventsUnmeasurable,
	Bookmark:         metrics.Bookmarks,
	RequestFailed:    metrics.RequestsFailed,
	Relisted:         metrics.Relists,
	ReactionMissed:   metrics.ReactionsMissed,
	ReactionLost:     metrics.ReactionsLost,
}

// Counted is the counter family every outcome of kind k counts one in, if
// any, its labels' values those of the outcome.
func Counted(k Kind) *metrics.Family {
	if k < kinds {
		return counts[k]
	}
	return nil
}

// anomaly is the family an outcome is counted in when it is an anomaly:
// nil for an outcome that is none (an arrival on time, a replay after a
// relist, a watch that ended at its timeout or by the exporter's own stop,
// the initial relist, a bookmark, an expired resume: the window's answer).
// Someone else's change of a marker is one: List-Watch did nothing wrong,
// but whoever reads the cycle should know that another client touches the
// probe's markers.
func (o Outcome) anomaly() *metrics.Family {
	switch o.Kind {
	case Replayed, Bookmark:
		return nil
	case Reacted:
		if o.Late {
			return metrics.ReactionsLate
		}
	case ControllerChanged:
		if o.Err != nil {
			return metrics.ControllerChangeErrors
		}
	case Arrived:
		if o.Late {
			return metrics.EventsLate
		}
	case Throttled:
		return metrics.RequestsThrottled
	case StreamEnded:
		if o.Reason != metrics.EndTimeout && o.Reason != metrics.EndClient {
			return metrics.WatchRestarts
		}
	case Relisted:
		if o.Reason != metrics.RelistInitial {
			return metrics.Relists
		}
	case Answered:
		switch {
		case o.Err != nil && o.Reason != "":
			return metrics.WritesRefused
		case o.Err != nil:
			return metrics.WriteErrors
		}
	case ResumeChecked:
		if o.Reason == metrics.ResumeIncomplete || o.Reason == metrics.ResumeError {
			return metrics.ResumeChecks
		}
	default:
		return Counted(o.Kind)
	}
	return nil
}

// Anomaly names what went wrong, as the series it is counted in (without
// the watchprobe_ prefix and the probe label), for a person reading a
// cycle's anomalies: `events_missed_total{path="watch",reason="silent"}`;
// empty for an outcome that is no anomaly.
func (o Outcome) Anomaly() string {
	f := o.anomaly()
	if f == nil {
		return ""
	}
	var kv []string
	switch f.Scope {
	case metrics.ScopePath:
		if o.Path == nil {
			kv = append(kv, "path", metrics.SourceWrite)
		} else {
			kv = append(kv, "path", o.Path.Name)
			if o.Path.APIServer != "" {
				kv = append(kv, "apiserver", o.Path.APIServer)
			}
		}
	case metrics.ScopeController:
		kv = append(kv, "controller", o.Controller)
	}
	for _, l := range f.Labels {
		kv = append(kv, l.Name, o.labelValue(l.Name))
	}
	return seriesKey(f.Name, kv...)
}

// labelValue is the value a label of a family takes for the outcome.
func (o Outcome) labelValue(name string) string {
	switch name {
	case "reason", "outcome", "cause":
		return o.Reason
	case "event":
		return o.Event
	case "request":
		return o.Request
	case "code":
		return strconv.Itoa(o.Code)
	case "mode":
		return o.Mode
	case "verb":
		return o.Verb
	case "age":
		return model.Duration(o.Limit).String()
	case "controller":
		return o.Controller
	}
	panic("no outcome field gives label " + name)
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

// ResumeVerdict is the judgement of one resume check.
type ResumeVerdict struct {
	Path      string
	APIServer string
	// Age is the configured age; the write resumed from was at least
	// this old, and ResumedAfter says how old it was.
	Age          time.Duration
	ResumedAfter time.Duration
	// At is when the check began; From the resourceVersion it resumed from.
	At      time.Time
	From    string
	Outcome string // metrics.Resume*
	// The events involved in an inexact replay: their resourceVersion, or
	// the event and marker when it is not known (a delete's).
	Missing    []string
	Duplicated []string
	OutOfOrder []string
	// Err is the server's status or the request's error, for expired and
	// error.
	Err error
	// Replay is how long an exact replay took, from the watch request to
	// the last event owed.
	Replay time.Duration
}
