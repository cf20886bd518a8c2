package judge

import (
	"context"
	"maps"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// tracedWrite gives tr a trace sink recording into spans, and sends write
// m/1, an add, in a new cycle c, traced by span.
func tracedWrite(tr *Tracker) (spans *tracetest.SpanRecorder, span trace.Span, c *Cycle, w *PendingWrite) {
	spans = tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("")
	traces := NewTraceSink(tracer)
	tr.sinks = append(tr.sinks, traces)
	_, span = tracer.Start(context.Background(), "write")
	traces.Begin(1, span)
	c = tr.NewCycle()
	w = tr.Expect(c, WriteKey{"m", 1}, metrics.EventAdded, span.SpanContext(), at(0))
	return spans, span, c, w
}

// A traced write's span records each path's arrival with the
// resourceVersion that path delivered, and ends once the write settles.
func TestTracedWriteRecordsArrivals(t *testing.T) {
	tr, _ := newTestTracker(t)
	spans, _, _, w := tracedWrite(tr)
	for i, rv := range map[int]string{informer: "11", watchIdx: "12"} {
		obj := marker("m", 1)
		obj.SetResourceVersion(rv)
		tr.observe(i, metrics.EventAdded, obj, t0.Add(time.Duration(i+1)*time.Millisecond))
	}
	tr.Ack(w, 0, nil, t0.Add(5*time.Millisecond))
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want the write's", len(ended))
	}
	got := map[string]string{}
	for _, ev := range ended[0].Events() {
		if ev.Name != "watchprobe.arrived" {
			continue
		}
		var path, rv string
		for _, a := range ev.Attributes {
			switch a.Key {
			case "watchprobe.path":
				path = a.Value.AsString()
			case "k8s.resource_version":
				rv = a.Value.AsString()
			}
		}
		got[path] = rv
	}
	if want := map[string]string{metrics.PathInformer: "11", metrics.PathWatch: "12"}; !maps.Equal(got, want) {
		t.Errorf("arrivals recorded by path: %v, want %v", got, want)
	}
}
