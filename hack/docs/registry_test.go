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
	metrics.RegisterSelfHealth(probes, metrics.Options{}, func() (metrics.CPUThrottling, bool) { return metrics.CPUThrottling{}, true })
	metrics.RegisterExporter(self)
	// A node agent's series, on its own registry in watchprobe-agent.
	agent := &recorder{Registry: prometheus.NewRegistry()}
	metrics.RegisterAgent(agent, "node-1", "zone-a").Latency.Observe(0.001)
	exercise(m)

	types := map[string]string{}
	for _, g := range []prometheus.Gatherer{probes, self, agent} {
		mfs, err := g.Gather()
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			types[mf.GetName()] = strings.ToLower(mf.GetType().String())
		}
	}
	var out []family
	for _, d := range slices.Concat(probes.descs, self.descs, agent.descs) {
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
	m.ForWatchList("p", "pods", "")
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
