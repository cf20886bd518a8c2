package judge

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// Sweeper sweeps the trackers of many probes from one goroutine, each as
// often as its probe asks (a tenth of its deadline, between 10 ms and 1 s)
// or more often. A probe given none has one of its own. A ticker per probe
// would wake the process at every probe's tick, spread over time, and keep
// it from ever idling between cycles, which costs more CPU than the
// sweeps' work. Sweeping more often than asked changes no
// verdict: a sweep only judges what is already due. The trackers are swept
// one after another, so one whose sweep is slow (its logs go to a slow
// sink) delays the others' verdicts too; their times come from the writes'
// stamps, so that delays when a miss is counted, not what is counted.
type Sweeper struct {
	mu       sync.Mutex
	trackers map[*Tracker]time.Duration
	changed  chan struct{}
}

// NewSweeper returns a Sweeper with no probes yet; Run runs it, and each
// probe given it in Options adds itself while it runs.
func NewSweeper() *Sweeper {
	return &Sweeper{trackers: map[*Tracker]time.Duration{}, changed: make(chan struct{}, 1)}
}

// Add sweeps t every every or more often, until the returned function is
// called.
func (s *Sweeper) Add(t *Tracker, every time.Duration) (remove func()) {
	s.mu.Lock()
	s.trackers[t] = every
	s.mu.Unlock()
	s.signal()
	return func() {
		s.mu.Lock()
		delete(s.trackers, t)
		s.mu.Unlock()
		s.signal()
	}
}

func (s *Sweeper) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// every is how often the sweeper must sweep: as often as the most demanding
// of its trackers asks, 0 with none.
func (s *Sweeper) every() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var every time.Duration
	for _, e := range s.trackers {
		if every == 0 || e < every {
			every = e
		}
	}
	return every
}

// Run sweeps until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	last := time.Now()
	for {
		// A tracker added or removed changes only when the next sweep is
		// due, not when the last one was: adding probes one after another
		// must not keep putting sweeps off.
		if every := s.every(); every > 0 {
			timer.Reset(time.Until(last.Add(every)))
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.changed:
		case now := <-timer.C:
			last = now
			s.mu.Lock()
			trackers := slices.Collect(maps.Keys(s.trackers))
			s.mu.Unlock()
			for _, t := range trackers {
				t.sweep(now)
			}
		}
	}
}
