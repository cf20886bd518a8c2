package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// The fault campaign: the exporter binary against the real control plane,
// with a fault proxy in front of the apiserver for every apiserver-side
// path, hit by one fault after another in an order drawn from a seed. After
// each fault the exporter's counters, read from /metrics, must have moved by
// exactly what the proxy (or the foreign writer) records having done, on
// the path it did it to, and by nothing on every other path; at every
// scrape the counters must never decrease, no path may have counted more
// late and lost events than missed ones, and the etcd paths, under no
// proxy, must show no anomaly. campaignFaults is the table of the faults
// and of what each must show.
//
// The exporter has one kubeconfig, so its writes and its informer and watch
// paths share one proxy; two probes, each in a namespace of its own, tell
// the informer's streams from the watch path's there: probe ci measures
// informer, etcd and a path pinned to an apiserver, probe cw watch, etcd
// and another pinned path. Each pinned path dials its own proxy (the
// probe's apiservers.endpoints), so a fault on it hits it alone. The faults
// on the shared proxy hit watch streams and watch requests of one
// namespace only, never a write.

var (
	campaignSeed   = flag.Uint64("campaign.seed", 0, "seed of TestCampaign's faults; 0 means $WATCHPROBE_CAMPAIGN_SEED, else a random one")
	campaignRounds = flag.Int("campaign.rounds", 0, "faults TestCampaign injects; 0 means $WATCHPROBE_CAMPAIGN_ROUNDS, else "+strconv.Itoa(campaignSmallRounds))
)

// The probes' settings, short so that rounds are quick, and the faults'
// sizes, chosen against them so that what a fault causes does not depend on
// how fast the machine is that day.
const (
	campaignInterval  = 400 * time.Millisecond
	campaignDeadline  = time.Second
	campaignLostAfter = 4 * time.Second
	// campaignStallAfter is above campaignHold plus a delivery, so that a
	// held path is late but not stalled; a stall is resumed as soon as the
	// gauge shows it, its events held about this long: well short of
	// lost_after, so they are late, not lost.
	campaignStallAfter = 2 * time.Second
	// campaignHold is past the deadline, so that every event held this long
	// is late whatever else happens (its latency includes the hold), and
	// 2.5 s short of lost_after, so that it arrives before it is judged.
	campaignHold = 1500 * time.Millisecond
	// campaignMaxThrottled: each 429 carries Retry-After: 1, which
	// client-go waits before it retries, so the path's reconnect takes about
	// this many seconds: short of lost_after.
	campaignMaxThrottled = 2
	// campaignSmallRounds is what `make test` runs: every fault kind once,
	// then a few more.
	campaignSmallRounds = 12
	// informerBackoffReset: client-go's reflector waits before each relist
	// on a backoff that doubles from 800 ms and resets only when 2 minutes
	// have passed since it last did. A second expiry of the informer path
	// within that time would relist it 1.6 to 3.2 s later, a third 3.2 to
	// 6.4 s: writes missed past lost_after before the relist begins would
	// be lost as unavailable, not as relisted. The campaign keeps the
	// informer's expiries this far apart (informerExpirySpacing rounds,
	// and a wait if those passed sooner).
	informerBackoffReset  = 2*time.Minute + 5*time.Second
	informerExpirySpacing = 30
)

// campaignPath names one path's series.
type campaignPath struct{ probe, path, apiserver string }

func (p campaignPath) String() string {
	if p.apiserver != "" {
		return p.probe + "/" + p.path + "@" + p.apiserver
	}
	return p.probe + "/" + p.path
}

// campaignTarget is a path that faults hit, and where: the proxy its list
// and watch requests go through, and its probe's namespace, which tells its
// streams and events from the other probe's on a shared proxy.
type campaignTarget struct {
	campaignPath
	proxy *faultproxy.Proxy
	ns    string
}

// watches matches the target's watch requests, and so its streams.
func (tg campaignTarget) watches() faultproxy.RequestMatch {
	return func(r faultproxy.Request) bool { return r.Kind == "watch" && r.Namespace == tg.ns }
}

// lists matches the target's LIST requests.
func (tg campaignTarget) lists() faultproxy.RequestMatch {
	return func(r faultproxy.Request) bool { return r.Kind == "list" && r.Namespace == tg.ns }
}

// updates matches the MODIFIED events of the target's markers.
func (tg campaignTarget) updates() faultproxy.Match {
	return func(ev faultproxy.Event) bool { return ev.Type == "MODIFIED" && ev.Namespace == tg.ns }
}

// firstUpdates matches the first MODIFIED of each marker whose ADDED it
// saw: the one the marker's second update follows (the probes make two),
// not its delete. Reordered past the delete, an update would leave the
// informer holding a marker it never hears deleted, which a later relist
// would deliver again as deleted.
func (tg campaignTarget) firstUpdates() faultproxy.Match {
	var mu sync.Mutex
	added := map[string]bool{}
	return func(ev faultproxy.Event) bool {
		if ev.Namespace != tg.ns {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch ev.Type {
		case "ADDED":
			added[ev.Name] = true
		case "MODIFIED":
			if added[ev.Name] {
				delete(added, ev.Name)
				return true
			}
		case "DELETED":
			delete(added, ev.Name)
		}
		return false
	}
}

// A span bounds a count; hi < 0 leaves it unbounded above.
type span struct{ lo, hi float64 }

func exactly(n float64) span      { return span{n, n} }
func atMost(n float64) span       { return span{0, n} }
func between(lo, hi float64) span { return span{lo, hi} }

var anyCount = span{0, -1}

func (s span) holds(v float64) bool { return v >= s.lo && (s.hi < 0 || v <= s.hi) }

func (s span) String() string {
	switch {
	case s.lo == s.hi:
		return fmt.Sprint(s.lo)
	case s.hi < 0:
		return fmt.Sprintf("at least %g", s.lo)
	}
	return fmt.Sprintf("%g to %g", s.lo, s.hi)
}

// expect gives, by key (campaignKeys, or the sums "missed" and "lost"),
// how much a path's counter must have moved in a round. A key of
// campaignKeys it does not name must not have moved at all.
type expect map[string]span

// campaignKeys are the counters of a path that a round checks: every
// verdict but arrivals, and every stream and request count but bookmarks.
var campaignKeys = func() []string {
	keys := []string{"late", "duplicate", "replayed", "out_of_order", "after_failed_write", "requests_failed", "foreign"}
	for _, r := range []string{metrics.MissedSilent, metrics.MissedRelist, metrics.MissedUnavailable} {
		keys = append(keys, "missed_"+r, "lost_"+r)
	}
	for _, r := range []string{metrics.EndTimeout, metrics.EndClosedEarly, metrics.EndExpired, metrics.EndTooManyRequests, metrics.EndError, metrics.EndEOF, metrics.EndClient} {
		keys = append(keys, "restarts_"+r)
	}
	for _, r := range []string{metrics.RelistInitial, metrics.RelistExpired, metrics.RelistError} {
		keys = append(keys, "relists_"+r)
	}
	return append(keys, "throttled_"+metrics.RequestList, "throttled_"+metrics.RequestWatch)
}()

// campaignFacts is what a round's expectations are computed from: what was
// done, as recorded by whoever did it, and how the target's counters moved.
type campaignFacts struct {
	// records are the faults the target's proxy applied in the round, to
	// the target's streams and requests.
	records []faultproxy.Record
	// patches is how many markers the foreign writer changed.
	patches float64
	// window is how many writes of the target's probe were acknowledged
	// from the round's start until a cycle after the target relisted: a
	// relist can replace no other write's event.
	window float64
	delta  map[string]float64
}

func (f campaignFacts) count(fault faultproxy.Fault) float64 {
	return f.countRequests(fault, "")
}

// countRequests counts the records of fault, of requests of kind if given.
func (f campaignFacts) countRequests(fault faultproxy.Fault, kind string) float64 {
	var n float64
	for _, r := range f.records {
		if r.Fault == fault && (kind == "" || r.Request.Kind == kind) {
			n++
		}
	}
	return n
}

// held counts the marker events stalled or delayed at least d.
func (f campaignFacts) held(d time.Duration) float64 {
	var n float64
	for _, r := range f.records {
		if (r.Fault == faultproxy.Stall || r.Fault == faultproxy.Delay) && isMarkerEvent(r.Event) && r.Held >= d {
			n++
		}
	}
	return n
}

// got is the target's own delta of key, for an expectation that relates
// two of its counters.
func (f campaignFacts) got(key string) float64 { return f.delta[key] }

func isMarkerEvent(ev faultproxy.Event) bool {
	return ev.Type == "ADDED" || ev.Type == "MODIFIED" || ev.Type == "DELETED"
}

// scope says which paths a fault hits.
type scope int

const (
	onePath    scope = iota // the target path
	wholeProbe              // every path of the target's probe
)

// campaignFault is a kind of fault. inject applies it to r's target, waits
// until its record shows it applied, and clears it; want says, from the
// record and the target's deltas once everything settled, how each path
// it hits must have counted it.
type campaignFault struct {
	name  string
	scope scope
	// on, if set, says which targets the fault can hit.
	on     func(campaignTarget) bool
	inject func(c *campaign, r *campaignRound)
	want   func(f campaignFacts) expect
}

// campaignFaults are the campaign's faults and what each must show; any
// counter of campaignKeys not named stays where it was, on every path.
var campaignFaults = []campaignFault{
	{
		name:   "drop",
		inject: eventRule(faultproxy.Drop, (*faultproxy.Proxy).Drop, "updates", campaignTarget.updates),
		// Never delivered, on a path live and not relisting: missed by the
		// deadline for no reason the path shows, and lost at lost_after.
		want: func(f campaignFacts) expect {
			n := f.count(faultproxy.Drop)
			return expect{"missed_silent": exactly(n), "lost_silent": exactly(n)}
		},
	},
	{
		name:   "duplicate",
		inject: eventRule(faultproxy.Duplicate, (*faultproxy.Proxy).Duplicate, "updates", campaignTarget.updates),
		// The same resourceVersion again, with no relist in between.
		want: func(f campaignFacts) expect {
			return expect{"duplicate": exactly(f.count(faultproxy.Duplicate))}
		},
	},
	{
		name:   "reorder",
		inject: eventRule(faultproxy.Reorder, (*faultproxy.Proxy).Reorder, "first updates", campaignTarget.firstUpdates),
		// Each swap delivers one update after the next one.
		want: func(f campaignFacts) expect {
			return expect{"out_of_order": exactly(f.count(faultproxy.Reorder))}
		},
	},
	{
		name: "hold",
		inject: func(c *campaign, r *campaignRound) {
			n := 1 + r.rng.IntN(4)
			r.asked = fmt.Sprintf("the stream %s until %d events were held that long", campaignHold, n)
			r.target.proxy.DelayStreams(campaignHold, r.target.watches())
			c.await(30*time.Second, fmt.Sprintf("%d events held %s", n, campaignHold), func(*campaignSnapshot) bool {
				return r.facts(nil).held(campaignHold) >= float64(n)
			})
			r.target.proxy.DelayStreams(0, nil)
		},
		// An event held past the deadline arrives late, and before
		// lost_after: every one held that long, and perhaps one held less
		// and slowed further on its way, but none the proxy did not hold.
		// Missed on a live stream, for no reason the path shows.
		want: func(f campaignFacts) expect {
			return expect{"late": between(f.held(campaignDeadline), f.held(time.Nanosecond)), "missed_silent": exactly(f.got("late"))}
		},
	},
	{
		name: "stall",
		inject: func(c *campaign, r *campaignRound) {
			r.asked = "the stream until the path is stalled"
			r.target.proxy.StallStreams(r.target.watches())
			c.await(30*time.Second, r.target.String()+" stalled", func(s *campaignSnapshot) bool { return s.paths[r.target.campaignPath]["stalled"] == 1 })
			r.target.proxy.Resume()
			c.await(30*time.Second, r.target.String()+" no longer stalled", func(s *campaignSnapshot) bool { return s.paths[r.target.campaignPath]["stalled"] == 0 })
		},
		// Stalled while held beyond stall_after (the gauge was awaited),
		// then as a hold: late, never lost.
		want: func(f campaignFacts) expect {
			return expect{"late": between(f.held(campaignDeadline), f.held(time.Nanosecond)), "missed_silent": exactly(f.got("late"))}
		},
	},
	{
		name: "cut",
		inject: func(c *campaign, r *campaignRound) {
			r.asked = "the path's streams"
			if c.cut(r) == 0 {
				c.t.Fatalf("round %d: %s has no stream open to cut", r.n, r.target)
			}
		},
		// A read error ends each stream cut (eof), and the path resumes from
		// its resourceVersion: nothing lost, nothing relisted. Whatever the
		// reconnect kept from arriving by the deadline arrives late.
		want: func(f campaignFacts) expect {
			return expect{"restarts_eof": exactly(f.count(faultproxy.Cut)),
				"missed_silent": anyCount, "missed_unavailable": anyCount, "missed": exactly(f.got("late")), "late": anyCount}
		},
	},
	{
		name: "throttle",
		inject: func(c *campaign, r *campaignRound) {
			n := 1 + r.rng.IntN(campaignMaxThrottled)
			r.asked = fmt.Sprintf("%d watch requests after a cut", n)
			r.target.proxy.Throttle(n, r.target.watches())
			if c.cut(r) == 0 {
				c.t.Fatalf("round %d: %s has no stream open to cut", r.n, r.target)
			}
			c.awaitRecords(r, faultproxy.Throttle, n)
			r.target.proxy.Clear()
		},
		// Every 429 counted, though client-go retried each by itself and the
		// path never saw a failed request; the cut as a cut.
		want: func(f campaignFacts) expect {
			return expect{"restarts_eof": exactly(f.count(faultproxy.Cut)),
				"throttled_" + metrics.RequestWatch: exactly(f.countRequests(faultproxy.Throttle, "watch")),
				"throttled_" + metrics.RequestList:  exactly(f.countRequests(faultproxy.Throttle, "list")),
				"missed_silent":                     anyCount, "missed_unavailable": anyCount, "missed": exactly(f.got("late")), "late": anyCount}
		},
	},
	{
		name: "expire",
		inject: func(c *campaign, r *campaignRound) {
			r.asked = "an update's event replaced by a 410"
			c.expire(r)
		},
		want: expired,
	},
	{
		name: "throttle-relist",
		// The pinned paths only: on the shared proxy the cleaner's LISTs of
		// a namespace cannot be told from the watch path's.
		on: func(tg campaignTarget) bool { return tg.path == metrics.PathAPIServer },
		inject: func(c *campaign, r *campaignRound) {
			n := 1 + r.rng.IntN(campaignMaxThrottled)
			r.asked = fmt.Sprintf("%d LISTs of the relist after a 410", n)
			r.target.proxy.Throttle(n, r.target.lists())
			c.expire(r)
			c.awaitRecords(r, faultproxy.Throttle, n)
		},
		// An expiry, its relist's LIST answered 429 and retried by
		// client-go: each 429 counted, no request failed.
		want: func(f campaignFacts) expect {
			want := expired(f)
			want["throttled_"+metrics.RequestList] = exactly(f.countRequests(faultproxy.Throttle, "list"))
			return want
		},
	},
	{
		name:  "foreign",
		scope: wholeProbe,
		inject: func(c *campaign, r *campaignRound) {
			n := 1 + r.rng.IntN(3)
			r.asked = fmt.Sprintf("%d markers patched by a second client", n)
			r.patches = c.foreignWrites(r, n)
		},
		// Every path sees each patch once, as a change that is not the
		// probe's own: counted as foreign, never timed, never a duplicate,
		// and the probe's own writes go on without a conflict.
		want: func(f campaignFacts) expect {
			return expect{"foreign": exactly(f.patches)}
		},
	},
}

// eventRule injects a fault set by a rule on events, on 1 to 3 events that
// match chooses on the target's streams, waits until the proxy has
// applied them all, and clears the rule.
func eventRule(f faultproxy.Fault, set func(*faultproxy.Proxy, int, faultproxy.Match), what string, match func(campaignTarget) faultproxy.Match) func(*campaign, *campaignRound) {
	return func(c *campaign, r *campaignRound) {
		n := 1 + r.rng.IntN(3)
		r.asked = fmt.Sprintf("%d %s", n, what)
		set(r.target.proxy, n, match(r.target))
		c.awaitRecords(r, f, n)
		r.target.proxy.Clear()
	}
}

// expired is what an in-stream 410 must show: one stream ended as
// expired, one relist for that reason. The writes whose events the relist
// replaced with final state are missed, then lost for the relist: never
// timed, never silent, and no more of them than the writes of the relist's
// window. An informer's relist delivers the marker alive at the time
// again.
func expired(f campaignFacts) expect {
	return expect{"restarts_expired": exactly(f.count(faultproxy.Expire)), "relists_expired": exactly(1),
		"missed_relist": anyCount, "missed_unavailable": anyCount, "missed": exactly(f.got("lost")),
		"lost_relist": atMost(f.window), "replayed": atMost(1)}
}

// campaignSnapshot is one scrape of the exporter's metrics, by path and by
// probe, and every counter by series for the invariants.
type campaignSnapshot struct {
	paths    map[campaignPath]map[string]float64
	probes   map[string]map[string]float64
	counters map[string]float64
}

// campaignFamilies maps each family the campaign reads to the key it is
// read under: with by, the value of that label completes the key, and the
// other labels are summed over.
var campaignFamilies = map[string]struct{ key, by string }{
	"watchprobe_events_missed_total":             {"missed_", "reason"},
	"watchprobe_events_lost_total":               {"lost_", "reason"},
	"watchprobe_events_late_total":               {"late", ""},
	"watchprobe_events_duplicate_total":          {"duplicate", ""},
	"watchprobe_events_replayed_total":           {"replayed", ""},
	"watchprobe_events_out_of_order_total":       {"out_of_order", ""},
	"watchprobe_events_after_failed_write_total": {"after_failed_write", ""},
	"watchprobe_events_observed_total":           {"observed", ""},
	"watchprobe_marker_foreign_changes_total":    {"foreign", ""},
	"watchprobe_watch_restarts_total":            {"restarts_", "reason"},
	"watchprobe_relists_total":                   {"relists_", "reason"},
	"watchprobe_requests_failed_total":           {"requests_failed", ""},
	"watchprobe_requests_throttled_total":        {"throttled_", "request"},
	"watchprobe_watch_stalled":                   {"stalled", ""},
	"watchprobe_path_up":                         {"up", ""},
	// Per probe: the writes acknowledged (the count of their round trips),
	// by verb, and those that failed.
	"watchprobe_write_duration_seconds": {"acked_", "verb"},
	"watchprobe_write_errors_total":     {"write_errors", ""},
	"watchprobe_probe_success":          {"success", ""},
}

func parseCampaignSnapshot(families map[string]*dto.MetricFamily) *campaignSnapshot {
	s := &campaignSnapshot{paths: map[campaignPath]map[string]float64{}, probes: map[string]map[string]float64{}, counters: map[string]float64{}}
	for name, fam := range families {
		if !strings.HasPrefix(name, "watchprobe_") {
			continue
		}
		read, known := campaignFamilies[name]
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			var id strings.Builder
			id.WriteString(name)
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
				fmt.Fprintf(&id, ",%s=%s", l.GetName(), l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			switch fam.GetType() {
			case dto.MetricType_COUNTER:
				s.counters[id.String()] = v
			case dto.MetricType_HISTOGRAM:
				v = float64(m.GetHistogram().GetSampleCount())
				s.counters[id.String()] = v
			}
			if !known {
				continue
			}
			key := read.key
			if read.by != "" {
				key += labels[read.by]
			}
			var into map[string]float64
			switch path := labels["path"]; path {
			case metrics.SourceWrite:
				// The writes' own (and their cleanup's) requests: the probe's.
				key = "write_" + key
				fallthrough
			case "":
				if into = s.probes[labels["probe"]]; into == nil {
					into = map[string]float64{}
					s.probes[labels["probe"]] = into
				}
			default:
				p := campaignPath{labels["probe"], path, labels["apiserver"]}
				if into = s.paths[p]; into == nil {
					into = map[string]float64{}
					s.paths[p] = into
				}
			}
			into[key] += v
		}
	}
	for _, p := range s.probes {
		p["acked"] = p["acked_"+metrics.VerbCreate] + p["acked_"+metrics.VerbUpdate] + p["acked_"+metrics.VerbDelete]
		for k, v := range p {
			if strings.HasPrefix(k, "write_throttled_") {
				p["write_throttled"] += v
			}
		}
	}
	for _, p := range s.paths {
		for _, k := range campaignKeys {
			if r, ok := strings.CutPrefix(k, "missed_"); ok {
				p["missed"] += p["missed_"+r]
			}
			if r, ok := strings.CutPrefix(k, "lost_"); ok {
				p["lost"] += p["lost_"+r]
			}
		}
	}
	return s
}

// campaign is the state of one campaign run.
type campaign struct {
	t       *testing.T
	e       *exporter
	client  kubernetes.Interface
	rng     *rand.Rand
	paths   []campaignPath
	targets []campaignTarget
	// prev is the latest scrape, against which the next is checked.
	prev *campaignSnapshot
	// faulted is the path the current round faults, which may go down or
	// stall meanwhile; checking says the invariants apply.
	faulted  campaignPath
	checking bool
	// reported holds each invariant broken, reported once.
	reported map[string]bool
	history  []string
	// lastInformerExpiry: the round and the instant the informer path was
	// last seen relisting after an expiry (informerBackoffReset).
	lastInformerExpiry      time.Time
	lastInformerExpiryRound int
	// totals: per fault kind, its rounds and what its records counted.
	totals map[string]*campaignTotal
}

type campaignTotal struct {
	rounds  int
	applied map[string]int
}

// scrape reads the exporter's metrics and checks the invariants against
// the previous scrape.
func (c *campaign) scrape() *campaignSnapshot {
	c.t.Helper()
	families, err := exportertest.Scrape(c.e.URL)
	if err != nil {
		select {
		case <-c.e.Done():
			c.t.Fatalf("the exporter exited: %v", err)
		default:
		}
		if !c.checking {
			return nil // starting
		}
		c.t.Fatalf("scraping the exporter: %v", err)
	}
	s := parseCampaignSnapshot(families)
	if c.checking {
		c.checkInvariants(c.prev, s)
	}
	c.prev = s
	return s
}

// checkInvariants checks what holds at every scrape.
func (c *campaign) checkInvariants(prev, cur *campaignSnapshot) {
	// Each invariant is reported the first time it breaks, by the path and
	// the counter (or the series) it is about: a broken one would
	// otherwise be reported at every scrape.
	fail := func(about fmt.Stringer, what, format string, args ...any) {
		if key := about.String() + " " + what; !c.reported[key] {
			c.reported[key] = true
			c.t.Errorf("%s (round %d)", fmt.Sprintf(format, args...), len(c.history))
		}
	}
	for id, v := range prev.counters {
		if now, ok := cur.counters[id]; !ok {
			fail(series(id), "vanished", "counter %s vanished", id)
		} else if now < v {
			fail(series(id), "decreased", "counter %s decreased from %g to %g", id, v, now)
		}
	}
	for _, p := range c.paths {
		s, ok := cur.paths[p]
		if !ok {
			fail(p, "series", "%s has no series", p)
			continue
		}
		// Every write counted late or lost was counted missed first, so
		// missed now is at least late and lost a scrape ago: the scrape
		// itself is not one instant, so its own late and lost may have
		// moved past its missed.
		if before := prev.paths[p]; s["missed"] < before["late"]+before["lost"] {
			fail(p, "missed", "%s: missed %g < late %g + lost %g of the scrape before", p, s["missed"], before["late"], before["lost"])
		}
		if p.path == metrics.PathEtcd {
			for _, k := range campaignKeys {
				if k != "relists_"+metrics.RelistInitial && k != "foreign" && s[k] != 0 {
					fail(p, k, "%s: %s = %g: the etcd path, under no proxy, must show no anomaly", p, k, s[k])
				}
			}
		}
		if p != c.faulted {
			if s["up"] != 1 {
				fail(p, "up", "%s, which no fault hits, is down", p)
			}
			if s["stalled"] != 0 {
				fail(p, "stalled", "%s, which no fault hits, is stalled", p)
			}
		}
	}
}

// series names a counter's series for fail.
type series string

func (s series) String() string { return string(s) }

// await scrapes until cond holds of a scrape, checking the invariants at
// each; it fails the test if cond does not hold within the bound.
func (c *campaign) await(within time.Duration, what string, cond func(*campaignSnapshot) bool) *campaignSnapshot {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if s := c.scrape(); s != nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("round %d: not within %s: %s", len(c.history), within, what)
		}
		// A scrape costs the exporter and the test: one every 50 ms
		// follows a cycle closely enough.
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitRecords waits until the target's proxy has recorded n faults of
// kind f in the round.
func (c *campaign) awaitRecords(r *campaignRound, f faultproxy.Fault, n int) {
	c.t.Helper()
	c.await(30*time.Second, fmt.Sprintf("%d %s applied to %s", n, f, r.target), func(*campaignSnapshot) bool {
		return r.facts(nil).count(f) >= float64(n)
	})
}

// settle waits until every write so far is settled on every path: two
// cycles after the fault was cleared, then two scrapes in a row with the
// same counters, in which every acknowledged write of each probe has
// arrived on each of its paths or been counted lost there, and every path
// is up and not stalled.
func (c *campaign) settle() *campaignSnapshot {
	c.t.Helper()
	from := c.scrape()
	c.await(30*time.Second, "two more cycles", func(s *campaignSnapshot) bool {
		for name, p := range s.probes {
			if p["acked_"+metrics.VerbCreate] < from.probes[name]["acked_"+metrics.VerbCreate]+2 {
				return false
			}
		}
		return true
	})
	var last *campaignSnapshot
	return c.await(90*time.Second, "every write settled on every path", func(s *campaignSnapshot) bool {
		same := last != nil && maps.Equal(last.counters, s.counters)
		last = s
		if !same {
			return false
		}
		for _, p := range c.paths {
			ps := s.paths[p]
			if ps["observed"]+ps["lost"] != s.probes[p.probe]["acked"] || ps["up"] != 1 || ps["stalled"] != 0 {
				return false
			}
		}
		return true
	})
}

// cut cuts the target's streams and returns how many it cut. A path is up
// between rounds, so it has one open.
func (c *campaign) cut(r *campaignRound) int {
	return r.target.proxy.CutStreams(r.target.watches())
}

// expire replaces one update's event on the target's stream with a 410 and
// waits for the path to relist and come back, and a cycle more: what the
// relist can have replaced was written by then.
func (c *campaign) expire(r *campaignRound) {
	informer := r.target.path == metrics.PathInformer
	if informer && !c.lastInformerExpiry.IsZero() {
		c.await(informerBackoffReset+time.Minute, "client-go's relist backoff reset", func(*campaignSnapshot) bool {
			return time.Since(c.lastInformerExpiry) > informerBackoffReset
		})
	}
	before := c.prev.paths[r.target.campaignPath]["relists_"+metrics.RelistExpired]
	r.target.proxy.Expire(1, r.target.updates())
	c.awaitRecords(r, faultproxy.Expire, 1)
	// The rules stay until the relist is done: a fault may be set on it.
	up := c.await(60*time.Second, r.target.String()+" relisted and up", func(s *campaignSnapshot) bool {
		p := s.paths[r.target.campaignPath]
		return p["relists_"+metrics.RelistExpired] > before && p["up"] == 1
	})
	r.target.proxy.Clear()
	if informer {
		c.lastInformerExpiry, c.lastInformerExpiryRound = time.Now(), r.n
	}
	// A write the relist replaced was committed before the path was up;
	// the next cycle starts once the one under way has been answered.
	creates := up.probes[r.target.probe]["acked_"+metrics.VerbCreate]
	next := c.await(30*time.Second, "a cycle after the relist", func(s *campaignSnapshot) bool {
		return s.probes[r.target.probe]["acked_"+metrics.VerbCreate] > creates
	})
	r.window = next.probes[r.target.probe]["acked"] - r.before.probes[r.target.probe]["acked"]
}

// foreignWrites has a second client, straight to the apiserver, patch an
// annotation of each of the target probe's markers right after it appears,
// until it has patched n, and returns how many it patched.
func (c *campaign) foreignWrites(r *campaignRound, n int) float64 {
	c.t.Helper()
	w, err := startForeignWriter(c.client, r.target.ns, r.target.probe, n)
	if err != nil {
		c.t.Fatal(err)
	}
	c.await(60*time.Second, fmt.Sprintf("%d markers patched", n), func(*campaignSnapshot) bool {
		select {
		case <-w.done:
			return true
		default:
			return false
		}
	})
	if w.err != nil {
		c.t.Fatalf("round %d: the foreign writer: %v", r.n, w.err)
	}
	r.foreign = w.patched
	return float64(len(w.patched))
}

// foreignWriter patches markers as a second client would: a person with
// kubectl annotate, or a controller that labels every ConfigMap.
type foreignWriter struct {
	done    chan struct{}
	patched []string // name@resourceVersion, each a patch the apiserver accepted
	err     error
}

func startForeignWriter(client kubernetes.Interface, ns, probeName string, n int) (*foreignWriter, error) {
	ctx := context.Background()
	cms := client.CoreV1().ConfigMaps(ns)
	sel := probe.LabelProbe + "=" + probeName
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	wi, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, err
	}
	w := &foreignWriter{done: make(chan struct{})}
	patch := []byte(`{"metadata":{"annotations":{"example.com/touched":"true"}}}`)
	go func() {
		defer close(w.done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			if ev.Type != watch.Added {
				continue
			}
			name := ev.Object.(*corev1.ConfigMap).Name
			out, err := cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			switch {
			case apierrors.IsNotFound(err):
				continue // deleted first: nothing changed
			case err != nil:
				// Whether it was applied is unknown, and so the count.
				w.err = fmt.Errorf("patching %s: %w", name, err)
				return
			}
			w.patched = append(w.patched, name+"@"+out.ResourceVersion)
			if len(w.patched) == n {
				return
			}
		}
		w.err = fmt.Errorf("the watch of %s's markers ended after %d patches", probeName, len(w.patched))
	}()
	return w, nil
}

// campaignRound is one fault of the campaign.
type campaignRound struct {
	n      int
	fault  *campaignFault
	target campaignTarget
	rng    *rand.Rand
	asked  string
	// mark is how many records the target's proxy held before the round.
	mark    int
	before  *campaignSnapshot
	patches float64
	foreign []string
	window  float64
}

// facts are the round's records and, given, the target's deltas.
func (r *campaignRound) facts(delta map[string]float64) campaignFacts {
	var own []faultproxy.Record
	for _, rec := range r.target.proxy.Records()[r.mark:] {
		if rec.Request.Namespace == r.target.ns {
			own = append(own, rec)
		}
	}
	return campaignFacts{records: own, patches: r.patches, window: r.window, delta: delta}
}

// hits reports whether the round's fault reaches path p.
func (r *campaignRound) hits(p campaignPath) bool {
	if r.fault.scope == wholeProbe {
		return p.probe == r.target.probe
	}
	return p == r.target.campaignPath
}

// describe says what the round did, from the records.
func (r *campaignRound) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %d: %s on %s (%s)", r.n, r.fault.name, r.target.campaignPath, r.asked)
	if r.fault.scope == wholeProbe {
		fmt.Fprintf(&b, ": patched %s", strings.Join(r.foreign, " "))
		return b.String()
	}
	applied := map[faultproxy.Fault][]string{}
	var order []faultproxy.Fault
	for _, rec := range r.facts(nil).records {
		what := rec.Request.Kind
		if rec.Event.Type != "" {
			what = rec.Event.Type + " " + rec.Event.Name + "@" + rec.Event.ResourceVersion
			if rec.Held > 0 {
				what += " held " + rec.Held.Round(time.Millisecond).String()
			}
		}
		if _, ok := applied[rec.Fault]; !ok {
			order = append(order, rec.Fault)
		}
		applied[rec.Fault] = append(applied[rec.Fault], what)
	}
	for _, f := range order {
		if f == faultproxy.Stall || f == faultproxy.Delay {
			// Dozens of events: how long, not which.
			facts := r.facts(nil)
			fmt.Fprintf(&b, "; %s ×%d: %g marker events held, %g of them past the deadline", f, len(applied[f]), facts.held(time.Nanosecond), facts.held(campaignDeadline))
			continue
		}
		fmt.Fprintf(&b, "; %s ×%d: %s", f, len(applied[f]), strings.Join(applied[f], ", "))
	}
	return b.String()
}

// check compares the round's deltas with what its fault must show, on
// every path, and says how the counters of the paths it hit moved.
func (c *campaign) check(r *campaignRound, after *campaignSnapshot) string {
	c.t.Helper()
	var moved []string
	for _, p := range c.paths {
		delta := map[string]float64{}
		for k, v := range after.paths[p] {
			delta[k] = v - r.before.paths[p][k]
		}
		var want expect
		if r.hits(p) {
			want = r.fault.want(r.facts(delta))
			var counts []string
			for _, k := range campaignKeys {
				if delta[k] != 0 {
					counts = append(counts, fmt.Sprintf("%s %g", k, delta[k]))
				}
			}
			moved = append(moved, fmt.Sprintf("%s: %s", p, strings.Join(counts, ", ")))
		}
		for _, k := range append(slices.Clone(campaignKeys), "missed", "lost") {
			s, named := want[k]
			if !named {
				if k == "missed" || k == "lost" {
					continue
				}
				s = exactly(0)
			}
			if !s.holds(delta[k]) {
				c.t.Errorf("round %d (%s on %s): %s %s moved by %g, want %s", r.n, r.fault.name, r.target.campaignPath, p, k, delta[k], s)
			}
		}
	}
	for name, p := range after.probes {
		if d := p["write_errors"] - r.before.probes[name]["write_errors"]; d != 0 {
			c.t.Errorf("round %d (%s on %s): probe %s: %g write errors, want 0: no fault reaches a write", r.n, r.fault.name, r.target.campaignPath, name, d)
		}
		if d := p["write_throttled"] - r.before.probes[name]["write_throttled"]; d != 0 {
			c.t.Errorf("round %d (%s on %s): probe %s: %g writes throttled, want 0", r.n, r.fault.name, r.target.campaignPath, name, d)
		}
		if p["success"] != 1 {
			c.t.Errorf("round %d (%s on %s): probe %s: probe_success %g once the fault passed, want 1", r.n, r.fault.name, r.target.campaignPath, name, p["success"])
		}
	}
	return strings.Join(moved, "; ")
}

// pick chooses round i's fault and target: each kind once, in an order
// drawn from the seed, then any.
func (c *campaign) pick(i int, order []int) (*campaignFault, campaignTarget) {
	f := &campaignFaults[c.rng.IntN(len(campaignFaults))]
	if i < len(order) {
		f = &campaignFaults[order[i]]
	}
	targets := c.targets
	if f.scope == wholeProbe {
		// One target per probe: the path it names is not the point.
		targets = []campaignTarget{c.targets[0], c.targets[2]}
	}
	if f.on != nil {
		targets = slices.DeleteFunc(slices.Clone(targets), func(t campaignTarget) bool { return !f.on(t) })
	}
	tg := targets[c.rng.IntN(len(targets))]
	if f.name == "expire" && tg.path == metrics.PathInformer && c.lastInformerExpiryRound > 0 && i-c.lastInformerExpiryRound < informerExpirySpacing {
		others := slices.DeleteFunc(slices.Clone(targets), func(t campaignTarget) bool { return t.path == metrics.PathInformer })
		tg = others[c.rng.IntN(len(others))]
	}
	return f, tg
}

// campaignSettings reads the seed and the number of rounds from the flags,
// else the environment, else a random seed and the small number.
func campaignSettings(t *testing.T) (seed uint64, rounds int) {
	seed, rounds = *campaignSeed, *campaignRounds
	var err error
	if s := os.Getenv("WATCHPROBE_CAMPAIGN_SEED"); seed == 0 && s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("WATCHPROBE_CAMPAIGN_SEED: %v", err)
		}
	}
	if s := os.Getenv("WATCHPROBE_CAMPAIGN_ROUNDS"); rounds == 0 && s != "" {
		if rounds, err = strconv.Atoi(s); err != nil {
			t.Fatalf("WATCHPROBE_CAMPAIGN_ROUNDS: %v", err)
		}
	}
	for seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	if rounds <= 0 {
		rounds = campaignSmallRounds
	}
	return seed, rounds
}

// TestCampaign runs the fault campaign (see the top of this file; `make
// campaign` runs it long). A failure reproduces with the seed it prints.
func TestCampaign(t *testing.T) {
	seed, rounds := campaignSettings(t)
	t.Logf("campaign seed %d, %d rounds; reproduce with -campaign.seed=%d or WATCHPROBE_CAMPAIGN_SEED=%d", seed, rounds, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	start := time.Now()

	// The control plane's data on tmpfs where there is one: a shared
	// machine's disk can hold etcd's fsync of a write past the deadline,
	// and the write is then late on every path, the etcd path too, for
	// no fault of the campaign's. Removed after the control plane stops.
	var dir string
	if shm, err := os.MkdirTemp("/dev/shm", "watchprobe-campaign-"); err == nil {
		dir = shm
		t.Cleanup(func() { os.RemoveAll(shm) })
	}
	cl := localcluster.StartForTest(t, localcluster.Options{Dir: dir})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the control plane's last log lines:\n%s", cl.LogTail(30))
		}
	})
	admin := cl.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	shared := cl.FaultProxyForTest(t)
	type campaignProbe struct {
		name, ns, path string
		pinned         *faultproxy.Proxy
	}
	probes := []campaignProbe{
		{"ci", "campaign-ci", metrics.PathInformer, cl.FaultProxyForTest(t)},
		{"cw", "campaign-cw", metrics.PathWatch, cl.FaultProxyForTest(t)},
	}
	c := &campaign{t: t, client: client, rng: rng, reported: map[string]bool{}, totals: map[string]*campaignTotal{}}
	var config strings.Builder
	config.WriteString("probes:\n")
	for _, p := range probes {
		localcluster.CreateNamespacesForTest(t, client, p.ns)
		pinned := strings.TrimPrefix(p.pinned.URL, "https://")
		// Two updates a cycle: a reorder swaps a marker's first update with
		// its second (firstUpdates). A watch timeout longer than the run
		// keeps every stream end one a fault caused.
		fmt.Fprintf(&config, `  - name: %s
    namespace: %s
    interval: %s
    updates: 2
    deadline: %s
    lost_after: %s
    stall_after: %s
    watch_timeout: 1h
    paths: [%s, etcd]
    etcd: {endpoints: [%q]}
    apiservers: {endpoints: [%q], server_name: localhost}
`, p.name, p.ns, campaignInterval, campaignDeadline, campaignLostAfter, campaignStallAfter, p.path, cl.EtcdURL, pinned)
		c.paths = append(c.paths, campaignPath{p.name, p.path, ""}, campaignPath{p.name, metrics.PathEtcd, ""}, campaignPath{p.name, metrics.PathAPIServer, pinned})
		c.targets = append(c.targets, campaignTarget{campaignPath{p.name, p.path, ""}, shared, p.ns}, campaignTarget{campaignPath{p.name, metrics.PathAPIServer, pinned}, p.pinned, p.ns})
	}
	file := filepath.Join(t.TempDir(), "probes.yml")
	writeFile(t, file, config.String())
	c.e = startExporter(t, "--kubeconfig", writeKubeconfig(t, shared.Config(admin)), "--config.file", file,
		"--probe.replica", "r1", "--no-metrics.classic-histograms", "--web.disable-exporter-metrics")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("campaign seed %d; the faults up to the failure:\n%s", seed, strings.Join(c.history, "\n"))
		}
	})

	c.await(90*time.Second, "every path up", func(s *campaignSnapshot) bool {
		for _, p := range c.paths {
			if s.paths[p]["up"] != 1 {
				return false
			}
		}
		return true
	})
	c.checking = true
	base := c.settle()
	// The start itself is clean: one initial relist at most, nothing else.
	for _, p := range c.paths {
		for _, k := range campaignKeys {
			if k != "relists_"+metrics.RelistInitial && base.paths[p][k] != 0 {
				t.Errorf("%s after the start, before any fault: %s = %g", p, k, base.paths[p][k])
			}
		}
	}
	t.Logf("paths up and settled after %s", time.Since(start).Round(time.Millisecond))

	order := rng.Perm(len(campaignFaults))
	for i := range rounds {
		f, tg := c.pick(i, order)
		r := &campaignRound{n: i + 1, fault: f, target: tg, rng: rng, mark: len(tg.proxy.Records()), before: base}
		if f.scope == onePath {
			c.faulted = tg.campaignPath
		}
		c.history = append(c.history, fmt.Sprintf("round %d: %s on %s (injecting)", r.n, f.name, tg.campaignPath))
		began := time.Now()
		f.inject(c, r)
		c.history[len(c.history)-1] = r.describe()
		after := c.settle()
		c.faulted = campaignPath{}
		moved := c.check(r, after)
		t.Logf("%s [%s] → %s", r.describe(), time.Since(began).Round(100*time.Millisecond), moved)
		c.total(r)
		base = after
	}

	c.e.Stop()
	for _, p := range probes {
		if left := allMarkers(t, client, p.ns); len(left) != 0 {
			t.Errorf("markers left in %s after the exporter stopped: %v", p.ns, left)
		}
	}
	t.Logf("campaign seed %d: %d rounds in %s: %s", seed, rounds, time.Since(start).Round(time.Second), c.summary())
}

// total adds the round to the totals per fault kind.
func (c *campaign) total(r *campaignRound) {
	tot := c.totals[r.fault.name]
	if tot == nil {
		tot = &campaignTotal{applied: map[string]int{}}
		c.totals[r.fault.name] = tot
	}
	tot.rounds++
	if r.fault.scope == wholeProbe {
		tot.applied["patches"] += len(r.foreign)
		return
	}
	for _, rec := range r.facts(nil).records {
		if rec.Event.Type == "" || isMarkerEvent(rec.Event) || rec.Event.Type == "ERROR" {
			tot.applied[rec.Fault.String()]++
		}
	}
}

func (c *campaign) summary() string {
	var parts []string
	for _, f := range campaignFaults {
		tot := c.totals[f.name]
		if tot == nil {
			continue
		}
		var applied []string
		for k, v := range tot.applied {
			applied = append(applied, fmt.Sprintf("%s %d", k, v))
		}
		slices.Sort(applied)
		parts = append(parts, fmt.Sprintf("%s ×%d (%s)", f.name, tot.rounds, strings.Join(applied, ", ")))
	}
	return strings.Join(parts, "; ")
}
