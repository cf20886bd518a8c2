package probe

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// These tests run the probe against a real kube-apiserver and etcd, shared
// by the package; each test uses its own namespace.

var (
	clusterOnce sync.Once
	cluster     *localcluster.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the local control plane:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func adminClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	clusterOnce.Do(func() { cluster, clusterErr = localcluster.Start(context.Background(), localcluster.Options{}) })
	if clusterErr != nil {
		t.Fatalf("starting the local control plane: %v", clusterErr)
	}
	return kubernetes.NewForConfigOrDie(cluster.AdminConfig())
}

// inNamespace is adminClient, with the namespace ns made for the test and
// deleted after it.
func inNamespace(t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	client := adminClient(t)
	localcluster.CreateNamespacesForTest(t, client, ns)
	return client
}

// markerClient is the exporter's own client, as the cluster's admin.
func markerClient(t *testing.T) *kube.Client {
	t.Helper()
	adminClient(t)
	c, err := kube.NewClient(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testProbe is a probe running in the background with its own registry.
type testProbe struct {
	*Probe
	// registry is the probe's own registry, or what it exposed at one
	// instant (at).
	registry prometheus.Gatherer
	cancel   context.CancelFunc
	done     chan struct{}
	misses   *missLedger
}

// missLedger keeps, per path and write, how often the write was missed,
// late and lost there: the outcomes themselves, beside the counters they
// make.
type missLedger struct {
	mu     sync.Mutex
	byPath map[judge.PathInfo]map[judge.WriteKey]*missFate
}

type missFate struct{ missed, late, lost int }

func (l *missLedger) Outcome(o judge.Outcome) {
	late := o.Kind == judge.Arrived && o.Late
	if o.Path == nil || (o.Kind != judge.Missed && o.Kind != judge.Lost && !late) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byPath[*o.Path] == nil {
		l.byPath[*o.Path] = map[judge.WriteKey]*missFate{}
	}
	key := judge.WriteKey{Name: o.Marker, Seq: o.Seq}
	f := l.byPath[*o.Path][key]
	if f == nil {
		f = &missFate{}
		l.byPath[*o.Path][key] = f
	}
	switch {
	case o.Kind == judge.Missed:
		f.missed++
	case o.Kind == judge.Lost:
		f.lost++
	default:
		f.late++
	}
}

// heard is what the ledger heard on path: the writes missed there and
// neither late nor lost yet, and the misses, late arrivals and losses of
// every write summed.
func (l *missLedger) heard(path judge.PathInfo) (pending int, sum missFate) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.byPath[path] {
		if f.missed > 0 && f.late+f.lost == 0 {
			pending++
		}
		sum.missed += f.missed
		sum.late += f.late
		sum.lost += f.lost
	}
	return pending, sum
}

// wrong describes every write on path that was not missed once and then
// late or lost once.
func (l *missLedger) wrong(path judge.PathInfo) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for k, f := range l.byPath[path] {
		if f.missed != 1 || f.late+f.lost != 1 {
			out = append(out, fmt.Sprintf("%s/%d missed %d, late %d, lost %d", k.Name, k.Seq, f.missed, f.late, f.lost))
		}
	}
	slices.Sort(out)
	return out
}

// startProbe starts a probe; pathConfigs, if given, send the paths it
// names through their own configurations (a fault proxy in front of the
// apiserver) while the writes and the other paths go straight to it.
func startProbe(t *testing.T, config *rest.Config, cfg config.Config, replica string, orphanAge time.Duration, pathConfigs ...map[string]*rest.Config) *testProbe {
	t.Helper()
	opts := Options{Config: config, Replica: replica, OrphanAge: orphanAge}
	var configs map[string]*rest.Config
	if len(pathConfigs) > 0 {
		configs = pathConfigs[0]
	}
	return startProbeWith(t, cfg, opts, routed(t, configs))
}

// routed sends the paths configs names through their own configurations,
// between New and Run (startProbeWith's before).
func routed(t *testing.T, configs map[string]*rest.Config) func(*Probe) {
	return func(p *Probe) {
		for name, config := range configs {
			p.routePath(t, name, config)
		}
	}
}

// startProbeWith starts a probe with opts, given its own registry and,
// unless opts has a logger, the test's; before reaches it between New and
// Run.
func startProbeWith(t *testing.T, cfg config.Config, opts Options, before ...func(*Probe)) *testProbe {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	opts.Metrics = m
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	misses := &missLedger{byPath: map[judge.PathInfo]map[judge.WriteKey]*missFate{}}
	opts.Sinks = append(slices.Clip(opts.Sinks), misses)
	p, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tp := &testProbe{Probe: p, registry: reg, cancel: cancel, done: make(chan struct{}), misses: misses}
	go func() { p.Run(ctx); close(tp.done) }()
	t.Cleanup(tp.stop)
	return tp
}

// testLogger shows the probe's log with -v, and its last lines when the
// test fails. It never writes through t.Log while the test runs, which
// panics when a goroutine logs after its test has ended.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil)).With("test", t.Name())
	}
	tail := &logTail{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the probe's last log lines:\n%s", tail.String())
		}
	})
	return slog.New(slog.NewTextHandler(tail, nil))
}

// logTail keeps the last lines written to it.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

const logTailLines = 150

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	if len(l.lines) > 2*logTailLines {
		l.lines = append(l.lines[:0], l.lines[len(l.lines)-logTailLines:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[max(0, len(l.lines)-logTailLines):], "\n")
}

// ready reports whether the probe is ready, for Eventually.
func (tp *testProbe) ready() bool { return tp.Synced() == nil }

// stop ends the probe and waits for its shutdown cleanup.
func (tp *testProbe) stop() {
	tp.cancel()
	<-tp.done
}

func fastConfig(name, namespace string) config.Config {
	cfg := config.DefaultConfig()
	cfg.Name = name
	cfg.Namespace = namespace
	cfg.Interval = model.Duration(300 * time.Millisecond)
	cfg.Updates = 2
	cfg.Deadline = model.Duration(5 * time.Second)
	return cfg
}

// sample is the series of family f with label values (every label, in
// the family's order) as the probe's registry exposes it, nil if none.
func (tp *testProbe) sample(f *metrics.Family, values ...string) *dto.Metric {
	return probetest.Sample(tp.registry, f, values...)
}

// at is tp as its registry exposed it at one instant, for counts compared
// with each other: the probe goes on writing between two reads of the
// live registry, and a write acknowledged between them would set the two
// counts apart.
func (tp *testProbe) at() *testProbe {
	mfs, err := tp.registry.Gather()
	if err != nil {
		panic(err)
	}
	snap := *tp
	snap.registry = exposition(mfs)
	return &snap
}

// exposition is a registry's exposition at one instant.
type exposition []*dto.MetricFamily

func (e exposition) Gather() ([]*dto.MetricFamily, error) { return e, nil }

// value is the counter's or gauge's value of f's series of values, 0 when
// it does not exist.
func (tp *testProbe) value(f *metrics.Family, values ...string) float64 {
	m := tp.sample(f, values...)
	return m.GetCounter().GetValue() + m.GetGauge().GetValue()
}

// histogramOf is f's histogram of values, empty when it does not exist.
func (tp *testProbe) histogramOf(f *metrics.Family, values ...string) *dto.Histogram {
	return tp.sample(f, values...).GetHistogram()
}

// sum adds up every series of counter family f.
func (tp *testProbe) sum(f *metrics.Family) float64 {
	var n float64
	for _, m := range tp.all(f) {
		n += m.GetCounter().GetValue()
	}
	return n
}

// count is the number of series of f.
func (tp *testProbe) count(f *metrics.Family) int { return len(tp.all(f)) }

func (tp *testProbe) all(f *metrics.Family) []*dto.Metric { return probetest.Gathered(tp.registry, f) }

// success is the probe's probe_success.
func (tp *testProbe) success() float64 { return tp.value(metrics.ProbeSuccess, tp.cfg.Name) }

// exposedPath reads the series of one path of a probe as its registry
// exposes them, by the labels that name the path: the probe, the path and
// the apiserver (empty but on a path pinned to one). Reading makes no
// series, where the series' own accessors would make a lazy one.
type exposedPath struct {
	tp                     *testProbe
	probe, path, apiserver string
}

// path is the probe's configured path name; metrics.SourceWrite names its
// writes' requests.
func (tp *testProbe) path(name string) exposedPath {
	if name != metrics.SourceWrite && !slices.Contains(tp.cfg.Paths, name) {
		// Its counts would all read 0, as a path that counted nothing.
		panic(fmt.Sprintf("probe %s has no path %s", tp.cfg.Name, name))
	}
	return exposedPath{tp, tp.cfg.Name, name, ""}
}

// pinnedPath is the probe's path pinned to the apiserver at addr.
func (tp *testProbe) pinnedPath(addr string) exposedPath {
	return exposedPath{tp, tp.cfg.Name, metrics.PathAPIServer, addr}
}

// at is the path as the registry exposed it at one instant (testProbe.at).
func (p exposedPath) at() exposedPath {
	p.tp = p.tp.at()
	return p
}

// info is the path as its outcomes name it.
func (p exposedPath) info() judge.PathInfo {
	return judge.PathInfo{Name: p.path, APIServer: p.apiserver}
}

func (p exposedPath) labels(values []string) []string {
	return append([]string{p.probe, p.path, p.apiserver}, values...)
}

// value is the path's counter or gauge f of values, 0 while it has none.
func (p exposedPath) value(f *metrics.Family, values ...string) float64 {
	return p.tp.value(f, p.labels(values)...)
}

// histogram is the path's histogram f of values, empty while it has none.
func (p exposedPath) histogram(f *metrics.Family, values ...string) *dto.Histogram {
	return p.tp.histogramOf(f, p.labels(values)...)
}

// exposed reports whether the registry has the path's series: a pinned
// path has none until it is added.
func (p exposedPath) exposed() bool { return p.tp.sample(metrics.PathUp, p.labels(nil)...) != nil }

// missed sums the path's misses over their reasons.
func (p exposedPath) missed() float64 { return p.overReasons(metrics.EventsMissed) }

// lost sums the path's losses over their reasons.
func (p exposedPath) lost() float64 { return p.overReasons(metrics.EventsLost) }

func (p exposedPath) overReasons(f *metrics.Family) float64 {
	var n float64
	for _, reason := range metrics.MissedReasons {
		n += p.value(f, reason)
	}
	return n
}

// relists sums the path's relists for reason over both modes.
func (p exposedPath) relists(reason string) float64 {
	return p.value(metrics.Relists, reason, metrics.ModeList) + p.value(metrics.Relists, reason, metrics.ModeWatchList)
}

// ends are the path's stream ends by reason, every reason.
func (p exposedPath) ends() map[string]float64 {
	ends := map[string]float64{}
	for _, reason := range metrics.EndReasons {
		ends[reason] = p.value(metrics.WatchRestarts, reason)
	}
	return ends
}

// settled waits for a moment between cycles at which every write so far is
// settled. The next cycle may begin at once: counts to compare with each
// other are read after drained.
func (tp *testProbe) settled(t *testing.T, minCreates int) {
	t.Helper()
	localcluster.Eventually(t, 60*time.Second, fmt.Sprintf("%d settled cycles", minCreates), func() bool {
		return tp.tracker.Pending() == 0 && tp.acked(t, metrics.VerbCreate) >= uint64(minCreates)
	})
}

// drained stops the probe's writes and waits until every write it sent
// is seen or missed on every path: its counts are then final, and an
// event that beat its write's response cannot be counted before the
// response is.
func (tp *testProbe) drained(t *testing.T) {
	t.Helper()
	tp.StopWriting()
	localcluster.Eventually(t, 60*time.Second, "every write sent seen or missed", tp.Drained)
}

// resolved waits until every write missed on a path so far has arrived
// late or been counted lost there, and checks, write by write, that each
// missed one is one or the other, once, and that the counters agree.
func (tp *testProbe) resolved(t *testing.T) {
	t.Helper()
	for _, path := range tp.cfg.Paths {
		tp.resolvedOn(t, tp.path(path))
	}
}

// resolvedOn is resolved for one path, configured or pinned.
func (tp *testProbe) resolvedOn(t *testing.T, ps exposedPath) {
	t.Helper()
	path := ps.info()
	var (
		pending int
		heard   missFate
		seen    exposedPath
	)
	// The ledger is read first and the exposition second. The metrics sink
	// hears each outcome before the ledger does, so the exposition holds at
	// least what the ledger heard, and both hold the same once no outcome
	// is on its way to the sinks; the probe may still be missing writes.
	counted := func() bool {
		return seen.missed() == float64(heard.missed) && seen.value(metrics.EventsLate) == float64(heard.late) && seen.lost() == float64(heard.lost)
	}
	localcluster.EventuallyShows(t, 2*time.Minute, path.Name+": every miss late or lost, and counted as the outcomes said", func() bool {
		pending, heard = tp.misses.heard(path)
		seen = ps.at()
		return pending == 0 && counted()
	}, func() string {
		return fmt.Sprintf("%d misses unresolved; outcomes missed %d, late %d, lost %d; counted missed %g, late %g, lost %g",
			pending, heard.missed, heard.late, heard.lost, seen.missed(), seen.value(metrics.EventsLate), seen.lost())
	})
	for _, w := range tp.misses.wrong(path) {
		t.Errorf("%s: %s, want missed once, then late or lost once", path.Name, w)
	}
	if m, l, lo := seen.missed(), seen.value(metrics.EventsLate), seen.lost(); m != l+lo {
		t.Errorf("%s: missed %g != late %g + lost %g", path.Name, m, l, lo)
	}
}

// acked is the number of writes of verb that the apiserver acknowledged.
func (tp *testProbe) acked(t *testing.T, verb string) uint64 {
	t.Helper()
	return tp.histogramOf(metrics.WriteDuration, tp.cfg.Name, verb).GetSampleCount()
}

var verbOf = map[string]string{
	metrics.EventAdded: metrics.VerbCreate, metrics.EventModified: metrics.VerbUpdate, metrics.EventDeleted: metrics.VerbDelete,
}

// Every acknowledged write is observed exactly once on each path, as the
// event it should cause, with a positive latency, and nothing is missed.
func TestEveryWriteObservedOnEveryPath(t *testing.T) {
	for _, kind := range []string{config.KindConfigMap, config.KindLease} {
		t.Run(kind, func(t *testing.T) {
			ns := "observed-" + strings.ToLower(kind)
			client := inNamespace(t, ns)
			cfg := fastConfig("observed", ns)
			cfg.Kind = kind
			tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour)
			tp.settled(t, 3)

			// The informer fills its cache the way client-go's
			// WatchListClient gate says (WatchList by default, a LIST with
			// KUBE_FEATURE_WatchListClient=false; `make compat` runs both)
			// where the apiserver serves WatchList, and by LIST where it
			// refuses it (1.31 and 1.33 by default): counted as the LIST
			// it is, never as a WatchList relist.
			mode := metrics.ModeList
			if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) && servesWatchList(t, cluster) {
				mode = metrics.ModeWatchList
			}
			expectRelistModes(t, tp, metrics.PathInformer, metrics.RelistInitial, map[string]float64{mode: 1})
			for _, path := range config.DefaultPaths {
				compatP50(t, path, mode, p50(tp.path(path)))
			}

			tp.drained(t)
			snap := tp.at()
			for _, path := range config.DefaultPaths {
				ps := snap.path(path)
				for event, verb := range verbOf {
					acked := snap.acked(t, verb)
					observed := ps.value(metrics.EventsObserved, event)
					h := ps.histogram(metrics.EventLatency, event)
					if observed != float64(acked) || h.GetSampleCount() != acked {
						t.Errorf("%s %s: observed %g, latency samples %d, acknowledged writes %d", path, event, observed, h.GetSampleCount(), acked)
					}
					// Native buckets keep every sign: a zero or negative
					// latency would land in the zero or negative buckets.
					if h.GetZeroCount() != 0 || len(h.GetNegativeSpan()) != 0 || h.GetSampleSum() <= 0 {
						t.Errorf("%s %s: non-positive latencies: zero %d, negative spans %d, sum %g", path, event, h.GetZeroCount(), len(h.GetNegativeSpan()), h.GetSampleSum())
					}
				}
				if got := ps.missed(); got != 0 {
					t.Errorf("%s missed %g events on a healthy cluster", path, got)
				}
				if got := ps.value(metrics.LastEventTimestamp); time.Since(time.Unix(int64(got), 0)) > time.Minute {
					t.Errorf("%s last event timestamp %g is not recent", path, got)
				}
			}
			if got := tp.success(); got != 1 {
				t.Errorf("probe_success = %g, want 1", got)
			}
			if n := tp.sum(metrics.WriteErrors); n != 0 {
				t.Errorf("%g write errors on a healthy cluster", n)
			}
			problems, err := testutil.GatherAndLint(tp.registry)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems {
				t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
			}

			tp.stopLeavingNoMarkers(t, client)
		})
	}
}

// Writes made while one path is stopped are missed on that path, each
// exactly once, and on no other; the probe reports failure.
func TestWriteWhilePathStoppedIsMissed(t *testing.T) {
	inNamespace(t, "stopped-path")
	cfg := fastConfig("stopped", "stopped-path")
	// Cycles spaced wider than the deadline leave moments when every write,
	// missed or not, is settled.
	cfg.Deadline = model.Duration(500 * time.Millisecond)
	cfg.Interval = model.Duration(1500 * time.Millisecond)
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour)
	tp.settled(t, 1)
	tp.stopPath(config.DefaultPaths[0])
	before := tp.acked(t, metrics.VerbCreate)
	tp.settled(t, int(before)+3)

	tp.drained(t)
	snap := tp.at()
	var acked float64
	for _, verb := range verbOf {
		acked += float64(snap.acked(t, verb))
	}
	for _, path := range config.DefaultPaths {
		ps := snap.path(path)
		var observed float64
		for event := range verbOf {
			observed += ps.value(metrics.EventsObserved, event)
		}
		missed := ps.missed()
		if observed+missed != acked {
			t.Errorf("%s: observed %g + missed %g != acknowledged %g", path, observed, missed, acked)
		}
		switch path {
		case config.DefaultPaths[0]:
			if min := float64(3 * (cfg.Updates + 2)); missed < min {
				t.Errorf("%s (stopped) missed %g, want at least %g", path, missed, min)
			}
		default:
			if missed != 0 {
				t.Errorf("%s (running) missed %g, want 0", path, missed)
			}
		}
	}
	if got := tp.success(); got != 0 {
		t.Errorf("probe_success = %g with a stopped path, want 0", got)
	}
}

// At start-up a probe deletes its own replica's leftovers and other
// replicas' markers older than the orphan age, and nothing else.
func TestStartupCleanup(t *testing.T) {
	ns := "cleanup"
	client := inNamespace(t, ns)
	api := configMapMarkers(t, ns)
	leaveMarker(t, api, "own-leftover", "cleanup", "r1")
	leaveMarker(t, api, "old-orphan", "cleanup", "gone")
	leaveMarker(t, api, "other-probe", "another", "gone")
	time.Sleep(2 * time.Second) // the orphan must be older than the orphan age below
	leaveMarker(t, api, "young-peer", "cleanup", "r2")

	cfg := fastConfig("cleanup", ns)
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", 1500*time.Millisecond)
	localcluster.Eventually(t, 30*time.Second, "probe synced", tp.ready)

	exists := func(name string) bool {
		_, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	// The start-up sweep runs beside the paths: its deletes are waited for.
	localcluster.Eventually(t, 30*time.Second, "the start-up sweep", func() bool { return !exists("own-leftover") && !exists("old-orphan") })
	for _, name := range []string{"other-probe", "young-peer"} {
		if !exists(name) {
			t.Errorf("%s was deleted: it is another probe's, or a live replica's", name)
		}
	}
	if n := tp.sum(metrics.WriteErrors); n != 0 {
		t.Errorf("%g write errors: the start-up sweep deleted a marker of this run", n)
	}
}

// stopLeavingNoMarkers stops the probe and checks, through client, that
// it left none of its markers in its namespace.
func (tp *testProbe) stopLeavingNoMarkers(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	tp.stop()
	assertNoMarkers(t, client, tp.cfg.Namespace, tp.cfg.Name, "")
}

func assertNoMarkers(t *testing.T, client kubernetes.Interface, ns, probe, replica string) {
	t.Helper()
	for _, list := range []func() (int, error){
		func() (int, error) {
			l, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: markerSelector(probe, replica)})
			return len(l.Items), err
		},
		func() (int, error) {
			l, err := client.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{LabelSelector: markerSelector(probe, replica)})
			return len(l.Items), err
		},
	} {
		n, err := list()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d markers left in %s", n, ns)
		}
	}
}

// routePath rebuilds the probe's path name to list and watch through
// config, before the probe runs.
func (p *Probe) routePath(t *testing.T, name string, config *rest.Config) {
	t.Helper()
	for i, n := range p.cfg.Paths {
		if n != name {
			continue
		}
		api, err := kube.InstrumentedAPI(config, p.cfg.Kind, p.cfg.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		path, err := pathsOf(p.cfg, p.opts.Replica, p.run, p.tracker, p.logger)(name, i, api, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		p.paths[i].Close()
		p.paths[i] = path
		return
	}
	t.Fatalf("probe %s has no path %s", p.cfg.Name, name)
}

// stopPath stops one path while the probe goes on writing, to prove that
// what a path does not deliver is counted as missed.
func (p *Probe) stopPath(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, n := range p.cfg.Paths {
		if n == name && i < len(p.pathCancels) {
			p.pathCancels[i]()
		}
	}
}

// expectRelistModes fails unless path's relists for reason came by exactly
// the modes in want.
func expectRelistModes(t *testing.T, tp *testProbe, path, reason string, want map[string]float64) {
	t.Helper()
	for _, mode := range []string{metrics.ModeList, metrics.ModeWatchList} {
		if got := tp.path(path).value(metrics.Relists, reason, mode); got != want[mode] {
			t.Errorf("%s: relists (%s) by %s = %g, want %g", path, reason, mode, got, want[mode])
		}
	}
}

// compatP50 logs a path's median latency in the form hack/compat reads into
// docs/compatibility.md's table; mode tells how the informer listed.
func compatP50(t *testing.T, path, mode string, p50 time.Duration) {
	t.Helper()
	t.Logf("compat-p50 path=%s mode=%s p50=%s", path, mode, p50.Round(10*time.Microsecond))
}

// exactLatencies is a Sink that records, unbucketed, each write's latency
// on each path where it arrived, late too, and its apiserver lag on each
// apiserver path where the etcd path runs: the histograms' buckets are 10%
// wide. Read it once the probe has stopped: a write's arrival and its lag
// are separate outcomes.
type exactLatencies struct {
	mu      sync.Mutex
	arrived map[string]map[judge.WriteKey]time.Duration
	lag     map[string]map[judge.WriteKey]time.Duration
}

func newExactLatencies() *exactLatencies {
	return &exactLatencies{arrived: map[string]map[judge.WriteKey]time.Duration{}, lag: map[string]map[judge.WriteKey]time.Duration{}}
}

func (r *exactLatencies) Outcome(o judge.Outcome) {
	var into map[string]map[judge.WriteKey]time.Duration
	switch o.Kind {
	case judge.Arrived:
		into = r.arrived
	case judge.APIServerLag:
		into = r.lag
	default:
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if into[o.Path.Name] == nil {
		into[o.Path.Name] = map[judge.WriteKey]time.Duration{}
	}
	into[o.Path.Name][judge.WriteKey{Name: o.Marker, Seq: o.Seq}] = o.Latency
}

// latencies is a copy of each write's latency on path.
func (r *exactLatencies) latencies(path string) map[judge.WriteKey]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.arrived[path])
}

// lags is a copy of each write's apiserver lag on path.
func (r *exactLatencies) lags(path string) map[judge.WriteKey]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.lag[path])
}

// p50 is the exact median of path's latencies.
func (r *exactLatencies) p50(path string) time.Duration {
	return median(slices.Collect(maps.Values(r.latencies(path))))
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// Two runs started within the same second, by a reload, tell their markers
// apart.
func TestRunIDsUnique(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newRunID()
		if seen[id] {
			t.Fatalf("run ID %s handed out twice", id)
		}
		seen[id] = true
	}
}
