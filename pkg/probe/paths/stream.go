package paths

import (
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// stream is one watch stream of a path, from its request to its end.
type stream struct {
	path      *Base
	requested time.Duration
	start     time.Time
	body      kube.StreamBody
	status    error // the Status of an ERROR event the server sent
}

// errorEvent records an ERROR event. It is the server's word on why the
// stream ends, unless client-go's StreamWatcher made it up to report a read
// error or the client's own cancellation: then the body had already failed
// or been closed by the client, and the Status names ClientWatchDecoding as
// its cause. An expired stream is followed by a relist for that reason, set
// here, before the event reaches the client, which may relist at once.
func (s *stream) errorEvent(ev watch.Event) error {
	status := apierrors.FromObject(ev.Object)
	if end, _ := s.body.State(); end == kube.BodyReadError || end == kube.BodyClosed || ClientReported(status) {
		return status
	}
	if s.status == nil {
		s.status = status
	}
	if apierrors.IsTooManyRequests(status) {
		// A 429 the server sent inside the stream: throttled all the same.
		s.path.Throttled(metrics.RequestWatch)
	}
	if IsExpired(status) {
		s.path.SetNextReason(metrics.RelistExpired)
	}
	return status
}

// ClientReported tells a Status that client-go's StreamWatcher made up from
// a read or decode error of its own.
func ClientReported(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Type == "ClientWatchDecoding" {
			return true
		}
	}
	return false
}

// end classifies and records the stream's end. shutdown is true when the
// exporter itself is stopping the path.
func (s *stream) end(shutdown bool) string {
	end, err := s.body.State()
	lifetime := time.Since(s.start)
	reason := endReason(s.status, end, shutdown, lifetime, s.requested)
	if err == nil {
		err = s.status
	}
	if reason == metrics.EndExpired {
		s.path.SetNextReason(metrics.RelistExpired)
	}
	s.path.StreamEnded(reason, lifetime, err, time.Now())
	return reason
}

// endReason classifies the end of a watch stream from what the stream
// itself showed: the Status of an ERROR event the server sent; else how the
// response body ended (cleanly by the server, with a read error, or closed
// by the client first); requested is the timeout the client asked for.
func endReason(status error, body kube.BodyEnd, shutdown bool, lifetime, requested time.Duration) string {
	switch {
	case status != nil:
		return statusReason(status)
	case body == kube.BodyEOF && lifetime >= requested-timeoutSlack:
		return metrics.EndTimeout
	case body == kube.BodyEOF:
		return metrics.EndClosedEarly
	case body == kube.BodyReadError:
		return metrics.EndEOF
	case shutdown:
		return metrics.EndClient
	default:
		// The client stopped a stream the server had not ended, and not
		// for the exporter's shutdown: it gave up on it.
		return metrics.EndError
	}
}

func statusReason(status error) string {
	switch {
	case IsExpired(status):
		return metrics.EndExpired
	case apierrors.IsTooManyRequests(status):
		return metrics.EndTooManyRequests
	default:
		return metrics.EndError
	}
}

// IsExpired reports the "410 Gone / too old resource version" answer that
// means the stream cannot be resumed and the path must relist.
func IsExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}
