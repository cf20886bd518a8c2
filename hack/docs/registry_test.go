package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// recorder is a Registerer that remembers the descriptors of everything
// registered through it: the families the exporter declares, whether or not
// they have a series yet.
type recorder struct {
	*prometheus.Registry
	descs []*prometheus.Desc
}

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return r.Registry.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var (
	descName      = regexp.MustCompile(`fqName: "([^"]+)"`)
	descConst     = regexp.MustCompile(`constLabels: \{([^}]*)\}`)
	descVariable  = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	constLabelKey = regexp.MustCompile(`(\w+)="(?:[^"\\]|\\.)*"`)
)

// registered returns every watchprobe_ family the exporter registers, on
// the probe registry (pkg/metrics NewProbe and RegisterInfo) and on its own
// (RegisterExporter), with the type and help its series are exposed with.
func registered() ([]family, error) {
	probes := &recorder{Registry: prometheus.NewRegistry()}
	self := &recorder{Registry: prometheus.NewRegistry()}
	m := metrics.NewProbe(probes)
	metrics.RegisterInfo(probes)
	metrics.RegisterExporter(self)
	exercise(m)

	types := map[string]string{}
	for _, g := range []prometheus.Gatherer{probes, self} {
		mfs, err := g.Gather()
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			types[mf.GetName()] = strings.ToLower(mf.GetType().String())
		}
	}
	var out []family
	for _, d := range append(probes.descs, self.descs...) {
		s := d.String()
		name := descName.FindStringSubmatch(s)[1]
		if !strings.HasPrefix(name, "watchprobe_") {
			continue // the Go and process collectors' families
		}
		typ, ok := types[name]
		if !ok {
			return nil, fmt.Errorf("%s is registered but has no series in the generator: give it one in exercise (hack/docs/registry_test.go)", name)
		}
		f := family{Name: name, Type: typ, Help: helpOf(d)}
		if v := descVariable.FindStringSubmatch(s)[1]; v != "" {
			f.Labels = strings.Split(v, ",")
		}
		for _, kv := range constLabelKey.FindAllStringSubmatch(descConst.FindStringSubmatch(s)[1], -1) {
			f.Labels = append(f.Labels, kv[1])
		}
		out = append(out, f)
	}
	return out, nil
}

// helpOf reads a descriptor's help, which Desc offers only in its String.
func helpOf(d *prometheus.Desc) string {
	s := d.String()
	i := strings.Index(s, `help: "`)
	if i < 0 {
		return ""
	}
	var help string
	if _, err := fmt.Sscanf(s[i+len("help: "):], "%q", &help); err != nil {
		return ""
	}
	return help
}

// exercise gives every family a series: a probe on every path, a path
// pinned to an apiserver, a relist and activity on each, a controller.
func exercise(m *metrics.Probe) {
	s := m.ForProbe("p", []string{metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd})
	paths := []*metrics.PathSeries{m.ForPath("p", metrics.PathAPIServer, "10.0.0.1:6443", true)}
	for _, ps := range s.Paths {
		paths = append(paths, ps)
	}
	for _, ps := range paths {
		ps.Counter(metrics.Relists, metrics.RelistInitial, metrics.ModeList).Inc()
		ps.Observer(metrics.RelistDuration, metrics.ModeList).Observe(0.001)
		ps.Idle.Touch(time.Now())
	}
	m.ForResume("p", metrics.PathWatch, "", []string{"1m"}).Gauge(metrics.ResumeWindow).Set(60)
	s.Gauge(metrics.ResumeAge, "1m").Set(60)
	m.ForControllers("p", []string{metrics.ControllerDeployment})
	m.ForResource("p", "pods", "")
	m.ForReads("p", "10.0.0.1:6443")
}

// metricGroups order the reference. A family not listed here still
// appears, under "Other metrics".
var metricGroups = []struct {
	title    string
	families []string
}{
	{"Latency and writes", []string{
		"watchprobe_event_latency_seconds",
		"watchprobe_events_observed_total",
		"watchprobe_apiserver_lag_seconds",
		"watchprobe_probe_success",
		"watchprobe_last_event_timestamp_seconds",
		"watchprobe_write_duration_seconds",
		"watchprobe_writes_total",
		"watchprobe_write_errors_total",
		"watchprobe_markers_pending_deletion",
	}},
	{"Delivery anomalies", []string{
		"watchprobe_events_missed_total",
		"watchprobe_events_late_total",
		"watchprobe_events_lost_total",
		"watchprobe_events_duplicate_total",
		"watchprobe_marker_foreign_changes_total",
		"watchprobe_events_replayed_total",
		"watchprobe_events_out_of_order_total",
		"watchprobe_events_after_failed_write_total",
	}},
	{"Watch health", []string{
		"watchprobe_path_up",
		"watchprobe_watch_stalled",
		"watchprobe_watch_idle_seconds",
		"watchprobe_watch_restarts_total",
		"watchprobe_watch_duration_seconds",
		"watchprobe_relists_total",
		"watchprobe_relist_duration_seconds",
		"watchprobe_bookmarks_total",
		"watchprobe_requests_failed_total",
		"watchprobe_requests_throttled_total",
	}},
	{"Resume checks", []string{
		"watchprobe_resume_window_seconds",
		"watchprobe_resume_checks_total",
		"watchprobe_resume_replay_seconds",
		"watchprobe_resume_age_seconds",
	}},
	{"Controller reactions", []string{
		"watchprobe_controller_reaction_seconds",
		"watchprobe_controller_share_seconds",
		"watchprobe_controller_change_delivery_seconds",
		"watchprobe_controller_changes_total",
		"watchprobe_controller_change_errors_total",
		"watchprobe_controller_reactions_missed_total",
		"watchprobe_controller_reactions_late_total",
		"watchprobe_controller_reactions_lost_total",
	}},
	{"List freshness", []string{
		"watchprobe_list_freshness_seconds",
		"watchprobe_list_freshness_checks_total",
		"watchprobe_list_freshness_fallbacks_total",
		"watchprobe_list_freshness_errors_total",
		"watchprobe_list_freshness_stuck",
		"watchprobe_list_reads_total",
		"watchprobe_list_stale_reads_total",
	}},
	{"The exporter itself", []string{
		"watchprobe_build_info",
		"watchprobe_config_last_reload_successful",
		"watchprobe_config_last_reload_success_timestamp_seconds",
		"watchprobe_tracing_spans_dropped_total",
		"watchprobe_log_records_dropped_total",
	}},
}

// What the exporter registers is pkg/metrics' table, family for family:
// name, type, labels and help.
func TestRegistryIsTheTable(t *testing.T) {
	reg, err := registered()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]family{}
	for _, f := range reg {
		byName[f.Name] = f
	}
	for _, f := range families() {
		r, ok := byName[f.Name]
		switch {
		case !ok:
			t.Errorf("%s is in the table, and not registered", f.Name)
		case r.Type != f.Type || r.Help != f.Help || !slices.Equal(r.Labels, f.Labels):
			t.Errorf("%s registered as %s %v %q, the table says %s %v %q", f.Name, r.Type, r.Labels, r.Help, f.Type, f.Labels, f.Help)
		}
		delete(byName, f.Name)
	}
	for name := range byName {
		t.Errorf("%s is registered, and not in the table", name)
	}
}
