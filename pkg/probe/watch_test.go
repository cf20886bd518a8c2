package probe

import (
	"testing"

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
		relist, wait bool
	}{
		{metrics.EndExpired, true, false},
		{metrics.EndTimeout, false, false},
		{metrics.EndClient, false, false},
		{"", false, true},
		{metrics.EndEOF, false, true},
		{metrics.EndClosedEarly, false, true},
		{metrics.EndTooManyRequests, false, true},
		{metrics.EndError, false, true},
	} {
		if relist, wait := afterStream(tc.end); relist != tc.relist || wait != tc.wait {
			t.Errorf("after %q: relist %v, wait %v; want %v, %v", tc.end, relist, wait, tc.relist, tc.wait)
		}
	}
}
