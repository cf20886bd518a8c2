// Package otlpreceiver is a real OTLP/gRPC trace receiver for tests: the
// exporter and kube-apiserver send it spans as they would to an
// OpenTelemetry Collector, and a test reads them back.
package otlpreceiver

import (
	"context"
	"encoding/hex"
	"net"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is what a test needs of one received span.
type Span struct {
	Service      string // the resource's service.name
	Name         string
	TraceID      string // hex
	SpanID       string
	ParentSpanID string // "" for a root span
	Links        []Link
	Attributes   map[string]string
}

// Link is a span link.
type Link struct{ TraceID, SpanID string }

// Receiver collects every span sent to it.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	// Addr is host:port of the gRPC endpoint.
	Addr   string
	server *grpc.Server

	mu    sync.Mutex
	spans []Span
}

// Start listens on a free loopback port.
func Start() (*Receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &Receiver{Addr: l.Addr().String(), server: grpc.NewServer()}
	coltracepb.RegisterTraceServiceServer(r.server, r)
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// Stop ends the server.
func (r *Receiver) Stop() { r.server.Stop() }

// Export implements the OTLP TraceService.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, convert(service, s))
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func convert(service string, s *tracepb.Span) Span {
	out := Span{
		Service:      service,
		Name:         s.GetName(),
		TraceID:      hex.EncodeToString(s.GetTraceId()),
		SpanID:       hex.EncodeToString(s.GetSpanId()),
		ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
		Attributes:   map[string]string{},
	}
	for _, l := range s.GetLinks() {
		out.Links = append(out.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	for _, kv := range s.GetAttributes() {
		out.Attributes[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return out
}

// Spans returns a copy of everything received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}
