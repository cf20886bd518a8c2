package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/promslog"
	"golang.org/x/term"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// Exit statuses of `watchprobe check`.
const (
	checkOK     = 0 // the objective holds
	checkFailed = 1 // it does not
	checkError  = 2 // the check could not run: bad flags or config, no cluster, or interrupted
)

type checkFlags struct {
	cycles      int
	cyclesSet   bool
	duration    time.Duration
	durationSet bool
	latency     time.Duration
	target      float64
	allowed     int
	output      string
}

func addCheckFlags(cmd *kingpin.CmdClause) *checkFlags {
	kf := &checkFlags{}
	cmd.Flag("cycles", "Stop once every probe has had this many cycles judged (the default, unless --duration is given).").Default("10").IsSetByUser(&kf.cyclesSet).IntVar(&kf.cycles)
	cmd.Flag("duration", "Stop after this long instead: no cycle starts after it, and the cycles under way finish and are judged.").IsSetByUser(&kf.durationSet).DurationVar(&kf.duration)
	cmd.Flag("objective.latency", "An event that arrives within this latency of its write meets the objective.").Default("1s").DurationVar(&kf.latency)
	cmd.Flag("objective.target", "Share of the events expected on each path that must arrive within --objective.latency, above 0 and at most 1.").Default("0.99").Float64Var(&kf.target)
	cmd.Flag("objective.allowed-anomalies", "Anomalies allowed on each path (missed, duplicated and out-of-order events), and write errors allowed per probe.").Default("0").IntVar(&kf.allowed)
	cmd.Flag("output", "Report format: text, or json (schema: docs/check-report.schema.json).").Default("text").EnumVar(&kf.output, "text", "json")
	return kf
}

func (kf *checkFlags) validate() error {
	var errs []error
	if kf.cyclesSet && kf.durationSet {
		errs = append(errs, errors.New("--cycles and --duration cannot be combined; give one"))
	}
	if kf.cycles < 1 {
		errs = append(errs, fmt.Errorf("--cycles: %d is too few; use at least 1", kf.cycles))
	}
	if kf.durationSet && kf.duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration: must be positive, got %s", kf.duration))
	}
	if kf.latency <= 0 {
		errs = append(errs, fmt.Errorf("--objective.latency: must be positive, got %s", kf.latency))
	}
	if !(kf.target > 0 && kf.target <= 1) {
		errs = append(errs, fmt.Errorf("--objective.target: %g is not a share; use a number above 0 and at most 1, e.g. 0.99", kf.target))
	}
	if kf.allowed < 0 {
		errs = append(errs, fmt.Errorf("--objective.allowed-anomalies: %d is negative; use 0 or more", kf.allowed))
	}
	return errors.Join(errs...)
}

// validateFor checks the flags against the probes: an event later than
// its probe's deadline is missed, so an objective latency above a
// deadline would count an event both missed and within the objective.
func (kf *checkFlags) validateFor(cfgs []probe.Config) error {
	var errs []error
	for _, cfg := range cfgs {
		if d := time.Duration(cfg.Deadline); kf.latency > d {
			errs = append(errs, fmt.Errorf("--objective.latency: %s is longer than probe %q's deadline (%s), after which an event counts as missed; use at most %s, or raise the deadline", kf.latency, cfg.Name, d, d))
		}
	}
	return errors.Join(errs...)
}

// runCheck runs the configured probes against the cluster for a number of
// cycles or a duration, then reports. It stops its probes, which delete
// their markers, before it returns, on an interrupt too.
func runCheck(cf *commonFlags, kf *checkFlags, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "watchprobe check: %s\n", line)
		}
		return checkError
	}
	if err := kf.validate(); err != nil {
		return fail(err)
	}
	cfgs, err := probeConfigs(cf.configFile, cf.probes)
	if err != nil {
		return fail(err)
	}
	if err := kf.validateFor(cfgs); err != nil {
		return fail(err)
	}
	replica := cf.replica
	if !cf.replicaSet {
		// Its own identity: the check must never take, or sweep away, the
		// markers of an exporter that runs as this host or pod.
		replica = "check-" + randomHex(3)
	}
	restConfig, err := loadRESTConfig(cf.kubeconfig)
	if err != nil {
		return fail(fmt.Errorf("no Kubernetes configuration: %w", err))
	}

	prog := newProgress(stderr, isTerminal(stderr))
	cf.log.Writer = prog
	logger := promslog.New(cf.log)
	klog.SetSlogLogger(logger)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := preflight(ctx, restConfig, cfgs, replica, logger); err != nil {
		return fail(err)
	}

	reg := prometheus.NewRegistry()
	pm := metrics.NewProbe(reg)
	board := newBoard(pm.Anomalies(), pm.Faults, 1, checkFlushEvery, logger)
	lat := &latencies{keys: map[prometheus.Observer]pathKey{}, by: map[pathKey][]time.Duration{}}
	var probes []*probe.Probe
	for _, cfg := range cfgs {
		p, err := probe.New(cfg, probe.Options{
			Config: restConfig, Metrics: pm, Logger: logger, Replica: replica, OrphanAge: cf.orphanAge,
			Recorder: checkRecorder{board.track(cfg.Name), lat},
			// The report reads every count at the end.
			KeepRetiredSeries: true,
		})
		if err != nil {
			return fail(err)
		}
		probes = append(probes, p)
	}

	started := time.Now()
	prog.start(started, kf, cfgs, board)
	board.onCycle = prog.cycle
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Go(func() { p.Run(runCtx) })
	}
	boardCtx, stopBoard := context.WithCancel(context.Background())
	boardDone := make(chan struct{})
	go func() {
		defer close(boardDone)
		board.run(boardCtx)
	}()

	// With --cycles, stop writing once every probe has settled every cycle
	// up to that many (a cycle with a miss settles only at its deadline,
	// after newer ones); with --duration, once it has passed. Then drain:
	// the cycles under way finish, and the check waits until each of their
	// writes has been seen or missed on every path. Cancelling them instead
	// would keep their fast arrivals and lose their slow ones.
	var until <-chan time.Time
	var target map[string]uint64
	if kf.durationSet {
		until = time.After(kf.duration)
	} else {
		target = map[string]uint64{}
		for _, cfg := range cfgs {
			target[cfg.Name] = uint64(kf.cycles)
		}
	}
	var longest time.Duration
	for _, cfg := range cfgs {
		longest = max(longest, time.Duration(cfg.Deadline))
	}
	draining := false
	var drainTimeout <-chan time.Time
	drain := func() {
		draining = true
		for _, p := range probes {
			p.StopWriting()
		}
		// A write that hangs is given up after the probe's write timeout.
		drainTimeout = time.After(longest + writeTimeout + 5*time.Second)
	}
	tick := time.NewTicker(200 * time.Millisecond)
	interrupted := false
wait:
	for {
		select {
		case <-ctx.Done():
			interrupted = true
			break wait
		case <-until:
			drain()
		case <-drainTimeout:
			prog.println("writes still unsettled after the last cycle; stopping anyway")
			break wait
		case <-tick.C:
			prog.redraw()
			if !draining && target != nil && settledThrough(board, target) {
				drain()
			}
			if draining && drained(probes) {
				break wait
			}
		}
	}
	tick.Stop()
	elapsed := time.Since(started)
	if interrupted {
		stop() // a second interrupt ends the process at once
		prog.println("interrupted: deleting markers (interrupt again to quit at once)")
	}
	cancel()
	wg.Wait()
	stopBoard()
	<-boardDone
	board.flush() // the verdicts of the last cycles
	// The probes deleted their markers as they stopped; a slow or failing
	// apiserver can keep them from it, and the user must hear of that.
	left, listErrs := markersLeft(restConfig, cfgs, replica)
	prog.finish()

	inexact := map[string][]probe.ResumeVerdict{}
	for i, p := range probes {
		inexact[cfgs[i].Name] = p.ResumeInexact()
	}
	rep, err := buildReport(reg, lat, board, cfgs, inexact, kf, restConfig.Host, replica, started, elapsed, interrupted)
	if err != nil {
		return fail(err)
	}
	rep.addMarkersLeft(left, listErrs, replica)
	if kf.output == "json" {
		err = rep.writeJSON(stdout)
	} else {
		err = rep.writeText(stdout)
	}
	if err != nil {
		return fail(err)
	}
	switch {
	case interrupted, len(left) > 0, len(listErrs) > 0:
		return checkError
	case rep.OK:
		return checkOK
	}
	return checkFailed
}

// writeTimeout is the probe's bound on one marker write.
const writeTimeout = 30 * time.Second

func drained(probes []*probe.Probe) bool {
	for _, p := range probes {
		if !p.Drained() {
			return false
		}
	}
	return true
}

func settledThrough(b *board, target map[string]uint64) bool {
	for name, n := range target {
		if b.counts(name).through < n {
			return false
		}
	}
	return true
}

// preflight makes sure that the check can run at all, so that a wrong
// kubeconfig, a missing namespace or a missing permission is an error that
// says so (exit 2) rather than a report full of failed writes (exit 1).
func preflight(ctx context.Context, rc *rest.Config, cfgs []probe.Config, replica string, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client, err := probe.NewClient(rc)
	if err != nil {
		return err
	}
	if err := client.RESTClient().Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return fmt.Errorf("cannot reach the apiserver at %s: %w", rc.Host, err)
	}
	// A dry-run create proves that the namespace exists and that the
	// marker kind may be created there, and writes nothing; access reviews
	// prove the other verbs, which nothing can try without writing.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	meta := metav1.ObjectMeta{Name: "watchprobe-preflight-" + replica}
	for _, cfg := range cfgs {
		group, resource := markerResource(cfg.Kind)
		verbs := probe.MarkerVerbs
		switch missing, err := deniedVerbs(ctx, client, cfg.Namespace, group, resource, verbs); {
		case err != nil:
			logger.Warn("cannot review this identity's permissions; trying the check anyway", "err", err)
		case len(missing) > 0:
			return fmt.Errorf("probe %q may not %s its %s markers in namespace %q: grant %s and %s on %s there", cfg.Name, strings.Join(missing, " or "), cfg.Kind, cfg.Namespace, strings.Join(verbs[:len(verbs)-1], ", "), verbs[len(verbs)-1], resource)
		}
		if cfg.APIServers.Discover {
			if err := preflightDiscovery(ctx, client, cfg.Name, logger); err != nil {
				return err
			}
		}
		meta.Namespace = cfg.Namespace
		var err error
		switch cfg.Kind {
		case probe.KindLease:
			_, err = client.Leases(cfg.Namespace).Create(ctx, &coordinationv1.Lease{ObjectMeta: meta}, dryRun)
			if err == nil {
				_, err = client.Leases(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
			}
		default:
			_, err = client.ConfigMaps(cfg.Namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: meta}, dryRun)
			if err == nil {
				_, err = client.ConfigMaps(cfg.Namespace).List(ctx, metav1.ListOptions{Limit: 1})
			}
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("probe %q cannot write its %s markers in namespace %q: %w", cfg.Name, cfg.Kind, cfg.Namespace, err)
		}
	}
	return nil
}

// preflightDiscovery makes sure that `apiservers: discover` can follow the
// apiservers: without that, no per-apiserver path would ever start.
func preflightDiscovery(ctx context.Context, client *probe.Client, name string, logger *slog.Logger) error {
	switch missing, err := deniedVerbs(ctx, client, metav1.NamespaceDefault, "discovery.k8s.io", "endpointslices", probe.DiscoveryVerbs); {
	case err != nil:
		logger.Warn("cannot review this identity's permissions; trying the check anyway", "err", err)
	case len(missing) > 0:
		return fmt.Errorf("probe %q: apiservers: discover may not %s endpointslices in namespace default: grant list and watch on them there, or name the apiservers in apiservers.endpoints", name, strings.Join(missing, " or "))
	}
	_, err := client.EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes", Limit: 1})
	if err != nil {
		return fmt.Errorf("probe %q: apiservers: discover cannot list the kubernetes EndpointSlices in namespace default: %w", name, err)
	}
	return nil
}

// deniedVerbs lists the verbs on resource in namespace that the apiserver
// does not allow this identity.
func deniedVerbs(ctx context.Context, client *probe.Client, namespace, group, resource string, verbs []string) ([]string, error) {
	var denied []string
	for _, verb := range verbs {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource},
		}}
		r, err := client.SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		if !r.Status.Allowed {
			denied = append(denied, verb)
		}
	}
	return denied, nil
}

// markerResource is the API group and resource of a marker kind.
func markerResource(kind string) (group, resource string) {
	if kind == probe.KindLease {
		return coordinationv1.GroupName, "leases"
	}
	return "", "configmaps"
}

// markerRef names one marker.
type markerRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// markersLeft lists this replica's markers still in the cluster, of every
// kind and namespace the probes write, with a timeout of its own: the run's
// is over.
func markersLeft(rc *rest.Config, cfgs []probe.Config, replica string) ([]markerRef, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := probe.NewClient(rc)
	if err != nil {
		return nil, []error{err}
	}
	var left []markerRef
	var errs []error
	seen := map[markerRef]bool{}
	for _, cfg := range cfgs {
		where := markerRef{Kind: cfg.Kind, Namespace: cfg.Namespace}
		if seen[where] {
			continue
		}
		seen[where] = true
		names, err := probe.MarkerNames(ctx, client, cfg.Kind, cfg.Namespace, replica)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s markers in namespace %s: %w", cfg.Kind, cfg.Namespace, err))
			continue
		}
		for _, n := range names {
			left = append(left, markerRef{Kind: cfg.Kind, Namespace: cfg.Namespace, Name: n})
		}
	}
	return left, errs
}

// checkRecorder gives the board a probe's verdicts and the latencies their
// exact values.
type checkRecorder struct {
	*verdictRecorder
	lat *latencies
}

func (r checkRecorder) Latency(o prometheus.Observer, d time.Duration) { r.lat.add(o, d) }

// pathKey names one path of one probe, as its series' labels do.
type pathKey struct {
	probe, path, apiserver string
}

// latencies keeps every latency the probes record, by path. A check is
// short, so keeping them all is cheap, and gives exact quantiles and the
// true maximum, which the histograms' buckets cannot.
type latencies struct {
	mu   sync.Mutex
	keys map[prometheus.Observer]pathKey
	by   map[pathKey][]time.Duration
}

func (l *latencies) add(o prometheus.Observer, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k, ok := l.keys[o]
	if !ok {
		k = keyOf(o)
		l.keys[o] = k
	}
	l.by[k] = append(l.by[k], d)
}

func (l *latencies) of(k pathKey) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := slices.Clone(l.by[k])
	slices.Sort(d)
	return d
}

// keyOf reads the path a histogram child belongs to from its labels.
func keyOf(o prometheus.Observer) pathKey {
	m, ok := o.(prometheus.Metric)
	if !ok {
		return pathKey{}
	}
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		return pathKey{}
	}
	l := labelMap(pb.GetLabel())
	return pathKey{l["probe"], l["path"], l["apiserver"]}
}

func labelMap(pairs []*dto.LabelPair) map[string]string {
	l := make(map[string]string, len(pairs))
	for _, p := range pairs {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress shows how a check goes on stderr: on a terminal one live line,
// redrawn, with a line of its own for each failed cycle; elsewhere (CI
// logs) one plain line per judged cycle. Log lines pass through it, so
// that they do not garble the live line.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	live     bool
	shown    bool // the live line is on screen
	started  time.Time
	duration time.Duration // zero: until cycles
	cycles   int
	names    []string
	board    *board
}

func newProgress(w io.Writer, live bool) *progress { return &progress{w: w, live: live} }

func (p *progress) start(at time.Time, kf *checkFlags, cfgs []probe.Config, b *board) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started, p.board = at, b
	if kf.durationSet {
		p.duration = kf.duration
	} else {
		p.cycles = kf.cycles
	}
	for _, cfg := range cfgs {
		p.names = append(p.names, cfg.Name)
	}
	what := fmt.Sprintf("%d cycles", kf.cycles)
	if kf.durationSet {
		what = kf.duration.String()
	}
	p.writeLocked(fmt.Sprintf("checking %s for %s\n", strings.Join(p.names, ", "), what))
}

// Write passes a log line through.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeLocked(string(b))
	return len(b), nil
}

func (p *progress) println(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeLocked(s + "\n")
}

// writeLocked writes a whole line above the live line.
func (p *progress) writeLocked(s string) {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
	fmt.Fprint(p.w, s)
	p.drawLocked()
}

func (p *progress) cycle(name string, c cycleStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	result := "ok"
	if !c.OK {
		result = "FAILED"
	}
	line := fmt.Sprintf("%8s  %s cycle %d %s", p.elapsedLocked(), name, c.Cycle, result)
	if len(c.Anomalies) > 0 {
		line += ": " + strings.Join(c.Anomalies, ", ")
	}
	if p.live && c.OK && len(c.Anomalies) == 0 {
		p.drawLocked() // a good cycle only moves the live line
		return
	}
	p.writeLocked(line + "\n")
}

func (p *progress) redraw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawLocked()
}

func (p *progress) drawLocked() {
	if !p.live || p.board == nil {
		return
	}
	var parts []string
	for _, name := range p.names {
		c := p.board.counts(name)
		s := fmt.Sprintf("%s: %d cycles", name, c.through)
		if p.cycles > 0 {
			s = fmt.Sprintf("%s: %d/%d cycles", name, c.through, p.cycles)
		}
		if failed := c.judged - c.ok; failed > 0 {
			s += fmt.Sprintf(" (%d failed)", failed)
		}
		parts = append(parts, s)
	}
	elapsed := p.elapsedLocked()
	if p.duration > 0 {
		elapsed += " / " + p.duration.String()
	}
	fmt.Fprintf(p.w, "\r\033[K%s  %s", elapsed, strings.Join(parts, "  "))
	p.shown = true
}

func (p *progress) elapsedLocked() string {
	return time.Since(p.started).Truncate(100 * time.Millisecond).String()
}

// finish clears the live line before the report.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.shown = false
	p.live = false
}
