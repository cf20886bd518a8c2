package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Each probe begins at the first instant after the start line is read that
// is a whole number of intervals from its time; without times, at once.
func TestStartTimes(t *testing.T) {
	interval := 3 * time.Second
	now := time.Unix(1000, 0)
	phases := []time.Time{now.Add(-7500 * time.Millisecond), now.Add(-time.Millisecond), now.Add(-interval)}
	line := "start"
	for _, p := range phases {
		line += fmt.Sprintf(" %d", p.UnixNano())
	}
	starts, err := startTimes(line+"\n", len(phases), interval, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{now.Add(1500 * time.Millisecond), now.Add(interval - time.Millisecond), now.Add(interval)}
	for i := range want {
		if !starts[i].Equal(want[i]) {
			t.Errorf("probe %d begins %s after now, want %s", i, starts[i].Sub(now), want[i].Sub(now))
		}
	}

	starts, err = startTimes("start\n", 2, interval, now)
	if err != nil || !starts[0].Equal(now) || !starts[1].Equal(now) {
		t.Errorf("without times: %v, %v; want both now", starts, err)
	}
	for _, bad := range []struct{ line, want string }{
		{"go 1 2", "does not begin with start"},
		{"start 1", "has 1 times, want one per probe (2)"},
		{"start 1 x", "start time 1"},
	} {
		if _, err := startTimes(bad.line, 2, interval, now); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("startTimes(%q): %v, want an error saying %q", bad.line, err, bad.want)
		}
	}
}
