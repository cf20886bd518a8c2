package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
)

// RegisterExporter registers metrics about the exporter process itself
// (build info, Go runtime, process). They live on a registry apart from the
// probe results, as node_exporter keeps them, so that
// --web.disable-exporter-metrics can leave them out.
func RegisterExporter(reg prometheus.Registerer) {
	reg.MustRegister(
		versioncollector.NewCollector(namespace),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
}
