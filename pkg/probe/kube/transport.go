package kube

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// What the exporter needs to know about its requests is below the client:
// client-go retries a 429 that carries Retry-After by itself, so the caller
// never sees it, and its StreamWatcher turns a connection reset into the
// same quiet end of the result channel as a clean close. A RoundTripper sees
// every attempt and the response body itself; a request finds its counters
// through a tag in its context.

type tagKey struct{}

// RequestTag goes with a request in its context.
type RequestTag struct {
	// Throttled hears of each 429 answer, with the request's kind.
	Throttled func(request string)
	// Attempt, if set, hears the instant each Attempt is sent, as late as
	// the exporter can see it: a write is timed from the Attempt the
	// apiserver took, not from a wait the apiserver imposed (a 429's
	// Retry-After) nor from what the client did before its transport. It
	// must not block: the request is waiting to leave.
	Attempt func(time.Time)
	// Stream, on a watch request, receives the response body's observer.
	Stream *StreamBody
}

func WithTag(ctx context.Context, tag *RequestTag) context.Context {
	return context.WithValue(ctx, tagKey{}, tag)
}

// Instrument wraps the client's transport: it counts every 429, retried or
// not, and observes how watch response bodies end.
func Instrument(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		tag, _ := req.Context().Value(tagKey{}).(*RequestTag)
		sent := time.Now()
		if tag != nil && tag.Attempt != nil {
			tag.Attempt(sent)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil || tag == nil {
			return resp, err
		}
		if resp.StatusCode == http.StatusTooManyRequests && tag.Throttled != nil {
			tag.Throttled(requestKind(req))
		}
		if tag.Stream != nil && resp.StatusCode == http.StatusOK && isWatchRequest(req) {
			resp.Body = tag.Stream.open(resp.Body, req.Context(), sent)
		}
		return resp, nil
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func isWatchRequest(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// requestKind names a request as the metrics do.
func requestKind(r *http.Request) string {
	switch r.Method {
	case http.MethodGet:
		if isWatchRequest(r) {
			return metrics.RequestWatch
		}
		return metrics.RequestList
	case http.MethodPost:
		return metrics.RequestCreate
	case http.MethodPut, http.MethodPatch:
		return metrics.RequestUpdate
	case http.MethodDelete:
		return metrics.RequestDelete
	}
	return ""
}

// BodyEnd is how a watch response body ended, as far as it has.
type BodyEnd int

const (
	BodyOpen      BodyEnd = iota
	BodyEOF               // the server ended the response cleanly
	BodyReadError         // reading failed: reset, unexpected EOF, HTTP/2 stream reset, GOAWAY
	BodyClosed            // the client closed it first
)

// StreamBody observes one watch response body. The first thing that
// happens to it decides: a read error after the client closed the body, or
// after the request's context ended, is the client's own doing, and a close
// after the server's end changes nothing.
type StreamBody struct {
	mu     sync.Mutex
	opened bool
	start  time.Time // when the attempt that opened the stream was sent
	end    BodyEnd
	err    error
}

// open records that the stream exists and returns its observed body.
func (s *StreamBody) open(rc io.ReadCloser, ctx context.Context, sent time.Time) io.ReadCloser {
	s.mu.Lock()
	s.opened, s.start = true, sent
	s.mu.Unlock()
	return &observedBody{rc, s, ctx}
}

// Started reports whether a stream opened, and when its request was sent.
func (s *StreamBody) Started() (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened, s.start
}

func (s *StreamBody) ended(end BodyEnd, err error) {
	s.mu.Lock()
	if s.end == BodyOpen {
		s.end, s.err = end, err
	}
	s.mu.Unlock()
}

// State reports how the body ended so far.
func (s *StreamBody) State() (BodyEnd, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end, s.err
}

type observedBody struct {
	io.ReadCloser
	s   *StreamBody
	ctx context.Context // the request's: cancelled by the client's shutdown
}

func (b *observedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.s.ended(BodyEOF, nil)
	case b.ctx.Err() != nil:
		// The transport fails the read when the request's context ends;
		// that is the client closing the stream, not the network.
		b.s.ended(BodyClosed, nil)
	default:
		b.s.ended(BodyReadError, err)
	}
	return n, err
}

func (b *observedBody) Close() error {
	b.s.ended(BodyClosed, nil)
	return b.ReadCloser.Close()
}
