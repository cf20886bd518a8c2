package main

import (
	"testing"
	"time"
)

// spread is the shortest stretch of the interval holding every phase, also
// when that stretch wraps past the end of the interval.
func TestSpread(t *testing.T) {
	interval := time.Second
	base := time.Unix(100, 0)
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for i, m := range ms {
			// A whole number of intervals apart does not move a phase.
			out = append(out, base.Add(time.Duration(i)*interval+time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, c := range []struct {
		name   string
		phases []time.Time
		want   time.Duration
	}{
		{"one", at(300), 0},
		{"together", at(200, 200, 200), 0},
		{"within 100 ms", at(200, 300, 250), 100 * time.Millisecond},
		{"around the end", at(950, 20, 980), 70 * time.Millisecond},
		{"evenly", at(0, 250, 500, 750), 750 * time.Millisecond},
	} {
		if got := spread(c.phases, interval); got != c.want {
			t.Errorf("%s: spread %s, want %s", c.name, got, c.want)
		}
	}
}
