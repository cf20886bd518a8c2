package judge

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TraceSink puts the outcomes of traced writes on their spans: arrivals,
// misses, losses and anomalies as events, the end of the span when the
// write is settled. An anomaly after that goes on a short span of its own
// that links to the write's. It keeps each write's span from its start
// (begin) until the write settles.
type TraceSink struct {
	tracer trace.Tracer

	mu    sync.Mutex
	spans map[uint64]*writeSpan // by sequence number
}

// writeSpan is a traced write's span and the paths that missed it so far.
type writeSpan struct {
	span   trace.Span
	missed []string
}

func NewTraceSink(tracer trace.Tracer) *TraceSink {
	return &TraceSink{tracer: tracer, spans: map[uint64]*writeSpan{}}
}

// Begin keeps span, the write seq's, until the write settles.
func (s *TraceSink) Begin(seq uint64, span trace.Span) {
	s.mu.Lock()
	s.spans[seq] = &writeSpan{span: span}
	s.mu.Unlock()
}

func (s *TraceSink) Outcome(o Outcome) {
	if !o.Trace.IsValid() || o.Controller != "" {
		return
	}
	s.mu.Lock()
	ws := s.spans[o.Seq]
	if o.Kind == Settled {
		delete(s.spans, o.Seq)
	}
	s.mu.Unlock()
	switch o.Kind {
	case Arrived:
		attrs := append(pathAttrs(o.Path),
			attribute.Float64("watchprobe.latency_seconds", o.Latency.Seconds()),
			attribute.String("k8s.resource_version", strconv.FormatUint(o.RV, 10)))
		if o.Late || ws == nil {
			s.event(ws, o, "watchprobe.late", attrs...)
		} else if ws.span.IsRecording() {
			ws.span.AddEvent("watchprobe.arrived", trace.WithTimestamp(o.At), trace.WithAttributes(attrs...))
		}
	case Missed:
		if ws != nil {
			ws.missed = append(ws.missed, o.Path.Label())
			if ws.span.IsRecording() {
				ws.span.AddEvent("watchprobe.missed", trace.WithTimestamp(o.At), trace.WithAttributes(
					append(pathAttrs(o.Path), attribute.String("watchprobe.reason", o.Reason))...))
			}
		}
	case Lost:
		if !o.Gone {
			s.event(ws, o, "watchprobe.lost", append(pathAttrs(o.Path), attribute.String("watchprobe.reason", o.Reason))...)
		}
	case ArrivedAfterLost:
		s.event(ws, o, "watchprobe.arrived_after_lost", pathAttrs(o.Path)...)
	case Unmeasurable:
		s.event(ws, o, "watchprobe.unmeasurable", append(pathAttrs(o.Path), attribute.String("watchprobe.reason", o.Reason))...)
	case Duplicate:
		s.event(ws, o, "watchprobe.duplicate", pathAttrs(o.Path)...)
	case Replayed:
		s.event(ws, o, "watchprobe.replayed", pathAttrs(o.Path)...)
	case OutOfOrder:
		s.event(ws, o, "watchprobe.out_of_order", append(pathAttrs(o.Path), attribute.Int64("watchprobe.after_seq", int64(o.AfterSeq)))...)
	case Answered:
		if o.Err != nil && ws != nil {
			ws.span.RecordError(o.Err)
			if o.Reason != "" {
				ws.span.SetAttributes(attribute.String("watchprobe.refused", o.Reason))
			}
			ws.span.SetStatus(codes.Error, "write failed")
		}
	case Settled:
		if ws == nil {
			return
		}
		if len(ws.missed) > 0 && ws.span.IsRecording() {
			ws.span.SetStatus(codes.Error, "missed on "+strings.Join(ws.missed, ", "))
		}
		ws.span.End()
	}
}

// event records an anomaly on the write's span, or, once that span has
// ended (ws is nil), on a short span of its own that links to it.
func (s *TraceSink) event(ws *writeSpan, o Outcome, name string, attrs ...attribute.KeyValue) {
	if ws != nil {
		if ws.span.IsRecording() {
			ws.span.AddEvent(name, trace.WithTimestamp(o.At), trace.WithAttributes(attrs...))
		}
		return
	}
	if !o.Trace.IsSampled() {
		return
	}
	_, linked := s.tracer.Start(context.Background(), name,
		trace.WithTimestamp(o.At),
		trace.WithLinks(trace.Link{SpanContext: o.Trace}),
		trace.WithAttributes(append(slices.Clip(attrs), attribute.String("watchprobe.marker", o.Marker), attribute.Int64("watchprobe.seq", int64(o.Seq)))...))
	linked.End(trace.WithTimestamp(o.At))
}

// pathAttrs name a path on a span.
func pathAttrs(p *PathInfo) []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String("watchprobe.path", p.Name)}
	if p.APIServer != "" {
		attrs = append(attrs, attribute.String("watchprobe.apiserver", p.APIServer))
	}
	return attrs
}
