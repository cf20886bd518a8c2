package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
)

// Exporter holds metrics about the exporter process itself.
type Exporter struct {
	TracingSpansDropped prometheus.Counter
	LogRecordsDropped   prometheus.Counter
}

func counter(f *Family) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: f.Name, Help: f.Help})
}

func gauge(f *Family) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: f.Name, Help: f.Help})
}

// RegisterExporter registers metrics about the exporter process itself (Go
// runtime, process, tracing, logging). They live on a registry apart from
// the probe results, as node_exporter keeps them, so that
// --web.disable-exporter-metrics can leave them out.
func RegisterExporter(reg prometheus.Registerer) *Exporter {
	m := &Exporter{TracingSpansDropped: counter(TracingSpansDropped), LogRecordsDropped: counter(LogRecordsDropped)}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.TracingSpansDropped,
		m.LogRecordsDropped,
	)
	return m
}

// Config holds the outcome of configuration reloads.
type Config struct {
	LastReloadSuccessful       prometheus.Gauge
	LastReloadSuccessTimestamp prometheus.Gauge
}

// RegisterInfo registers what every scrape must carry whatever the flags:
// the build (a version join on any series) and whether the running probes
// are the configured ones. They go on the probe registry, beside the
// results they qualify, not on the exporter's own.
func RegisterInfo(reg prometheus.Registerer) *Config {
	m := &Config{LastReloadSuccessful: gauge(ConfigReloadSuccessful), LastReloadSuccessTimestamp: gauge(ConfigReloadTimestamp)}
	reg.MustRegister(versioncollector.NewCollector(namespace), m.LastReloadSuccessful, m.LastReloadSuccessTimestamp)
	return m
}
