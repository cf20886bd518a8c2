// Package selfhealth measures the exporter's own ability to measure: a
// goroutine that wakes at every tick, how late it woke, how long the
// exporter's threads waited for a CPU meanwhile, and the stretches in
// which it was starved by either. A CPU limit's throttle counts in the
// threads' run-queue wait: a thread that had work waits through it, while
// the monitor's own small wake-up, first to run after each refill, need
// not come late. Only where the kernel shows no run-queue wait does the
// monitor read the cgroup's throttling at each tick instead: the kernel
// sums throttled time over CPUs, which overstates a stop on a many-CPU
// node, and on cgroup v2 each read of cpu.stat flushes statistics over
// every CPU, costs worth paying only where nothing else sees a throttle.
// The judgement asks it whether a starved stretch could have moved a
// verdict on a write, once it has covered the verdict's instant.
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
// not yet delivered on every path, nor missed), or a verdict waits for an
// instant still to come (an arrival of a miss held at its deadline, a
// lost horizon near): a starvation shorter than about a tick can go
// unseen between two wake-ups. Coarse is how often it wakes otherwise,
// to see a starvation that goes on and keep Covered moving for the
// verdicts that come later (a late arrival of a write missed). A wake-up of an idle Go process costs a few thread wake-ups in
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

// Window is how far back the monitor averages its threads' run-queue wait.
const Window = 100 * time.Millisecond

// Rounds is how many scheduling rounds the wait per round is weighed
// against: a stretch is starved when the exporter's threads waited, per
// time slice they got, more than the threshold divided by Rounds over the
// last Window (1 ms at the default threshold). A low weight beside busy
// neighbours (a small CPU request on a busy node) lets the monitor's own
// wake-ups, which need almost no CPU, through within a few milliseconds,
// while every goroutine with work to do waits many times that, and an
// event passes through several on its way to its stamp: measured at
// cpu.shares 10 beside two busy processes, the threads waited 3.5 ms per
// slice (median over 100 ms) and events arrived 25 to 40 ms late; without
// them, never more than 0.65 ms per slice.
const Rounds = 50

// Monitor is the exporter's watch on its own scheduling. Run runs it; the
// judgement reads Covered and Starved from any goroutine.
type Monitor struct {
	threshold time.Duration
	// margin is how long after a starved stretch the exporter may still be
	// stamping what waited in it, and how long before one a write it was
	// sending may still have been on its way out: the threshold and a tick.
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

	// Only Run's goroutine touches what follows: the readings of the
	// threads' run-queue wait (nil where the kernel shows none) and, only
	// without it, of the cgroup's throttling (nil without a cgroup CPU
	// controller), their previous values, and what the stretches within
	// Window waited, newest last.
	runQueue  *runQueue
	noCPUWait string // why runQueue is nil
	throttled *throttledReader
	last      reading
	recent    []queued
}

// reading is what the monitor read at a wake-up: the threads' run-queue
// wait and time slices, and the cgroup's throttled time and periods, all
// cumulative.
type reading struct {
	wait      time.Duration
	slices    int64
	throttled time.Duration
	periods   int64
}

// queued is the run-queue wait, the time slices, the throttled time and
// the throttled periods of a stretch that ended at at.
type queued struct {
	at              time.Time
	wait, throttled time.Duration
	slices, periods int64
}

// New returns a monitor that counts the exporter starved by threshold (see
// starvedStretch), reads the throttling of cgroup (nil: none) where the
// kernel shows no run-queue wait, and records what it sees in m (nil:
// nowhere).
func New(threshold time.Duration, cgroup *CgroupCPU, m *metrics.SelfHealth) (*Monitor, error) {
	if err := CheckThreshold(threshold); err != nil {
		return nil, err
	}
	mon := &Monitor{
		threshold: threshold, margin: threshold + Tick, base: time.Now(), metrics: m,
		history: newHistory(historySize), poke: make(chan struct{}, 1),
	}
	mon.runQueue, mon.noCPUWait = openRunQueue("/proc/self/task")
	if mon.runQueue == nil && cgroup != nil {
		if r, err := cgroup.throttledReader(); err == nil {
			mon.throttled = r
		}
	}
	if m != nil {
		m.StarvedThreshold.Set(threshold.Seconds())
		if mon.runQueue != nil {
			m.CPUWaitAvailable.Set(1)
		}
	}
	return mon, nil
}

// openRunQueue opens the run-queue readings of the threads in dir (a
// /proc/<pid>/task), or says why they say nothing: a kernel without
// schedstats (or a sandbox that emulates /proc) shows no file, or zeros,
// even for the threads that have run to start this process.
func openRunQueue(dir string) (*runQueue, string) {
	rq := newRunQueue(dir)
	if err := rq.refresh(); err != nil {
		return nil, err.Error()
	}
	if _, slices, err := rq.wait(); err != nil || slices == 0 {
		rq.close()
		if err == nil {
			return nil, "the threads' schedstat in " + dir + " shows no time slice run"
		}
		return nil, err.Error()
	}
	return rq, ""
}

// CPUWaitUnavailable says why the run-queue wait of the exporter's threads
// cannot be read, "" if it can. Without it, contention by weight (a small
// CPU request on a busy node) is seen only when the monitor's own wake-ups
// come later than the threshold.
func (m *Monitor) CPUWaitUnavailable() string { return m.noCPUWait }

// CheckThreshold says why threshold cannot be a starvation threshold, if it
// cannot: below 5 ms, the scheduler's ordinary jitter would count as
// starvation.
func CheckThreshold(threshold time.Duration) error {
	if threshold < 5*time.Millisecond {
		return fmt.Errorf("the starvation threshold %s is below 5ms: the scheduler's ordinary wake-up jitter would count as starvation; use 5ms or more (default 50ms)", threshold)
	}
	return nil
}

// stretchDelay estimates how long a stretch between two wake-ups held up
// a goroutine that had work: late is the second wake-up's lateness (a
// pause of the whole process: the node's, the hypervisor's, a long
// stop-the-world), throttled the time the cgroup's CPU limit throttled
// the exporter per throttled period over the Window that ends with it
// (read only without a run-queue wait; the kernel sums it over CPUs, an
// overestimate on several), and wait and slices the run-queue wait of its
// threads and the time slices they got over that Window, of which an
// event waits through about Rounds on its way to its stamp (a low weight
// among busy neighbours, or a throttle).
func stretchDelay(late, throttled, wait time.Duration, slices int64) time.Duration {
	d := max(late, throttled)
	if slices > 0 {
		d = max(d, wait*Rounds/time.Duration(slices))
	}
	return d
}

// starvedStretch judges a stretch (see stretchDelay): starved if it may
// have held a goroutine up for longer than the threshold. Shorter delays
// are the ordinary jitter of a busy host, which the threshold accepts.
func starvedStretch(threshold, late, throttled, wait time.Duration, slices int64) bool {
	return stretchDelay(late, throttled, wait, slices) > threshold
}

// Run wakes every Tick while a write is pending, every Coarse otherwise,
// until ctx ends.
func (m *Monitor) Run(ctx context.Context) {
	t := time.NewTimer(Coarse)
	defer t.Stop()
	if m.runQueue != nil {
		defer m.runQueue.close()
	}
	if m.throttled != nil {
		defer m.throttled.close()
	}
	m.last = m.read(false)
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
		period := Coarse
		if m.watching.Load() > 0 {
			period = Tick
		}
		r := m.read(period == Coarse)
		m.woke(prev, now, now.Sub(expected), r)
		prev, expected = now, now.Add(period)
		t.Reset(period)
	}
}

// read reads the run-queue wait, or the throttling, now, listing the
// threads again on refresh; what cannot be read reads as the last value.
func (m *Monitor) read(refresh bool) reading {
	r := m.last
	if m.runQueue != nil {
		if refresh {
			_ = m.runQueue.refresh() // a failure leaves the threads it had
		}
		if w, n, err := m.runQueue.wait(); err == nil {
			r.wait, r.slices = w, n
		}
	}
	if m.throttled != nil {
		if t, n, err := m.throttled.read(); err == nil {
			r.throttled, r.periods = t, n
		}
	}
	return r
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
// prev, with r read then: if the stretch between them was starved, it may
// have begun any time after prev. A thread that exited takes its counts
// with it, so no difference goes below zero.
func (m *Monitor) woke(prev, now time.Time, late time.Duration, r reading) {
	late = max(late, 0)
	q := queued{at: now, wait: max(r.wait-m.last.wait, 0), slices: max(r.slices-m.last.slices, 0),
		throttled: max(r.throttled-m.last.throttled, 0), periods: max(r.periods-m.last.periods, 0)}
	m.last = r
	var wait, throttled time.Duration
	var slices, periods int64
	drop := 0
	m.recent = append(m.recent, q)
	for i, s := range m.recent {
		if now.Sub(s.at) >= Window {
			drop = i + 1
			continue
		}
		wait, slices = wait+s.wait, slices+s.slices
		throttled, periods = throttled+s.throttled, periods+s.periods
	}
	m.recent = append(m.recent[:0], m.recent[drop:]...)
	if periods > 0 {
		throttled /= time.Duration(periods)
	}
	delay := stretchDelay(late, throttled, wait, slices)
	starved := delay > m.threshold
	if m.metrics != nil {
		m.metrics.WakeLateness.Observe(late.Seconds())
		m.metrics.CPUWait.Add(q.wait.Seconds())
		if starved {
			m.metrics.StarvedSeconds.Add(now.Sub(prev).Seconds())
		}
	}
	at := int64(now.Sub(m.base))
	if starved {
		m.mu.Lock()
		m.history.add(int64(prev.Sub(m.base)), at, int64(delay), int64(m.margin))
		m.mu.Unlock()
	}
	m.covered.Store(at)
}

// Resumed is the instant by which the exporter has stamped whatever
// arrived for it before at, as far as its starvation goes (see
// history.resumed): at itself if it was not starved at at. It is final
// once before Covered; at must be before Covered.
func (m *Monitor) Resumed(at time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.base.Add(time.Duration(m.history.resumed(int64(at.Sub(m.base)), int64(m.margin))))
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
