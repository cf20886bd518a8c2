package paths

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// How a stream ended is read from the stream: the server's Status first,
// then how the body ended, whatever the lifetime; client is only the
// exporter's own shutdown.
func TestEndReason(t *testing.T) {
	const requested = 10 * time.Second
	expired := apierrors.NewResourceExpired("too old resource version: 1 (2)")
	throttled := apierrors.NewTooManyRequests("slow down", 1)
	for _, tc := range []struct {
		name     string
		status   error
		body     kube.BodyEnd
		shutdown bool
		lifetime time.Duration
		want     string
	}{
		{"410 then the client stops it", expired, kube.BodyClosed, false, time.Second, metrics.EndExpired},
		{"410 during shutdown", expired, kube.BodyClosed, true, time.Second, metrics.EndExpired},
		{"410 then a clean end", expired, kube.BodyEOF, false, time.Second, metrics.EndExpired},
		{"429 in the stream", throttled, kube.BodyEOF, false, time.Second, metrics.EndTooManyRequests},
		{"other Status", apierrors.NewInternalError(errors.New("boom")), kube.BodyEOF, false, time.Second, metrics.EndError},
		{"clean end at the timeout", nil, kube.BodyEOF, false, requested, metrics.EndTimeout},
		{"clean end within the slack", nil, kube.BodyEOF, false, requested - 400*time.Millisecond, metrics.EndTimeout},
		{"clean end after the timeout", nil, kube.BodyEOF, false, 2 * requested, metrics.EndTimeout},
		{"clean end before the timeout", nil, kube.BodyEOF, false, requested / 2, metrics.EndClosedEarly},
		{"reset before the timeout", nil, kube.BodyReadError, false, time.Second, metrics.EndEOF},
		{"reset at the timeout", nil, kube.BodyReadError, false, requested, metrics.EndEOF},
		{"reset after the timeout", nil, kube.BodyReadError, false, 2 * requested, metrics.EndEOF},
		{"server ended it during shutdown", nil, kube.BodyEOF, true, requested, metrics.EndTimeout},
		{"our shutdown", nil, kube.BodyClosed, true, time.Second, metrics.EndClient},
		{"the client gave up on it", nil, kube.BodyClosed, false, time.Second, metrics.EndError},
	} {
		if got := endReason(tc.status, tc.body, tc.shutdown, tc.lifetime, requested); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// An ERROR event that client-go's StreamWatcher made up to report its own
// read error or cancellation is not the server's Status: the stream's end
// comes from how its body ended.
func TestClientReportedStatusIgnored(t *testing.T) {
	reporter := apierrors.NewClientErrorReporter(500, "GET", "ClientWatchDecoding")
	made := watch.Event{Type: watch.Error, Object: reporter.AsObject(errors.New("unable to decode an event from the watch stream: context canceled"))}
	server := watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version: 1 (2)").ErrStatus}
	for _, tc := range []struct {
		name string
		end  kube.BodyEnd
		ev   watch.Event
		want bool // taken as the server's Status
	}{
		{"server 410, body open", kube.BodyOpen, server, true},
		{"server 410, body already at its clean end", kube.BodyEOF, server, true},
		{"made up after the client closed the body", kube.BodyClosed, made, false},
		{"made up after a read error", kube.BodyReadError, made, false},
		{"made up, body state not yet recorded", kube.BodyOpen, made, false},
	} {
		s := &stream{path: &Base{nextReason: metrics.RelistError}}
		endBody(t, &s.body, tc.end)
		s.errorEvent(tc.ev)
		if got := s.status != nil; got != tc.want {
			t.Errorf("%s: taken as the server's = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// endBody brings body to end through the instrumented transport, as a
// watch response of the apiserver's would.
func endBody(t *testing.T, body *kube.StreamBody, end kube.BodyEnd) {
	t.Helper()
	if end == kube.BodyOpen {
		return
	}
	read := io.Reader(strings.NewReader(""))
	if end == kube.BodyReadError {
		read = iotest.ErrReader(errors.New("connection reset by peer"))
	}
	rt := kube.Instrument(roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(read), Request: req}, nil
	}))
	req, err := http.NewRequestWithContext(kube.WithTag(context.Background(), &kube.RequestTag{Stream: body}),
		http.MethodGet, "http://apiserver.invalid/api/v1/configmaps?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if end == kube.BodyClosed {
		resp.Body.Close()
	} else {
		_, _ = io.ReadAll(resp.Body)
	}
	if got, _ := body.State(); got != end {
		t.Fatalf("body ended %v, want %v", got, end)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
