package metrics

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Probe holds the results of probing: a vector per family of the probe
// registry, and the series each probe, path and controller has of them. It
// is registered on a registry apart from the exporter's process metrics.
type Probe struct {
	vecs map[*Family]vec
	idle *idleCollector

	// live tells the series of a path (or a probe's own) whether they
	// were deleted, so that a late update cannot bring a series back;
	// keyed by probe, path and apiserver ("" and "" for the probe's own).
	mu   sync.Mutex
	live map[[3]string]*seriesLife
}

// seriesLife is one ForProbe's, ForPath's, ForResume's or ForControllers'
// series set: deleted once DeletePath or DeleteProbe removed them. A later
// call for the same labels starts another.
type seriesLife struct{ deleted bool }

// vec is the vector of one family, whichever its type.
type vec struct {
	counter   *prometheus.CounterVec
	gauge     *prometheus.GaugeVec
	histogram *prometheus.HistogramVec
}

func (v vec) collector() prometheus.Collector {
	switch {
	case v.counter != nil:
		return v.counter
	case v.gauge != nil:
		return v.gauge
	}
	return v.histogram
}

func (v vec) with(values []string) any {
	switch {
	case v.counter != nil:
		return v.counter.WithLabelValues(values...)
	case v.gauge != nil:
		return v.gauge.WithLabelValues(values...)
	}
	return v.histogram.WithLabelValues(values...)
}

func (v vec) deletePartial(labels prometheus.Labels) {
	switch {
	case v.counter != nil:
		v.counter.DeletePartialMatch(labels)
	case v.gauge != nil:
		v.gauge.DeletePartialMatch(labels)
	default:
		v.histogram.DeletePartialMatch(labels)
	}
}

// newVec makes the vector of a family as opts say.
func newVec(f *Family, opts Options) vec {
	labels := f.LabelNames()
	switch f.Type {
	case Counter:
		return vec{counter: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: f.Name, Help: f.Help}, labels)}
	case Gauge:
		return vec{gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: f.Name, Help: f.Help}, labels)}
	}
	return vec{histogram: prometheus.NewHistogramVec(opts.histogramOpts(f), labels)}
}

// NewProbe creates the probe metrics with the default Options and registers
// them on reg.
func NewProbe(reg prometheus.Registerer) *Probe {
	return NewProbeWithOptions(reg, Options{})
}

// NewProbeWithOptions creates a vector for every family of a probe's,
// path's or controller's scope, as opts say, and registers them on reg.
func NewProbeWithOptions(reg prometheus.Registerer, opts Options) *Probe {
	m := &Probe{vecs: map[*Family]vec{}, live: map[[3]string]*seriesLife{}}
	for _, f := range Families {
		switch {
		case f.Scope == ScopeInfo || f.Scope == ScopeExporter:
		case f == WatchIdle:
			m.idle = newIdleCollector(prometheus.NewDesc(f.FullName(), f.Help, f.LabelNames(), nil))
			reg.MustRegister(m.idle)
		default:
			m.vecs[f] = newVec(f, opts)
			reg.MustRegister(m.vecs[f].collector())
		}
	}
	return m
}

// Series are the series of one scope's labels (one path of a probe, a
// probe, a controller): every family of the scope that they carry, its
// series at zero created up front so that the hot path does no label
// lookup and an alert on a rate has a zero to compare against from the
// first scrape.
type Series struct {
	owner *Probe
	base  []string // the scope's label values
	life  *seriesLife
	// fixed holds, per family whose labels are all closed sets, a series
	// per combination of values, in the order of the values; nil entries
	// of a Lazy family are made at first use.
	fixed map[*Family][]any
	// values overrides a label's closed set for this series set (the
	// requests of a probe's writes; the ages of its resume checks); sets
	// are then each family's labels' values, all closed or not.
	values map[*Family]map[string][]string
	sets   map[*Family][][]string

	// open holds the series of each family with an open label, made as
	// their values come, under the owner's lock; its keys are fixed.
	open map[*Family]map[string]any
}

func (m *Probe) newSeries(key [3]string, base []string, families []*Family, values map[*Family]map[string][]string) *Series {
	m.mu.Lock()
	if m.live[key] == nil {
		m.live[key] = &seriesLife{}
	}
	life := m.live[key]
	m.mu.Unlock()
	s := &Series{owner: m, base: base, life: life, fixed: map[*Family][]any{}, values: values,
		sets: map[*Family][][]string{}, open: map[*Family]map[string]any{}}
	for _, f := range families {
		sets, closed := s.setsOf(f)
		s.sets[f] = sets
		if !closed {
			s.open[f] = map[string]any{}
			for _, vals := range zeroes(f, sets) {
				s.child(f, vals)
			}
			continue
		}
		combos := combinations(sets)
		s.fixed[f] = make([]any, len(combos))
		if f.Lazy {
			continue
		}
		for i, vals := range combos {
			s.fixed[f][i] = m.vecs[f].with(append(slices.Clone(base), vals...))
		}
	}
	return s
}

// setsOf are the values of each of f's labels for s, and whether they are
// all closed sets.
func (s *Series) setsOf(f *Family) ([][]string, bool) {
	sets := make([][]string, len(f.Labels))
	closed := true
	for i, l := range f.Labels {
		sets[i] = l.Values
		if v, ok := s.values[f][l.Name]; ok {
			sets[i] = v
		}
		if sets[i] == nil {
			closed = false
		}
	}
	return sets, closed
}

// combinations are every combination of one value of each set, the last
// set's values varying fastest.
func combinations(sets [][]string) [][]string {
	out := [][]string{nil}
	for _, set := range sets {
		var next [][]string
		for _, prefix := range out {
			for _, v := range set {
				next = append(next, append(slices.Clone(prefix), v))
			}
		}
		out = next
	}
	return out
}

// zeroes are the combinations of an open family that exist at zero: each
// closed label's values with each open label's Zero; none if an open label
// has no Zero, or the family is Lazy.
func zeroes(f *Family, sets [][]string) [][]string {
	if f.Lazy {
		return nil
	}
	zs := make([][]string, len(sets))
	for i, l := range f.Labels {
		switch {
		case sets[i] != nil:
			zs[i] = sets[i]
		case l.Zero != "":
			zs[i] = []string{l.Zero}
		default:
			return nil
		}
	}
	return combinations(zs)
}

// index is the position of values among the combinations of closed sets.
func index(sets [][]string, values []string) (int, bool) {
	if len(values) != len(sets) {
		return 0, false
	}
	i := 0
	for k, set := range sets {
		j := slices.Index(set, values[k])
		if j < 0 {
			return 0, false
		}
		i = i*len(set) + j
	}
	return i, true
}

// child is f's series of values, made if it is not yet; a series set
// deleted since makes none, and its late updates go nowhere.
func (s *Series) child(f *Family, values []string) any {
	if fixed, ok := s.fixed[f]; ok {
		i, ok := index(s.sets[f], values)
		if !ok {
			panic(f.FullName() + ": " + strings.Join(values, ", ") + " are not values of its labels")
		}
		if c := fixed[i]; c != nil {
			return c
		}
	} else if _, ok := s.open[f]; !ok {
		panic(fmt.Sprintf("%s is not a family of these series", f.FullName()))
	}
	s.owner.mu.Lock()
	defer s.owner.mu.Unlock()
	if s.life.deleted {
		return discarded(f)
	}
	if fixed, ok := s.fixed[f]; ok {
		i, _ := index(s.sets[f], values)
		if fixed[i] == nil {
			fixed[i] = s.owner.vecs[f].with(append(slices.Clone(s.base), values...))
		}
		return fixed[i]
	}
	key := strings.Join(values, "\xff")
	c := s.open[f][key]
	if c == nil {
		c = s.owner.vecs[f].with(append(slices.Clone(s.base), values...))
		s.open[f][key] = c
	}
	return c
}

// Counter is f's series of values.
func (s *Series) Counter(f *Family, values ...string) prometheus.Counter {
	return s.child(f, values).(prometheus.Counter)
}

// Gauge is f's series of values.
func (s *Series) Gauge(f *Family, values ...string) prometheus.Gauge {
	return s.child(f, values).(prometheus.Gauge)
}

// Observer is f's series of values.
func (s *Series) Observer(f *Family, values ...string) prometheus.Observer {
	return s.child(f, values).(prometheus.Observer)
}

// Has reports whether the series carry f (a path without an etcd path to
// pair with has no apiserver lag).
func (s *Series) Has(f *Family) bool {
	_, fixed := s.fixed[f]
	_, open := s.open[f]
	return fixed || open
}

// discarded is a series no registry holds, for the late updates of deleted
// series.
func discarded(f *Family) any {
	switch f.Type {
	case Counter:
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "discarded"})
	case Gauge:
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "discarded"})
	}
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "discarded"})
}
