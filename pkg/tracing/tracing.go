// Package tracing sets up OpenTelemetry tracing for the exporter from the
// standard OTEL_* environment variables, so that an operator configures it
// the way every other OpenTelemetry-instrumented component is configured.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Modes of the --tracing flag.
const (
	ModeAuto = "auto" // on when an OTLP endpoint is configured
	ModeOn   = "on"
	ModeOff  = "off"
)

// Enabled decides whether to trace: explicitly, or in auto mode when the
// environment names an OTLP endpoint.
func Enabled(mode string, getenv func(string) string) bool {
	switch mode {
	case ModeOn:
		return true
	case ModeOff:
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewProvider builds a tracer provider that exports over OTLP, gRPC or
// HTTP as OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says (http/protobuf by
// default, as the specification says). The exporters read the endpoint,
// headers, TLS and timeout variables themselves; the SDK reads the sampler
// (OTEL_TRACES_SAMPLER) and batch (OTEL_BSP_*) variables.
//
// Spans go through the SDK's batch processor: a bounded queue that drops
// rather than blocks, so a slow or unreachable collector never slows
// probing. Spans lost in a failed export are counted on dropped.
func NewProvider(ctx context.Context, version string, dropped prometheus.Counter) (*sdktrace.TracerProvider, error) {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch protocol {
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q is not supported; use grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		// Defaults first: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override them.
		resource.WithAttributes(semconv.ServiceName("watchprobe"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, err
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(countingExporter{exporter, dropped}),
		sdktrace.WithResource(res),
	), nil
}

// countingExporter counts the spans of every export that failed: they never
// reached the collector.
type countingExporter struct {
	sdktrace.SpanExporter
	dropped prometheus.Counter
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.dropped.Add(float64(len(spans)))
	}
	return err
}

// Transport wraps a client-go transport so that every request made inside a
// span gets a client span and carries a W3C traceparent to the apiserver,
// which then records its own spans for the request in the same trace (or,
// for callers outside system:masters and system:monitoring, in a trace of
// its own that links to ours). Requests made outside any span, such as the
// informer's list and watch, are left alone: each would otherwise start a
// trace of its own.
func Transport(tp trace.TracerProvider) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return otelhttp.NewTransport(rt,
			otelhttp.WithTracerProvider(tp),
			otelhttp.WithPropagators(propagation.TraceContext{}),
			otelhttp.WithFilter(func(r *http.Request) bool {
				return trace.SpanContextFromContext(r.Context()).IsValid()
			}),
		)
	}
}
