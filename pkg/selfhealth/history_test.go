package selfhealth

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

// Which verdicts a starved stretch can move: those whose write was sent
// during it or up to a margin after it, or shortly before it began; those
// concluded during it or up to a margin after it. A stretch inside a long
// window, over well before its verdict, moves nothing.
func TestStarvedJudgement(t *testing.T) {
	const margin = 30 * ms
	h := newHistory(8)
	h.add(1000*ms, 1100*ms, 60*ms, margin) // one starved stretch: 1.0 s to 1.1 s
	for _, c := range []struct {
		name     string
		sent, at int64
		want     bool
		because  string
	}{
		{"before", 500 * ms, 505 * ms, false, "a window over before the stretch"},
		{"just before", 965 * ms, 969 * ms, false, "a verdict before the stretch begins: nothing after it moves it"},
		{"send before, verdict in", 990 * ms, 1050 * ms, true, "the verdict falls in the stretch"},
		{"sent in", 1050 * ms, 1150 * ms, true, "the send falls in the stretch"},
		{"verdict within the margin after", 1110 * ms, 1120 * ms, true, "stamped while catching up"},
		{"sent within the margin after", 1125 * ms, 1200 * ms, true, "a send may have waited behind the backlog"},
		{"after the margin", 1131 * ms, 1136 * ms, false, "the stretch ended more than a margin before the send"},
		{"sent shortly before", 975 * ms, 1300 * ms, true, "the stretch began within the margin after the send: the request may not have left"},
		{"long window around", 100 * ms, 5000 * ms, false, "the stretch is in the middle of a 4.9 s window: what arrived in it was stamped right after it"},
		{"long window ending in it", 100 * ms, 1050 * ms, true, "the verdict instant is in the stretch"},
		{"long window ending within the margin", 100 * ms, 1125 * ms, true, "the verdict instant is within the margin after it"},
		{"an instant in it", 1050 * ms, 1050 * ms, true, "the final stretch of a loss: starved at its horizon"},
		{"an instant after the margin", 1200 * ms, 1200 * ms, false, "not starved at the horizon"},
	} {
		if got := h.starved(c.sent, c.at, margin); got != c.want {
			t.Errorf("%s: starved(%d ms, %d ms) = %v, want %v: %s", c.name, c.sent/ms, c.at/ms, got, c.want, c.because)
		}
	}
}

// Stretches that follow each other within the margin are one; others stay
// apart, and a window between two of them is judged by the nearer ends.
func TestStretchesMergeWithinTheMargin(t *testing.T) {
	const margin = 30 * ms
	h := newHistory(8)
	h.add(0, 100*ms, 60*ms, margin)
	h.add(120*ms, 200*ms, 60*ms, margin) // within the margin: merged
	h.add(500*ms, 600*ms, 60*ms, margin)
	if h.n != 2 || *h.at(0) != (stretch{0, 200 * ms, 60 * ms}) || *h.at(1) != (stretch{500 * ms, 600 * ms, 60 * ms}) {
		t.Fatalf("stretches %v, want [0 200ms] and [500ms 600ms]", h.ring[:h.n])
	}
	if h.starved(300*ms, 400*ms, margin) {
		t.Error("a window between two stretches, more than a margin from both, judged starved")
	}
	if h.starved(300*ms, 480*ms, margin) {
		t.Error("a verdict concluded before a stretch begins judged starved: nothing after it can move it")
	}
	if !h.starved(300*ms, 510*ms, margin) {
		t.Error("a verdict concluded inside a stretch not judged starved")
	}
}

// A full ring forgets its oldest stretch; a window that reaches back to
// what it forgot is judged starved, since it cannot be judged otherwise,
// and one after it is judged as before.
func TestForgottenStretchesJudgedStarved(t *testing.T) {
	const margin = 10 * ms
	h := newHistory(2)
	for i := range int64(3) {
		h.add(i*1000*ms, i*1000*ms+50*ms, 60*ms, margin)
	}
	for _, c := range []struct {
		sent, at int64
		want     bool
	}{
		{20 * ms, 25 * ms, true},    // in the forgotten stretch
		{55 * ms, 70 * ms, true},    // within the margin after it
		{500 * ms, 505 * ms, false}, // after it: known not starved
		{1020 * ms, 1025 * ms, true},
	} {
		if got := h.starved(c.sent, c.at, margin); got != c.want {
			t.Errorf("starved(%d ms, %d ms) = %v, want %v", c.sent/ms, c.at/ms, got, c.want)
		}
	}
}

// Starvation at an instant only delays what arrived before it: by the end
// of the stretch that covers it and a margin, or by the longest delay seen
// in it and a margin if the stretch goes on; never more. An instant no
// stretch covers is stamped on time.
func TestResumed(t *testing.T) {
	const margin = 30 * ms
	h := newHistory(8)
	h.add(1000*ms, 1100*ms, 70*ms, margin)
	h.add(5000*ms, 65000*ms, 90*ms, margin)    // a minute of a CPU limit's throttling
	h.add(65010*ms, 65020*ms, 2000*ms, margin) // merged: a pause of 2 s at its end
	for _, c := range []struct {
		at, want int64
		because  string
	}{
		{500 * ms, 500 * ms, "not starved"},
		{1050 * ms, 1130 * ms, "in a short stretch: its end and the margin"},
		{1120 * ms, 1130 * ms, "within the margin after it"},
		{1131 * ms, 1131 * ms, "after the margin"},
		{3000 * ms, 3000 * ms, "between stretches"},
		{6000 * ms, 6000*ms + 2000*ms + margin, "in a long stretch: its longest delay, not its end"},
		{65015 * ms, 65020*ms + margin, "near its end: the end"},
	} {
		if got := h.resumed(c.at, margin); got != c.want {
			t.Errorf("resumed(%d ms) = %d ms, want %d ms: %s", c.at/ms, got/ms, c.want/ms, c.because)
		}
	}
}
