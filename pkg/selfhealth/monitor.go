// Package selfhealth measures the exporter's own ability to measure: a
// goroutine that wakes at every tick and records how late it woke, the
// stretches in which it woke later than a threshold (the exporter was
// starved: throttled by its CPU limit, outweighed on a busy node, or
// paused), and the CPU throttling its cgroup reports. The judgement asks it
// whether a starved stretch could have moved a verdict on a write, once it
// has covered the verdict's instant.
//
// Only the late wake-up sees contention by weight (a low cpu.shares or
// cpu.weight beside busy neighbours): the cgroup counts throttling by a
// limit, and nothing else.
package selfhealth

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Tick is how often the monitor wakes while a write is pending (sent and
// not yet delivered on every path, nor missed): a starvation shorter than
// about a tick can go unseen between two wake-ups. Coarse is how often it
// wakes otherwise, to see a starvation that goes on and keep Covered
// moving for the verdicts that come later (a late arrival, a lost
// horizon). A wake-up of an idle Go process costs a few thread wake-ups in
// the kernel, however little the monitor itself does: ticking at Tick all
// the time would cost more CPU than the exporter's whole idle use.
const (
	Tick   = 10 * time.Millisecond
	Coarse = time.Second
)

// historySize bounds the starved stretches kept: enough for a stretch
// every 30 ms over two minutes, longer than a verdict waits by default
// (lost_after: 2 x the deadline, at least 1m). A verdict that reaches
// back past the oldest one kept is judged starved.
const historySize = 4096

// Monitor is the exporter's watch on its own scheduling. Run runs it; the
// judgement reads Covered and Starved from any goroutine.
type Monitor struct {
	threshold time.Duration
	// margin is how long after a starved stretch the exporter may still be
	// stamping what waited in it, and how long before one a write it was
	// sending may still have been on its way out: the threshold and a tick,
	// the most a wake-up can be late, and a starvation last, unseen.
	margin  time.Duration
	base    time.Time
	metrics *metrics.SelfHealth

	// covered is, in nanoseconds after base, the latest wake-up: every
	// starved stretch that began before it is in history.
	covered atomic.Int64
	mu      sync.Mutex
	history *history

	// watching counts the writes pending (Watch); poke wakes a monitor
	// that sleeps for Coarse when the first one comes.
	watching atomic.Int64
	poke     chan struct{}
}

// New returns a monitor that counts a wake-up later than threshold as
// starvation, and records what it sees in m (nil: nowhere).
func New(threshold time.Duration, m *metrics.SelfHealth) (*Monitor, error) {
	if threshold < time.Millisecond {
		return nil, fmt.Errorf("the starvation threshold %s is below 1ms: the scheduler's ordinary wake-up jitter would count as starvation", threshold)
	}
	mon := &Monitor{threshold: threshold, margin: threshold + Tick, base: time.Now(), metrics: m, history: newHistory(historySize), poke: make(chan struct{}, 1)}
	if m != nil {
		m.StarvedThreshold.Set(threshold.Seconds())
	}
	return mon, nil
}

// Run wakes every Tick while a write is pending, every Coarse otherwise,
// until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTimer(Coarse)
	defer t.Stop()
	prev := time.Now()
	expected := prev.Add(Coarse)
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.poke:
			// A write is pending: tick closely from now on. This wake-up is
			// no tick, so it measures nothing.
			if now := time.Now(); expected.Sub(now) > Tick {
				expected = now.Add(Tick)
				t.Reset(Tick)
			}
			continue
		case <-t.C:
		}
		now := time.Now()
		m.woke(prev, now.Sub(expected), now)
		period := Coarse
		if m.watching.Load() > 0 {
			period = Tick
		}
		prev, expected = now, now.Add(period)
		t.Reset(period)
	}
}

// Watch tells the monitor that delta more writes are pending (fewer, if
// negative): it ticks closely while any is.
func (m *Monitor) Watch(delta int) {
	if n := m.watching.Add(int64(delta)); delta > 0 && n == int64(delta) {
		select {
		case m.poke <- struct{}{}:
		default:
		}
	}
}

// woke records a wake-up at now, late after its tick, of a tick set at
// prev: a starvation between them (one later than the threshold) may have
// begun any time after prev.
func (m *Monitor) woke(prev time.Time, late time.Duration, now time.Time) {
	if m.metrics != nil {
		m.metrics.WakeLateness.Observe(max(late, 0).Seconds())
	}
	at := int64(now.Sub(m.base))
	if late > m.threshold {
		m.mu.Lock()
		m.history.add(int64(prev.Sub(m.base)), at, int64(m.margin))
		m.mu.Unlock()
		if m.metrics != nil {
			m.metrics.StarvedSeconds.Add(late.Seconds())
		}
	}
	m.covered.Store(at)
}

// Covered is the instant through which the monitor has seen: every starved
// stretch that began before it is known. A verdict at or after it must
// wait.
func (m *Monitor) Covered() time.Time { return m.base.Add(time.Duration(m.covered.Load())) }

// Starved reports whether the exporter was starved where it could have
// moved a verdict concluded at at on a write sent at sent: near the send,
// or at or shortly before the verdict (see history.starved). at must be
// before Covered.
func (m *Monitor) Starved(sent, at time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.history.starved(int64(sent.Sub(m.base)), int64(at.Sub(m.base)), int64(m.margin))
}
