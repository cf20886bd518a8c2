package probe

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// metricsSink counts a probe's outcomes in its series.
type metricsSink struct {
	series      *metrics.ProbeSeries
	controllers map[string]*metrics.ControllerSeries
}

func (s metricsSink) Outcome(o Outcome) {
	if o.Controller != "" {
		s.controllerOutcome(o)
		return
	}
	if o.Path == nil {
		s.probeOutcome(o)
		return
	}
	ps := o.Path.series
	switch o.Kind {
	case Arrived:
		observe(ps.Latency[o.Event], o.Latency, o.span())
		ps.Observed[o.Event].Inc()
		if o.Late {
			ps.Late.Inc()
		}
	case Missed:
		ps.Missed[o.Reason].Inc()
	case Lost:
		ps.Lost[o.Reason].Inc()
	case Duplicate:
		ps.Duplicate.Inc()
	case ForeignChange:
		ps.ForeignChanges.Inc()
	case Replayed:
		ps.Replayed.Inc()
	case OutOfOrder:
		ps.OutOfOrder.Inc()
	case AfterFailedWrite:
		ps.AfterFailedWrite.Inc()
	case APIServerLag:
		if ps.APIServerLag != nil {
			ps.APIServerLag.Observe(o.Latency.Seconds())
		}
	case Activity:
		ps.LastEvent.Set(float64(o.At.UnixNano()) / 1e9)
		ps.Idle.Touch(o.At)
	case Bookmark:
		ps.Bookmarks.Inc()
		ps.Idle.Touch(o.At)
	case Up:
		ps.Up.Set(1)
	case Down:
		ps.Up.Set(0)
	case Stalled:
		ps.Stalled.Set(1)
	case Unstalled:
		ps.Stalled.Set(0)
	case StreamEnded:
		ps.Restarts[o.Reason].Inc()
		ps.WatchDuration.Observe(o.Latency.Seconds())
	case RequestFailed:
		ps.RequestFailed(o.Request, o.Code)
	case Relisted:
		ps.Relist(o.Reason, o.Mode)
	case RelistDone:
		ps.RelistDone(o.Mode, o.Latency)
	case Throttled:
		if c, ok := ps.Throttled[o.Request]; ok {
			c.Inc()
		}
	}
}

// probeOutcome counts the outcomes of a probe's writes and cycles.
func (s metricsSink) probeOutcome(o Outcome) {
	switch o.Kind {
	case Answered:
		ws := s.series.Writes[o.Verb]
		ws.Total.Inc()
		if o.Err != nil {
			s.series.WriteError(o.Verb, o.Code)
		} else {
			observe(ws.Duration, o.Latency, o.span())
		}
	case Throttled:
		if c, ok := s.series.WriteThrottled[o.Request]; ok {
			c.Inc()
		}
	case CycleJudged:
		if !o.Newest {
			return
		}
		if o.OK {
			s.series.Success.Set(1)
		} else {
			s.series.Success.Set(0)
		}
	}
}

// controllerOutcome counts the outcomes of a controller's marker object.
func (s metricsSink) controllerOutcome(o Outcome) {
	cs := s.controllers[o.Controller]
	if cs == nil {
		return
	}
	switch o.Kind {
	case ControllerChanged:
		switch {
		case o.Err != nil:
			cs.ChangeErrors.Inc()
		case o.Verb == metrics.VerbUpdate:
			cs.Changes.Inc()
		}
	case Reacted:
		cs.Reaction.Observe(o.Latency.Seconds())
		if o.Share >= 0 {
			cs.Share.Observe(o.Share.Seconds())
			cs.Delivery.Observe((o.Latency - o.Share).Seconds())
		}
		if o.Late {
			cs.Late.Inc()
		}
	case ReactionMissed:
		if c := cs.Missed[o.Reason]; c != nil {
			c.Inc()
		}
	case ReactionLost:
		if c := cs.Lost[o.Reason]; c != nil {
			c.Inc()
		}
	}
}

// observe records d, with the write's trace ID as an exemplar when its span
// is sampled, so a latency point on a dashboard leads to its trace.
func observe(o prometheus.Observer, d time.Duration, span trace.Span) {
	if sc := span.SpanContext(); sc.IsSampled() {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	o.Observe(d.Seconds())
}
