//go:build series

package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// newSeriesKeeper, in a build with the series tag, keeps the exporter's
// own series (pkg/metrics with the exporter's default options, every family
// and label set of a probe with the informer and watch paths) and observes
// into them what the exporter would: each write's count and, if it
// succeeded, its duration; each first arrival of a write on a path, its
// latency from the send stamp. With addr, it serves them there as the
// exporter does, so that a scrape counts too. Its memory beside the bare
// client's proper is what the series cost a client that does the same
// work.
func newSeriesKeeper(probes int, addr string) (seriesKeeper, error) {
	reg := prometheus.NewRegistry()
	k := newExporterSeries(metrics.NewProbe(reg), probes, time.Now)
	if addr != "" {
		// Bound before the bench is told "ready", so that a taken port
		// fails the start, not the run.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("serving the series: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true}))
		go func() { _ = http.Serve(l, mux) }()
	}
	return k, nil
}

type exporterSeries struct {
	probes []*probeSeries
	now    func() time.Time
}

type probeSeries struct {
	series *metrics.ProbeSeries
	mu     sync.Mutex
	sent   map[sentKey]*sentWrite
}

// sentKey names a write: a delete by its marker alone (seq 0), since its
// event carries the seq of the write before.
type sentKey struct {
	name string
	seq  uint64
}

// sentWrite is a write awaiting its arrivals, one per path.
type sentWrite struct {
	at   time.Time
	seen map[string]bool
}

// paths are the exporter's default paths, with the mode of their first list.
var paths = map[string]string{metrics.PathInformer: metrics.ModeWatchList, metrics.PathWatch: metrics.ModeList}

func newExporterSeries(m *metrics.Probe, probes int, now func() time.Time) *exporterSeries {
	k := &exporterSeries{now: now}
	for i := range probes {
		s := m.ForProbe(probeName(i), []string{metrics.PathInformer, metrics.PathWatch})
		// The exporter's first list makes these series; how long it took
		// is not timed here.
		for path, mode := range paths {
			s.Paths[path].Counter(metrics.Relists, metrics.RelistInitial, mode).Inc()
			s.Paths[path].Observer(metrics.RelistDuration, mode).Observe(0)
		}
		k.probes = append(k.probes, &probeSeries{series: s, sent: map[sentKey]*sentWrite{}})
	}
	return k
}

var verbs = map[watch.EventType]string{watch.Added: metrics.VerbCreate, watch.Modified: metrics.VerbUpdate, watch.Deleted: metrics.VerbDelete}

var events = map[watch.EventType]string{watch.Added: metrics.EventAdded, watch.Modified: metrics.EventModified, watch.Deleted: metrics.EventDeleted}

// forgetAfter drops a write that has not arrived on every path by then.
const forgetAfter = 30 * time.Second

// sent stamps a write as sent, and returns the stamp, from which the
// write's duration is timed too.
func (k *exporterSeries) sent(probe int, name string, seq uint64) time.Time {
	p := k.probes[probe]
	now := k.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for key, w := range p.sent {
		if now.Sub(w.at) > forgetAfter {
			delete(p.sent, key)
		}
	}
	p.sent[sentKey{name, seq}] = &sentWrite{at: now, seen: map[string]bool{}}
	return now
}

func (k *exporterSeries) wrote(probe int, ev watch.EventType, took time.Duration, err error) {
	s := k.probes[probe].series
	s.Counter(metrics.Writes, verbs[ev]).Inc()
	if err == nil {
		s.Observer(metrics.WriteDuration, verbs[ev]).Observe(took.Seconds())
	}
}

// arrived times the first arrival of a write on a path; a write arriving
// again (the exporter counts it as replayed) or never sent is not timed.
func (k *exporterSeries) arrived(probe int, path string, ev watch.EventType, obj any, at time.Time) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	key := sentKey{name: m.GetName()}
	if ev != watch.Deleted {
		if key.seq, err = strconv.ParseUint(m.GetAnnotations()[annotationSeq], 10, 64); err != nil {
			return
		}
	}
	p := k.probes[probe]
	p.mu.Lock()
	w, ok := p.sent[key]
	first := ok && !w.seen[path]
	if first {
		w.seen[path] = true
		if len(w.seen) == len(paths) {
			delete(p.sent, key)
		}
	}
	p.mu.Unlock()
	if !first {
		return
	}
	ps := p.series.Paths[path]
	ps.Observer(metrics.EventLatency, events[ev]).Observe(at.Sub(w.at).Seconds())
	ps.Counter(metrics.EventsObserved, events[ev]).Inc()
	ps.Gauge(metrics.LastEventTimestamp).Set(float64(at.UnixNano()) / 1e9)
}
