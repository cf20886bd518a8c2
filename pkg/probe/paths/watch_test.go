package paths

import (
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The resume point never moves back: after an out-of-order delivery the
// newest resourceVersion seen is where the watch resumes.
func TestNewerRV(t *testing.T) {
	for _, tc := range []struct{ current, seen, want string }{
		{"", "5", "5"},
		{"5", "7", "7"},
		{"7", "5", "7"},
		{"10", "9", "10"},
		{"abc", "5", "5"}, // not integers: the latest wins
	} {
		if got := newerRV(tc.current, tc.seen); got != tc.want {
			t.Errorf("newerRV(%q, %q) = %q, want %q", tc.current, tc.seen, got, tc.want)
		}
	}
}

// After a 410 a path relists at once: the apiserver answered, only its
// history is gone; after a failed request or an early end it waits out its
// backoff; after a stream's timeout or the exporter's own stop it goes on.
func TestAfterStream(t *testing.T) {
	for _, tc := range []struct {
		end          string
		expiredAgain bool
		relist, wait bool
	}{
		{metrics.EndExpired, false, true, false},
		{metrics.EndExpired, true, true, true}, // 410 after 410: no loop
		{metrics.EndTimeout, false, false, false},
		{metrics.EndClient, false, false, false},
		{"", false, false, true},
		{metrics.EndEOF, false, false, true},
		{metrics.EndClosedEarly, false, false, true},
		{metrics.EndTooManyRequests, false, false, true},
		{metrics.EndError, false, false, true},
	} {
		if relist, wait := AfterStream(tc.end, tc.expiredAgain); relist != tc.relist || wait != tc.wait {
			t.Errorf("after %q (expired again %v): relist %v, wait %v; want %v, %v", tc.end, tc.expiredAgain, relist, wait, tc.relist, tc.wait)
		}
	}
}

// A stream that delivers nothing and ends at once shows no healthy
// apiserver: the backoff is not reset by it.
func TestHealthyStream(t *testing.T) {
	for _, tc := range []struct {
		delivered bool
		lifetime  time.Duration
		want      bool
	}{
		{false, 10 * time.Millisecond, false},
		{true, 10 * time.Millisecond, true},
		{false, healthyAfter, true},
	} {
		if got := Healthy(tc.delivered, tc.lifetime); got != tc.want {
			t.Errorf("delivered %v, lived %v: healthy %v, want %v", tc.delivered, tc.lifetime, got, tc.want)
		}
	}
}
