package metrics

import (
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Activity records when a path last received anything. Its age is computed
// at scrape time, so the idle gauge is exact whenever Prometheus looks,
// rather than as stale as the last update.
type Activity struct {
	mu   sync.Mutex
	last time.Time // monotonic; zero until the first event or bookmark
}

// Touch records activity at t.
func (a *Activity) Touch(t time.Time) {
	a.mu.Lock()
	if t.After(a.last) {
		a.last = t
	}
	a.mu.Unlock()
}

// Since returns the time since the last activity, or false if none yet.
func (a *Activity) Since(now time.Time) (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last.IsZero() {
		return 0, false
	}
	return now.Sub(a.last), true
}

// idleCollector exports watchprobe_watch_idle_seconds for every tracked path.
type idleCollector struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	by   map[[3]string]*Activity
}

func newIdleCollector(desc *prometheus.Desc) *idleCollector {
	return &idleCollector{desc: desc, by: map[[3]string]*Activity{}}
}

func (c *idleCollector) track(probe, path, apiserver string) *Activity {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &Activity{}
	c.by[[3]string{probe, path, apiserver}] = a
	return a
}

func (c *idleCollector) untrack(probe, path, apiserver string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, [3]string{probe, path, apiserver})
}

func (c *idleCollector) untrackProbe(probe string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.by, func(k [3]string, _ *Activity) bool { return k[0] == probe })
}

func (c *idleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *idleCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, a := range c.by {
		// A path that has received nothing yet has no age to report.
		if d, ok := a.Since(now); ok {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, d.Seconds(), k[0], k[1], k[2])
		}
	}
}
