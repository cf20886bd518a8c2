package probe

import (
	"context"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// path is one way of receiving marker events from the apiserver.
type path interface {
	// run receives events until ctx ends, calling its observe function for
	// each marker event with the instant it arrived.
	run(ctx context.Context)
	// synced reports whether the path has received its initial state and is
	// now waiting for new events.
	synced() bool
}

// observeFunc receives one marker event (added, modified or deleted).
type observeFunc func(event string, obj metav1.Object, arrival time.Time)

// timeoutSlack absorbs the rounding of the requested timeout to whole
// seconds and the instants at which client and server start their clocks.
const timeoutSlack = 500 * time.Millisecond

// requestTimeout picks a watch's requested lifetime, between base and twice
// base, as client-go's reflector does, so that watches do not all end at once.
func requestTimeout(base time.Duration) time.Duration {
	return (base + rand.N(base+1)).Truncate(time.Second)
}

// endReason classifies the end of a watch stream. status is the Status error
// that ended it (an ERROR event or a failed request), nil if none;
// requested is the timeout the client asked the server for.
func endReason(status error, lifetime, requested time.Duration, byClient bool) string {
	switch {
	case byClient:
		return metrics.EndClient
	case status == nil && lifetime >= requested-timeoutSlack:
		return metrics.EndTimeout
	case status == nil:
		return metrics.EndEOF
	case isExpired(status):
		return metrics.EndExpired
	case apierrors.IsTooManyRequests(status):
		return metrics.EndTooManyRequests
	default:
		return metrics.EndError
	}
}

// isExpired reports the "410 Gone / too old resource version" answer that
// means the stream cannot be resumed and the path must relist.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}
