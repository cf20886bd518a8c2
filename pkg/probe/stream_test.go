package probe

import (
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
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
		body     bodyEnd
		shutdown bool
		lifetime time.Duration
		want     string
	}{
		{"410 then the client stops it", expired, bodyClosed, false, time.Second, metrics.EndExpired},
		{"410 during shutdown", expired, bodyClosed, true, time.Second, metrics.EndExpired},
		{"410 then a clean end", expired, bodyEOF, false, time.Second, metrics.EndExpired},
		{"429 in the stream", throttled, bodyEOF, false, time.Second, metrics.EndTooManyRequests},
		{"other Status", apierrors.NewInternalError(errors.New("boom")), bodyEOF, false, time.Second, metrics.EndError},
		{"clean end at the timeout", nil, bodyEOF, false, requested, metrics.EndTimeout},
		{"clean end within the slack", nil, bodyEOF, false, requested - 400*time.Millisecond, metrics.EndTimeout},
		{"clean end after the timeout", nil, bodyEOF, false, 2 * requested, metrics.EndTimeout},
		{"clean end before the timeout", nil, bodyEOF, false, requested / 2, metrics.EndClosedEarly},
		{"reset before the timeout", nil, bodyReadError, false, time.Second, metrics.EndEOF},
		{"reset at the timeout", nil, bodyReadError, false, requested, metrics.EndEOF},
		{"reset after the timeout", nil, bodyReadError, false, 2 * requested, metrics.EndEOF},
		{"server ended it during shutdown", nil, bodyEOF, true, requested, metrics.EndTimeout},
		{"our shutdown", nil, bodyClosed, true, time.Second, metrics.EndClient},
		{"the client gave up on it", nil, bodyClosed, false, time.Second, metrics.EndError},
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
		end  bodyEnd
		ev   watch.Event
		want bool // taken as the server's Status
	}{
		{"server 410, body open", bodyOpen, server, true},
		{"server 410, body already at its clean end", bodyEOF, server, true},
		{"made up after the client closed the body", bodyClosed, made, false},
		{"made up after a read error", bodyReadError, made, false},
		{"made up, body state not yet recorded", bodyOpen, made, false},
	} {
		s := &stream{path: &pathBase{nextReason: metrics.RelistError}}
		if tc.end != bodyOpen {
			s.body.ended(tc.end, nil)
		}
		s.errorEvent(tc.ev)
		if got := s.status != nil; got != tc.want {
			t.Errorf("%s: taken as the server's = %v, want %v", tc.name, got, tc.want)
		}
	}
}
