package probe

import (
	"testing"
	"time"
)

// The checks of a request are checkEvery apart while their answers change,
// checkBackoff apart once the latest two were the same, and a run of
// refusals that began after the latest check is checked checkEvery after
// it whatever the answers were: its held misses wait for that check.
func TestRefusalCheckBackoff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := t0.Add(-time.Minute) // the run asked about began before every check
	var s checkState
	if got := s.due(run); !got.Before(t0) {
		t.Fatalf("first check due at %v, want at once", got)
	}
	step := func(began time.Duration, a answer, want time.Duration) {
		t.Helper()
		s.record(t0.Add(began), a)
		if got := s.due(run).Sub(t0.Add(began)); got != want {
			t.Errorf("after a check at %v answering %d: next due %v after it, want %v", began, a, got, want)
		}
	}
	step(0, answerRefused, checkEvery)
	step(10*time.Second, answerRefused, checkBackoff) // repeated
	step(70*time.Second, answerRefused, checkBackoff) // still
	step(130*time.Second, answerServed, checkEvery)   // changed
	step(140*time.Second, answerFailed, checkEvery)   // changed
	step(150*time.Second, answerFailed, checkBackoff) // repeated
	// A run begun after the latest check: checked checkEvery after it.
	if got := s.due(t0.Add(151 * time.Second)).Sub(t0.Add(150 * time.Second)); got != checkEvery {
		t.Errorf("a run begun after the latest check is due %v after it, want %v", got, checkEvery)
	}
	// Served twice in a row: not backed off, the misses held for the
	// next check wait for it.
	step(210*time.Second, answerServed, checkEvery)
	step(220*time.Second, answerServed, checkEvery)
}
