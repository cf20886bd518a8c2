package probe

import "testing"

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
