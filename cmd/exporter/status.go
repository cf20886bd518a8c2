package main

import (
	"bytes"
	"cmp"
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

	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/freshness"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// board keeps each probe's recent cycle verdicts and what went wrong in
// each, so that a person can look at the exporter before querying
// Prometheus, and `check` can show each cycle's. It hears each probe's
// outcomes: what went wrong in a cycle is what the probe concluded was an
// anomaly since its previous verdict.
type board struct {
	keep int // verdicts kept per probe
	// onCycle, if set, hears each verdict with its anomalies.
	onCycle func(probe string, c cycleStatus)

	mu     sync.Mutex
	gen    uint64
	probes map[string]*probeStatus
}

// cycleStatus is one judged cycle.
type cycleStatus struct {
	Cycle uint64
	At    time.Time
	OK    bool
	// Unmeasurable: the cycle settled without a verdict, the exporter
	// starved while one of its writes was due (OK means nothing then).
	Unmeasurable bool
	// Anomalies are the probe's anomalies since its previous verdict, as
	// `series{labels} +n`.
	Anomalies []string
}

type probeStatus struct {
	gen    uint64 // which run of the probe: a restarted probe starts over
	recent []cycleStatus
	// anomalies counts, by series, what went wrong since the previous
	// verdict.
	anomalies map[string]int
	counts    cycleCounts
	// stuck are the resources whose freshness checks say their watch
	// cache is stuck now, as "resource on apiserver"; uncached those
	// served without a watch cache now, with the reason; staleReads the
	// stale reads counted so far, by "kind on apiserver".
	stuck      map[string]bool
	uncached   map[string]string
	staleReads map[string]int
	// refused counts the probe's refused writes by cause, and what
	// denied them where the apiserver named it.
	refused map[refusal]int
	// syncsStuck are the resources whose WatchList syncs say an informer
	// cannot sync now, as "resource on apiserver".
	syncsStuck map[string]bool
}

// refusal is a cause of refused writes and what refused them.
type refusal struct{ cause, by string }

// cycleCounts count a probe's verdicts as they are taken.
type cycleCounts struct {
	judged, ok int
}

func newBoard(keep int) *board {
	return &board{keep: keep, probes: map[string]*probeStatus{}}
}

// boardSink is one run of one probe's line to the board.
type boardSink struct {
	b    *board
	name string
	gen  uint64
}

func (s *boardSink) Outcome(o judge.Outcome) {
	switch {
	case o.Kind == judge.CycleJudged:
		s.b.verdict(s, o.Cycle, o.OK, o.Reason != "")
	case o.Anomaly() != "":
		key := o.Anomaly()
		s.b.record(s, func(ps *probeStatus) {
			ps.anomalies[key]++
			if o.Kind == judge.Answered && o.Reason != "" {
				ps.refused[refusal{o.Reason, o.RefusedBy}]++
			}
		})
	}
}

// track starts the record of a probe that is about to start, dropping any
// record of an earlier run under the same name.
func (b *board) track(name string) *boardSink {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
	b.probes[name] = &probeStatus{gen: b.gen, anomalies: map[string]int{}, stuck: map[string]bool{}, uncached: map[string]string{}, staleReads: map[string]int{},
		refused: map[refusal]int{}, syncsStuck: map[string]bool{}}
	return &boardSink{b: b, name: name, gen: b.gen}
}

// freshness hears the freshness checks of the probe run track started
// last under name.
func (b *board) freshness(name string) func(freshness.Event) {
	b.mu.Lock()
	s := &boardSink{b: b, name: name, gen: b.gen}
	b.mu.Unlock()
	return func(e freshness.Event) {
		b.mu.Lock()
		defer b.mu.Unlock()
		ps := b.status(s)
		if ps == nil {
			return
		}
		where := cmp.Or(e.APIServer, "the load balancer")
		if e.Read != nil {
			for _, k := range e.Read.Kinds {
				ps.staleReads[k+" on "+where]++
			}
			return
		}
		key := e.Resource + " on " + where
		if e.Verdict.Outcome == freshness.Uncached {
			ps.uncached[key] = e.Verdict.Reason
		} else {
			delete(ps.uncached, key)
		}
		if e.Stuck {
			ps.stuck[key] = true
		} else {
			delete(ps.stuck, key)
		}
	}
}

// freshnessLine is the status page's line on the probe's watch caches:
// which are stuck, which resources are served without one, and the stale
// reads counted; "" when all is well.
func (b *board) freshnessLine(name string) string {
	return b.line(name, (*probeStatus).freshnessParts)
}

// line joins what parts says of the probe under name; "" when it says
// nothing, or the probe is not known.
func (b *board) line(name string, parts func(*probeStatus) []string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ps := b.probes[name]
	if ps == nil {
		return ""
	}
	return strings.Join(parts(ps), "; ")
}

func (ps *probeStatus) freshnessParts() []string {
	var parts []string
	if len(ps.stuck) > 0 {
		parts = append(parts, "watch caches stuck: "+strings.Join(slices.Sorted(maps.Keys(ps.stuck)), ", "))
	}
	if len(ps.uncached) > 0 {
		var u []string
		for _, k := range slices.Sorted(maps.Keys(ps.uncached)) {
			u = append(u, k+" ("+ps.uncached[k]+")")
		}
		parts = append(parts, "not checked, no watch cache: "+strings.Join(u, ", "))
	}
	for _, k := range slices.Sorted(maps.Keys(ps.staleReads)) {
		parts = append(parts, fmt.Sprintf("stale reads %s: %d", k, ps.staleReads[k]))
	}
	return parts
}

// refusedLine is the status page's line on the probe's refused writes: by
// cause, what refused them and the fix; "" when none was refused.
func (b *board) refusedLine(name string) string {
	return b.line(name, (*probeStatus).refusedParts)
}

func (ps *probeStatus) refusedParts() []string {
	var parts []string
	for _, r := range slices.SortedFunc(maps.Keys(ps.refused), func(a, b refusal) int {
		return cmp.Or(cmp.Compare(a.cause, b.cause), cmp.Compare(a.by, b.by))
	}) {
		what := r.cause
		if r.by != "" {
			what += " by " + r.by
		}
		parts = append(parts, fmt.Sprintf("%s: %d (%s)", what, ps.refused[r], judge.RefusalFix(r.cause)))
	}
	return parts
}

// forget drops the record of a probe that stopped.
func (b *board) forget(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.probes, name)
}

// status is the record of s's probe run, nil if it has been forgotten or
// replaced. The caller holds mu.
func (b *board) status(s *boardSink) *probeStatus {
	if ps := b.probes[s.name]; ps != nil && ps.gen == s.gen {
		return ps
	}
	return nil
}

// record has f change the record of s's probe run, unless it has been
// forgotten or replaced.
func (b *board) record(s *boardSink, f func(*probeStatus)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ps := b.status(s); ps != nil {
		f(ps)
	}
}

func (b *board) verdict(s *boardSink, n uint64, ok, unmeasurable bool) {
	b.mu.Lock()
	ps := b.status(s)
	if ps == nil {
		b.mu.Unlock()
		return
	}
	c := &ps.counts
	if !unmeasurable {
		c.judged++
		if ok {
			c.ok++
		}
	}
	status := cycleStatus{Cycle: n, At: time.Now(), OK: ok && !unmeasurable, Unmeasurable: unmeasurable}
	for _, k := range slices.Sorted(maps.Keys(ps.anomalies)) {
		status.Anomalies = append(status.Anomalies, fmt.Sprintf("%s +%d", k, ps.anomalies[k]))
	}
	clear(ps.anomalies)
	ps.recent = append(ps.recent, status)
	if len(ps.recent) > b.keep {
		ps.recent = slices.Delete(ps.recent, 0, len(ps.recent)-b.keep)
	}
	onCycle := b.onCycle
	b.mu.Unlock()
	if onCycle != nil {
		onCycle(s.name, status)
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

var statusTemplate = template.Must(template.New("status").Parse(`
<h2>Recent cycles</h2>
<p>Newest verdict first. A cycle with a miss is judged at its deadline, after newer cycles. Anomalies are the counters that rose since the probe's previous verdict.</p>
{{range .}}
<h3>Probe {{.Name}}: {{.OK}} of {{.Judged}} cycles successful</h3>
{{with .Paths}}<p><b>Paths down:</b> {{.}}</p>{{end}}
{{with .Refused}}<p><b>Writes refused</b> (the probe's own namespace, permissions or policies, not the control plane): {{.}}</p>{{end}}
{{with .Freshness}}<p><b>Freshness:</b> {{.}}</p>{{end}}
{{with .WatchList}}<p><b>WatchList:</b> {{.}}</p>{{end}}
{{with .Held}}<p><b>Markers held by other clients' finalizers:</b> {{.}}</p>{{end}}
{{if .Recent}}<table>
<tr><th>cycle</th><th>judged at</th><th>result</th><th>anomalies</th></tr>
{{range .Recent}}<tr><td>{{.Cycle}}</td><td>{{.At.Format "2006-01-02 15:04:05.000 MST"}}</td><td>{{if .Unmeasurable}}no verdict: the exporter was starved{{else if .OK}}success{{else}}<b>failure</b>{{end}}</td><td>{{range .Anomalies}}{{.}}<br>{{else}}none{{end}}</td></tr>
{{end}}</table>{{else}}<p>No cycle judged yet.</p>{{end}}
{{end}}`))

// probeView is what the status page shows of one probe.
type probeView struct {
	Name       string
	Judged, OK int
	Recent     []cycleStatus
	// Paths says which paths have no stream, and why.
	Paths string
	// Freshness names the stuck watch caches and the stale reads
	// (pkg/probe/freshness).
	Freshness string
	// Refused counts the refused writes by cause.
	Refused string
	// WatchList names the resources whose WatchList syncs are stuck
	// (pkg/probe/watchlist).
	WatchList string
	// Held names the markers the probe deleted whose deletion other
	// clients' finalizers hold.
	Held string
}

// heldShown bounds the held markers the status page names.
const heldShown = 5

// heldLine is the status page's line on the markers other clients'
// finalizers hold, oldest first (held's order): how many, and the first
// few with their finalizers, who set them and for how long; "" for none.
func heldLine(held []probe.HeldMarker, now time.Time) string {
	if len(held) == 0 {
		return ""
	}
	var parts []string
	for _, h := range held[:min(len(held), heldShown)] {
		by := strings.Join(h.Finalizers, ", ")
		if len(h.Managers) > 0 {
			by += " of " + strings.Join(h.Managers, ", ")
		}
		parts = append(parts, fmt.Sprintf("%s (%s, for %s)", h.Name, by, now.Sub(h.Since).Round(time.Second)))
	}
	line := fmt.Sprintf("%d: %s", len(held), strings.Join(parts, "; "))
	if len(held) > heldShown {
		line += fmt.Sprintf("; and %d more", len(held)-heldShown)
	}
	return line
}

// landingHandler serves the landing page with the probes' recent cycles.
// The page is built per request: the status changes with every cycle.
func landingHandler(metricsPath string, profiling bool, mgr *manager, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var views []probeView
		for _, p := range mgr.probes() {
			name := p.Name()
			c := mgr.board.counts(name)
			v := probeView{Name: name, Judged: c.judged, OK: c.ok, Recent: mgr.board.recent(name)}
			v.Paths = strings.Join(p.PathsDown(), "; ")
			v.Freshness = mgr.board.freshnessLine(name)
			v.Refused = mgr.board.refusedLine(name)
			v.WatchList = mgr.board.watchListLine(name)
			v.Held = heldLine(p.HeldMarkers(), time.Now())
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
		out, err := yaml.Marshal(config.File{Probes: mgr.configs()})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(out)
	})
}
