package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
)

// Exporter holds metrics about the exporter process itself.
type Exporter struct {
	TracingSpansDropped prometheus.Counter
}

// RegisterExporter registers metrics about the exporter process itself
// (build info, Go runtime, process, tracing). They live on a registry apart
// from the probe results, as node_exporter keeps them, so that
// --web.disable-exporter-metrics can leave them out.
func RegisterExporter(reg prometheus.Registerer) *Exporter {
	m := &Exporter{
		TracingSpansDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace,
			Name:      "tracing_spans_dropped_total",
			Help:      "Spans that never reached the OTLP collector because their export failed.",
		}),
	}
	reg.MustRegister(
		versioncollector.NewCollector(namespace),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.TracingSpansDropped,
	)
	return m
}
