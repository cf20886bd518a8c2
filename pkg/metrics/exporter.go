package metrics

import (
	"time"

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
		// The scheduler's metrics besides the defaults: how long runnable
		// goroutines waited for a thread (go_sched_latencies_seconds) and
		// the stop-the-world pauses (go_sched_pauses_*), which delay every
		// arrival stamp alike.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsScheduler)),
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

// SelfHealth holds what the exporter measures of its own ability to
// measure: its self-monitor's wake-ups and the CPU throttling of its
// cgroup. They go on the probe registry, as RegisterInfo's do: the
// self-health alert reads them, and it inhibits the latency alerts of a
// starved exporter, so they must stay with --web.disable-exporter-metrics.
type SelfHealth struct {
	WakeLateness     prometheus.Observer
	CPUWait          prometheus.Counter
	StarvedSeconds   prometheus.Counter
	StarvedThreshold prometheus.Gauge
	CPUWaitAvailable prometheus.Gauge
}

// CPUThrottling is what the exporter's cgroup says of its CPU limit: the
// enforcement periods in which it ran, those in which it was throttled,
// and how long it was throttled.
type CPUThrottling struct {
	Periods, ThrottledPeriods uint64
	Throttled                 time.Duration
}

// RegisterSelfHealth registers the self-health series on reg, as opts
// expose histograms; cpu reads the cgroup's throttling at scrape time, and
// says false when it cannot (no cgroup CPU controller): then those series
// are left out rather than shown as zeros that would mean "not throttled".
func RegisterSelfHealth(reg prometheus.Registerer, opts Options, cpu func() (CPUThrottling, bool)) *SelfHealth {
	wake := prometheus.NewHistogram(opts.histogramOpts(WakeLateness))
	m := &SelfHealth{WakeLateness: wake, CPUWait: counter(CPUWait), StarvedSeconds: counter(StarvedSeconds), StarvedThreshold: gauge(StarvedThreshold), CPUWaitAvailable: gauge(CPUWaitAvailable)}
	reg.MustRegister(wake, m.CPUWait, m.StarvedSeconds, m.StarvedThreshold, m.CPUWaitAvailable, &cpuCollector{read: cpu,
		periods:   desc(CPUPeriods),
		throttled: desc(CPUThrottledPeriods),
		seconds:   desc(CPUThrottledSeconds),
	})
	return m
}

func desc(f *Family) *prometheus.Desc { return prometheus.NewDesc(f.FullName(), f.Help, nil, nil) }

// cpuCollector exports the cgroup's CPU throttling, read at scrape time.
type cpuCollector struct {
	read                        func() (CPUThrottling, bool)
	periods, throttled, seconds *prometheus.Desc
}

func (c *cpuCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.periods
	ch <- c.throttled
	ch <- c.seconds
}

func (c *cpuCollector) Collect(ch chan<- prometheus.Metric) {
	t, ok := c.read()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.periods, prometheus.CounterValue, float64(t.Periods))
	ch <- prometheus.MustNewConstMetric(c.throttled, prometheus.CounterValue, float64(t.ThrottledPeriods))
	ch <- prometheus.MustNewConstMetric(c.seconds, prometheus.CounterValue, t.Throttled.Seconds())
}
