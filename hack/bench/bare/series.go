//go:build series

package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Built with the series tag, the bare client also keeps the exporter's own
// series (pkg/metrics, every family and label set of a probe with the
// informer and watch paths) and observes into them what the exporter would:
// each write's duration and each arrival's latency from its send stamp. Its
// memory beside the bare client's proper tells how much of the exporter's
// is its series, whatever else the exporter does. It serves them as the
// exporter does, so that a scrape's cost counts too.
func init() {
	addr := flag.String("series.listen-address", "", "serve the exporter's series on this address, at /metrics")
	newSeries = func(probes int) seriesKeeper {
		reg := prometheus.NewRegistry()
		m := metrics.NewProbe(reg)
		if *addr != "" {
			mux := http.NewServeMux()
			mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true}))
			go func() {
				err := http.ListenAndServe(*addr, mux)
				fmt.Fprintln(os.Stderr, "serving the series:", err)
				os.Exit(1)
			}()
		}
		k := &exporterSeries{}
		for i := range probes {
			k.probes = append(k.probes, &probeSeries{
				series: m.ForProbe(probeName(i), []string{metrics.PathInformer, metrics.PathWatch}),
				sentAt: map[sentKey]time.Time{},
			})
		}
		return k
	}
}

type exporterSeries struct{ probes []*probeSeries }

type probeSeries struct {
	series *metrics.ProbeSeries
	mu     sync.Mutex
	sentAt map[sentKey]time.Time
}

var verbs = map[watch.EventType]string{watch.Added: metrics.VerbCreate, watch.Modified: metrics.VerbUpdate, watch.Deleted: metrics.VerbDelete}

var events = map[watch.EventType]string{watch.Added: metrics.EventAdded, watch.Modified: metrics.EventModified, watch.Deleted: metrics.EventDeleted}

func (k *exporterSeries) sent(probe int, name string, seq uint64, ev watch.EventType) {
	p := k.probes[probe]
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	// Each write arrives on both paths, or not at all: forget it then.
	for key, at := range p.sentAt {
		if now.Sub(at) > 30*time.Second {
			delete(p.sentAt, key)
		}
	}
	p.sentAt[sentKey{name, seq}] = now
}

func (k *exporterSeries) wrote(probe int, ev watch.EventType, took time.Duration) {
	w := k.probes[probe].series.Writes[verbs[ev]]
	w.Total.Inc()
	w.Duration.Observe(took.Seconds())
}

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
	sent, ok := p.sentAt[key]
	p.mu.Unlock()
	if !ok {
		return
	}
	ps := p.series.Paths[path]
	ps.Latency[events[ev]].Observe(at.Sub(sent).Seconds())
	ps.Observed[events[ev]].Inc()
	ps.LastEvent.Set(float64(at.UnixNano()) / 1e9)
}
