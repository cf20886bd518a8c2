package main

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// board keeps each probe's recent cycle verdicts and what went wrong in
// each, so that a person can look at the exporter before querying
// Prometheus, and `check` can show progress.
//
// What went wrong is read from the probe's anomaly counters: the increase
// of each since the probe's previous verdict. A verdict is taken under the
// probe's lock, so it is only queued there; the counters are read on the
// board's own goroutine.
type board struct {
	gatherer prometheus.Gatherer
	// faults, if set, counts the increments of the counters gatherer
	// serves (metrics.Probe.Faults): while it stays, none rose, and a
	// flush needs no gather.
	faults     func() uint64
	keep       int // verdicts kept per probe
	flushEvery time.Duration
	logger     *slog.Logger
	// onCycle, if set, hears each verdict once its anomalies are known, on
	// the board's goroutine.
	onCycle func(probe string, c cycleStatus)

	mu     sync.Mutex
	gen    uint64
	probes map[string]*probeStatus
	queue  []verdict
	wake   chan struct{}
	// read: the counters have been read, as cached, since the last probe
	// was tracked, with faults at readAt. The cache, not each probe's last,
	// stands for an unchanged read: a read for one probe's verdict also
	// read the others' counters, which their own next verdicts must see.
	read   bool
	readAt uint64
	cached map[string]map[string]float64
}

// cycleStatus is one judged cycle.
type cycleStatus struct {
	Cycle uint64
	At    time.Time
	OK    bool
	// Anomalies are the anomaly counters that rose since the probe's
	// previous verdict, as `name{labels} +n`.
	Anomalies []string
}

type probeStatus struct {
	gen    uint64 // which run of the probe: a restarted probe starts over
	recent []cycleStatus
	last   map[string]float64 // anomaly counters at the previous verdict
	counts cycleCounts
	// settled holds cycles settled after one older than them is not yet.
	settled map[uint64]bool
}

// cycleCounts count a probe's verdicts as they are taken.
type cycleCounts struct {
	judged, ok int
	latest     uint64 // the newest cycle settled
	// through: every cycle up to this one has settled. A cycle with a miss
	// settles only at its deadline, after newer ones.
	through uint64
}

type verdict struct {
	probe  string
	gen, n uint64
	ok     bool
	at     time.Time
}

func newBoard(g prometheus.Gatherer, faults func() uint64, keep int, flushEvery time.Duration, logger *slog.Logger) *board {
	return &board{gatherer: g, faults: faults, keep: keep, flushEvery: flushEvery, logger: logger, probes: map[string]*probeStatus{}, wake: make(chan struct{}, 1)}
}

// verdictRecorder is the probe.Recorder that reports one probe's verdicts
// to the board.
type verdictRecorder struct {
	probe.NopRecorder
	b    *board
	name string
	gen  uint64
}

func (r *verdictRecorder) Verdict(n uint64, ok bool) {
	r.b.verdict(verdict{probe: r.name, gen: r.gen, n: n, ok: ok, at: time.Now()})
}

// track starts the record of a probe that is about to start, dropping any
// record of an earlier run under the same name.
func (b *board) track(name string) *verdictRecorder {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
	b.probes[name] = &probeStatus{gen: b.gen, last: map[string]float64{}, settled: map[uint64]bool{}}
	b.read = false // its counters may not be at zero
	return &verdictRecorder{b: b, name: name, gen: b.gen}
}

// forget drops the record of a probe that stopped.
func (b *board) forget(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.probes, name)
}

func (b *board) verdict(v verdict) {
	b.mu.Lock()
	if ps := b.probes[v.probe]; ps != nil && ps.gen == v.gen {
		c := &ps.counts
		c.judged++
		if v.ok {
			c.ok++
		}
		c.latest = max(c.latest, v.n)
		ps.settled[v.n] = true
		for ps.settled[c.through+1] {
			delete(ps.settled, c.through+1)
			c.through++
		}
		b.queue = append(b.queue, v)
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// The board reads the counters at most once per flushEvery: with many
// probes, verdicts come many times a second, and one read serves them all.
// At 100 probes a read costs about 15 ms of CPU; the exporter's page can
// wait 5 s, check's progress lines only 1 s. While no fault counter rises,
// as in a healthy cluster, a flush reads none.
const (
	serveFlushEvery = 5 * time.Second
	checkFlushEvery = time.Second
)

// run reads the anomalies of queued verdicts until ctx ends.
func (b *board) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
			b.flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(b.flushEvery):
		}
	}
}

// flush reads the anomalies of every queued verdict, with one gather, or
// none if no fault counter rose since the last.
func (b *board) flush() {
	b.mu.Lock()
	queue := b.queue
	b.queue = nil
	var faults uint64
	if b.faults != nil {
		faults = b.faults() // before the gather: what rises after it is read next time
	}
	unchanged := b.faults != nil && b.read && faults == b.readAt
	counters, tracked := b.cached, b.gen
	b.mu.Unlock()
	if len(queue) == 0 {
		return
	}
	if !unchanged {
		var err error
		if counters, err = anomalyCounters(b.gatherer); err != nil {
			b.logger.Warn("reading anomaly counters for the status page", "err", err)
		}
		b.mu.Lock()
		// A probe tracked since the read began needs a read of its own.
		b.read, b.readAt, b.cached = err == nil && b.gen == tracked, faults, counters
		b.mu.Unlock()
	}
	for _, v := range queue {
		b.mu.Lock()
		ps := b.probes[v.probe]
		if ps == nil || ps.gen != v.gen {
			b.mu.Unlock()
			continue
		}
		now := counters[v.probe]
		c := cycleStatus{Cycle: v.n, At: v.at, OK: v.ok}
		for _, k := range slices.Sorted(maps.Keys(now)) {
			if d := now[k] - ps.last[k]; d > 0 {
				c.Anomalies = append(c.Anomalies, fmt.Sprintf("%s +%g", k, d))
			}
		}
		if now != nil {
			ps.last = now
		}
		ps.recent = append(ps.recent, c)
		if len(ps.recent) > b.keep {
			ps.recent = slices.Delete(ps.recent, 0, len(ps.recent)-b.keep)
		}
		b.mu.Unlock()
		if b.onCycle != nil {
			b.onCycle(v.probe, c)
		}
	}
}

// counts returns the probe's verdict counts.
func (b *board) counts(name string) cycleCounts {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ps := b.probes[name]; ps != nil {
		return ps.counts
	}
	return cycleCounts{}
}

// recent returns the probe's kept verdicts, newest first.
func (b *board) recent(name string) []cycleStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.probes[name]
	if ps == nil {
		return nil
	}
	r := slices.Clone(ps.recent)
	slices.Reverse(r)
	return r
}

// anomalyCounters reads every anomaly counter, by probe, keyed by the
// series without its probe label, as `events_missed_total{path="watch",reason="silent"}`.
// Counters at zero, nearly all of them, are left out (a missing key reads
// as zero), so that the board keeps only the few that rose; a probe with
// series has a map, empty if all are zero.
func anomalyCounters(g prometheus.Gatherer) (map[string]map[string]float64, error) {
	families, err := g.Gather()
	out := map[string]map[string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if !metrics.Fault(mf.GetName(), labels) {
				continue
			}
			name := labels["probe"]
			delete(labels, "probe")
			if out[name] == nil {
				out[name] = map[string]float64{}
			}
			if v := m.GetCounter().GetValue(); v != 0 {
				out[name][seriesKey(strings.TrimPrefix(mf.GetName(), "watchprobe_"), labels)] = v
			}
		}
	}
	return out, err
}

// seriesKey writes a series as PromQL would select it, empty labels left
// out.
func seriesKey(name string, labels map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if labels[k] != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
		}
	}
	if len(parts) == 0 {
		return name
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

var statusTemplate = template.Must(template.New("status").Parse(`
<h2>Recent cycles</h2>
<p>Newest verdict first. A cycle with a miss is judged at its deadline, after newer cycles. Anomalies are the counters that rose since the probe's previous verdict.</p>
{{range .}}
<h3>Probe {{.Name}}: {{.OK}} of {{.Judged}} cycles successful</h3>
{{with .Paths}}<p><b>Paths down:</b> {{.}}</p>{{end}}
{{if .Recent}}<table>
<tr><th>cycle</th><th>judged at</th><th>result</th><th>anomalies</th></tr>
{{range .Recent}}<tr><td>{{.Cycle}}</td><td>{{.At.Format "2006-01-02 15:04:05.000 MST"}}</td><td>{{if .OK}}success{{else}}<b>failure</b>{{end}}</td><td>{{range .Anomalies}}{{.}}<br>{{else}}none{{end}}</td></tr>
{{end}}</table>{{else}}<p>No cycle judged yet.</p>{{end}}
{{end}}`))

// landingHandler serves the landing page with the probes' recent cycles.
// The page is built per request: the status changes with every cycle.
func landingHandler(metricsPath string, profiling bool, mgr *manager, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		type probeView struct {
			Name       string
			Judged, OK int
			Recent     []cycleStatus
			// Paths says which paths have no stream, and why.
			Paths string
		}
		var views []probeView
		for _, p := range mgr.probes() {
			name := p.Name()
			c := mgr.board.counts(name)
			v := probeView{Name: name, Judged: c.judged, OK: c.ok, Recent: mgr.board.recent(name)}
			v.Paths = strings.Join(p.PathsDown(), "; ")
			views = append(views, v)
		}
		var status bytes.Buffer
		if err := statusTemplate.Execute(&status, views); err != nil {
			logger.Error("rendering the status page", "err", err)
		}
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "watchprobe",
			Description: "Kubernetes List-Watch health, measured end to end with marker objects",
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: metricsPath, Text: "Metrics"},
				{Address: "/config", Text: "Configuration", Description: "the running probes"},
				{Address: "/-/healthy", Text: "Health"},
				{Address: "/-/ready", Text: "Readiness"},
			},
			ExtraHTML: status.String(),
			Profiling: strconv.FormatBool(profiling),
			ExtraCSS:  "table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }",
		})
		if err != nil {
			logger.Error("building the landing page", "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		landing.ServeHTTP(w, r)
	})
}

// configHandler serves the running probes as a config file. Probe settings
// hold no secret today: the etcd client key is a path to a file, not the
// key. A secret setting must be a prometheus/common/config.Secret, which
// marshals as <secret>; TestConfigFieldsHoldNoPlainSecret keeps it so.
func configHandler(mgr *manager) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		out, err := yaml.Marshal(fileConfig{Probes: mgr.configs()})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(out)
	})
}
