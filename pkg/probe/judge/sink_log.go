package judge

import (
	"log/slog"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// LogSink logs the outcomes a person acts on: anomalies, misses and
// losses, stream ends that are not routine, failed requests and writes,
// relists that are not the first, stalls.
type LogSink struct {
	Logger *slog.Logger
	// foreignLogged is the marker whose foreign change was logged last:
	// one line per marker names the client, not one per path and change.
	// A probe writes one marker at a time. leftLogged is the same for a
	// marker another client took out of a path's selector.
	foreignLogged, leftLogged string
}

func (s *LogSink) Outcome(o Outcome) {
	write := func(args ...any) []any {
		return append([]any{"marker", o.Marker, "seq", o.Seq}, args...)
	}
	switch o.Kind {
	case ControllerChanged:
		if o.Err != nil {
			s.Logger.Warn("changing a controller's marker object failed", "controller", o.Controller, "verb", o.Verb, "err", o.Err)
		}
		return
	case Reacted:
		if o.Late {
			s.Logger.Info("controller reacted after the deadline", "controller", o.Controller, "generation", o.Seq, "latency", o.Latency)
		}
		return
	case ReactionMissed:
		s.Logger.Warn("controller reaction missed: status.observedGeneration did not reach the change's generation within the deadline", "controller", o.Controller, "reason", o.Reason, "generation", o.Seq, "deadline", o.Limit)
		return
	case ReactionLost:
		s.Logger.Warn("controller reaction lost: not seen within lost_after", "controller", o.Controller, "reason", o.Reason, "generation", o.Seq, "lost_after", o.Limit)
		return
	case Missed:
		s.warn(o, "event missed", append([]any{"reason", o.Reason}, write("event", o.Event, "deadline", o.Limit)...)...)
	case Lost:
		if o.Gone {
			s.info(o, "event lost: its path was removed", write("event", o.Event)...)
			return
		}
		s.warn(o, "event lost: not delivered within lost_after", append([]any{"reason", o.Reason}, write("event", o.Event, "lost_after", o.Limit)...)...)
	case ArrivedAfterLost:
		s.warn(o, "event arrived after it was counted lost", write("event", o.Event, "latency", o.Latency, "lost_after", o.Limit)...)
	case Duplicate:
		s.warn(o, "event delivered twice without a relist", write("event", o.Event)...)
	case ForeignChange:
		// A change found only when the write was answered comes without
		// its object, so without the client's name: the next one names it.
		if o.Marker != s.foreignLogged && o.Manager != "" {
			s.foreignLogged = o.Marker
			s.Logger.Info("another client changed a marker; its changes are counted, not judged", "marker", o.Marker, "manager", o.Manager)
		}
	case Unmeasurable:
		// A held delete is named by the cleaner, which tracks the marker;
		// a refused path by its own warning. One line per write and path
		// would flood the log of a starved exporter: the self-health alert
		// and the counts speak for them.
		if o.Reason == metrics.UnmeasurableLeftSelector && o.Marker != s.leftLogged {
			s.leftLogged = o.Marker
			s.info(o, "another client took a marker out of the path's label selector before the probe deleted it; the delete is not observable there", "marker", o.Marker)
			return
		}
		s.Logger.Debug("event unmeasurable", o.Path.logArgs(append([]any{"reason", o.Reason}, write("event", o.Event)...)...)...)
	case OutOfOrder:
		s.warn(o, "event delivered after a later one", write("after_seq", o.AfterSeq)...)
	case Arrived:
		if o.Late {
			s.info(o, "event arrived after its deadline", write("latency", o.Latency)...)
		}
	case StreamEnded:
		if o.Reason != metrics.EndTimeout && o.Reason != metrics.EndClient {
			s.info(o, "watch ended", "reason", o.Reason, "lifetime", o.Latency, "err", o.Err)
		}
	case RequestFailed:
		s.warn(o, "list or watch request failed", "request", o.Request, "err", o.Err)
	case Refused:
		if o.Reason == "" {
			s.info(o, "list and watch no longer refused")
			return
		}
		s.warn(o, "list or watch refused: the exporter's own permissions or configuration, not the control plane; the events due meanwhile are unmeasurable on this path", "reason", o.Reason, "fix", PathRefusalFix(o.Reason), "err", o.Err)
	case Relisted:
		if o.Reason != metrics.RelistInitial {
			s.info(o, "relisting", "reason", o.Reason, "mode", o.Mode)
		}
	case Stalled:
		s.warn(o, "watch stalled: a stream is open and writes are acknowledged, but nothing arrives", "since", o.Limit)
	case Answered:
		switch {
		case o.Err != nil && o.Reason != "":
			args := []any{"verb", o.Verb, "marker", o.Marker, "cause", o.Reason}
			if o.RefusedBy != "" {
				args = append(args, "by", o.RefusedBy)
			}
			s.Logger.Warn("marker write refused: the probe's own namespace, permissions or policies, not the control plane", append(args, "fix", RefusalFix(o.Reason), "err", o.Err)...)
		case o.Err != nil:
			s.Logger.Warn("marker write failed", "verb", o.Verb, "marker", o.Marker, "err", o.Err)
		}
	}
}

func (s *LogSink) warn(o Outcome, msg string, args ...any) {
	s.Logger.Warn(msg, o.Path.logArgs(args...)...)
}

func (s *LogSink) info(o Outcome, msg string, args ...any) {
	s.Logger.Info(msg, o.Path.logArgs(args...)...)
}
