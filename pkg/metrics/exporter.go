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

// RegisterExporter registers metrics about the exporter process itself (Go
// runtime, process, tracing). They live on a registry apart from the probe
// results, as node_exporter keeps them, so that
// --web.disable-exporter-metrics can leave them out.
func RegisterExporter(reg prometheus.Registerer) *Exporter {
	m := &Exporter{
		TracingSpansDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "tracing_spans_dropped_total",
			Help:      "Spans that never reached the OTLP collector because their export failed.",
		}),
		LogRecordsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "log_records_dropped_total",
			Help:      "Log records dropped because their destination (stderr) did not take them as fast as they came.",
		}),
	}
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
	m := &Config{
		LastReloadSuccessful: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "config_last_reload_successful",
			Help:      "1 if the last configuration reload succeeded (or none was asked for since start-up), 0 if it failed and older settings still run.",
		}),
		LastReloadSuccessTimestamp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace,
			Name:      "config_last_reload_success_timestamp_seconds",
			Help:      "Unix time of the last successful configuration load, at start-up or by a reload.",
		}),
	}
	reg.MustRegister(versioncollector.NewCollector(namespace), m.LastReloadSuccessful, m.LastReloadSuccessTimestamp)
	return m
}
