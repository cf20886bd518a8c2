package probe

import (
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// writeKey identifies one marker write: the marker's name (unique per run,
// replica and cycle) and the writer's sequence number.
type writeKey struct {
	name string
	seq  uint64
}

// pendingWrite is one write whose events the paths are expected to deliver.
type pendingWrite struct {
	key   writeKey
	event string // the watch event this write must cause: added, modified or deleted
	// sent is taken just before the request leaves, with Go's monotonic
	// reading, so arrival.Sub(sent) is immune to wall-clock steps and is
	// positive even when the event beats the write's response.
	sent   time.Time
	acked  bool // the apiserver answered with success
	failed bool // the apiserver answered with an error, or none came
	done   bool // every path has seen or missed it, or it failed
	seen   []bool
	missed []bool
	cycle  *cycle
}

// cycle groups the writes of one create-update-delete cycle, so the probe's
// success can be judged once all of them are settled.
type cycle struct {
	open    bool // the writer may still add writes
	pending int
	ok      bool
}

// tracker matches events arriving on each path to the writes that caused
// them and decides, at the deadline, which were missed. It takes every time
// as an argument so that its logic can be tested without a clock.
type tracker struct {
	mu       sync.Mutex
	paths    []string
	series   *metrics.ProbeSeries
	deadline time.Duration
	// retain keeps settled writes so a late arrival is still matched and
	// recorded rather than mistaken for a foreign object.
	retain  time.Duration
	byKey   map[writeKey]*pendingWrite
	deletes map[string]*pendingWrite
	logger  *slog.Logger
}

func newTracker(paths []string, series *metrics.ProbeSeries, deadline time.Duration, logger *slog.Logger) *tracker {
	return &tracker{
		paths:    paths,
		series:   series,
		deadline: deadline,
		retain:   max(3*deadline, 5*time.Minute),
		byKey:    map[writeKey]*pendingWrite{},
		deletes:  map[string]*pendingWrite{},
		logger:   logger,
	}
}

func (t *tracker) newCycle() *cycle {
	return &cycle{open: true, ok: true}
}

// closeCycle tells the tracker no more writes join c.
func (t *tracker) closeCycle(c *cycle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.open = false
	t.settleCycle(c)
}

// expect registers a write before it is sent, so that an event arriving
// before the write's response still finds it. It stamps the send time as its
// very last step; the caller sends immediately after.
func (t *tracker) expect(c *cycle, key writeKey, event string, now func() time.Time) *pendingWrite {
	w := &pendingWrite{
		key:    key,
		event:  event,
		seen:   make([]bool, len(t.paths)),
		missed: make([]bool, len(t.paths)),
		cycle:  c,
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byKey[key] = w
	if event == metrics.EventDeleted {
		t.deletes[key.name] = w
	}
	c.pending++
	w.sent = now()
	return w
}

// ack records the apiserver's answer to w.
func (t *tracker) ack(w *pendingWrite, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		w.failed = true
		w.cycle.ok = false
		t.settle(w)
		return
	}
	w.acked = true
	if t.allSeen(w) {
		t.settle(w)
	}
}

// observe matches one event that arrived on path i. It returns false for an
// event that belongs to no write this tracker knows.
func (t *tracker) observe(i int, event string, obj metav1.Object, arrival time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	var w *pendingWrite
	if event == metrics.EventDeleted {
		// A deleted object carries its last state, so the delete is found by
		// name rather than by the sequence number on the object.
		w = t.deletes[obj.GetName()]
	} else if seq, ok := seqOf(obj); ok {
		w = t.byKey[writeKey{obj.GetName(), seq}]
	}
	if w == nil {
		return false
	}
	if w.seen[i] {
		t.logger.Debug("event delivered again", "path", t.paths[i], "marker", w.key.name, "seq", w.key.seq)
		return true
	}
	w.seen[i] = true
	latency := arrival.Sub(w.sent)
	ps := t.series.Paths[t.paths[i]]
	ps.Latency[w.event].Observe(latency.Seconds())
	ps.Observed[w.event].Inc()
	ps.LastEvent.Set(float64(arrival.UnixNano()) / 1e9)
	if w.missed[i] {
		t.logger.Info("event arrived after its deadline", "path", t.paths[i], "marker", w.key.name, "seq", w.key.seq, "latency", latency)
	}
	if w.acked && !w.done && t.allSeen(w) {
		t.settle(w)
	}
	return true
}

// sweep declares missed, on each path, every acknowledged write older than
// the deadline that the path has not delivered, and forgets settled writes
// older than the retention.
func (t *tracker) sweep(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, w := range t.byKey {
		age := now.Sub(w.sent)
		if !w.done && w.acked && age > t.deadline {
			for i := range t.paths {
				if !w.seen[i] {
					w.missed[i] = true
					w.cycle.ok = false
					t.series.Paths[t.paths[i]].Missed.Inc()
					t.logger.Warn("event missed", "path", t.paths[i], "marker", w.key.name, "seq", w.key.seq, "event", w.event, "deadline", t.deadline)
				}
			}
			t.settle(w)
		}
		if w.done && age > t.retain {
			delete(t.byKey, key)
			if t.deletes[key.name] == w {
				delete(t.deletes, key.name)
			}
		}
	}
}

// pending reports how many writes are not settled yet.
func (t *tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, w := range t.byKey {
		if !w.done {
			n++
		}
	}
	return n
}

func (t *tracker) allSeen(w *pendingWrite) bool {
	for _, s := range w.seen {
		if !s {
			return false
		}
	}
	return true
}

func (t *tracker) settle(w *pendingWrite) {
	if w.done {
		return
	}
	w.done = true
	w.cycle.pending--
	t.settleCycle(w.cycle)
}

func (t *tracker) settleCycle(c *cycle) {
	if c.open || c.pending > 0 {
		return
	}
	if c.ok {
		t.series.Success.Set(1)
	} else {
		t.series.Success.Set(0)
	}
}
