package metrics

import "github.com/prometheus/client_golang/prometheus"

// Agent holds a node agent's series (watchprobe-agent): a handful per
// node, each labelled with the agent's node and zone, so that thousands
// of nodes stay a few series each.
type Agent struct {
	Healthy      prometheus.Gauge
	Refused      prometheus.Gauge
	Writes       prometheus.Counter
	WriteErrors  prometheus.Counter
	Latency      prometheus.Observer
	Missed       prometheus.Counter
	Lost         prometheus.Counter
	Stalls       prometheus.Counter
	StreamEnds   prometheus.Counter
	Relists      prometheus.Counter
	Unmeasurable prometheus.Counter
}

// RegisterAgent registers a node agent's series on reg, for node in zone.
// Its latency histogram has native buckets only: classic buckets would be
// most of a node's series, and per-zone quantiles are read from the
// native histograms summed across nodes.
func RegisterAgent(reg prometheus.Registerer, node, zone string) *Agent {
	labels := prometheus.Labels{"node": node, "zone": zone}
	c := func(f *Family) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: f.Name, Help: f.Help, ConstLabels: labels})
	}
	g := func(f *Family) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: f.Name, Help: f.Help, ConstLabels: labels})
	}
	hopts := Options{NativeHistogramsOnly: true}.histogramOpts(AgentEventLatency)
	hopts.ConstLabels = labels
	latency := prometheus.NewHistogram(hopts)
	m := &Agent{
		Healthy:      g(AgentHealthy),
		Refused:      g(AgentRefused),
		Writes:       c(AgentWrites),
		WriteErrors:  c(AgentWriteErrors),
		Latency:      latency,
		Missed:       c(AgentEventsMissed),
		Lost:         c(AgentEventsLost),
		Stalls:       c(AgentStalls),
		StreamEnds:   c(AgentStreamEnds),
		Relists:      c(AgentRelists),
		Unmeasurable: c(AgentUnmeasurable),
	}
	reg.MustRegister(m.collectors()...)
	return m
}

func (m *Agent) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Healthy, m.Refused, m.Writes, m.WriteErrors, m.Latency.(prometheus.Histogram), m.Missed, m.Lost, m.Stalls, m.StreamEnds, m.Relists, m.Unmeasurable}
}

// Unregister removes m's series from reg.
func (m *Agent) Unregister(reg prometheus.Registerer) {
	for _, c := range m.collectors() {
		reg.Unregister(c)
	}
}
