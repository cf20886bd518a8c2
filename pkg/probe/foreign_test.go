package probe

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// A cluster is not the probe's alone. Another client that annotates each
// marker as it appears, as a labelling, policy or backup controller does,
// makes changes the paths deliver: each is counted once per path as a
// foreign change naming that client, and none is a duplicate, out of
// order, timed or lost; the probe's own writes go on without a conflict.
func TestForeignWriterCountedNotJudged(t *testing.T) {
	t.Parallel()
	const ns, manager = "foreign", "foreign-tester"
	foreign := &foreignChanges{}
	tp, addr := probedEverywhere(t, "foreign", ns, Options{Sinks: []judge.Sink{foreign}})
	cfg := tp.cfg
	localcluster.Eventually(t, 60*time.Second, "paths synced", tp.ready)

	// The other client: a watch of the namespace's markers, and a merge
	// patch of its own annotation on each marker it sees appear.
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	const want = 8
	ctx, stop := context.WithCancel(context.Background())
	patched := make(chan int)
	go func() { patched <- annotateEach(ctx, t, client, ns, manager, want) }()
	n := <-patched
	stop()
	if n < want {
		t.Fatalf("the other client patched %d markers, want %d", n, want)
	}

	// Every path has delivered every patch, then the writes have settled.
	paths := map[string]exposedPath{metrics.PathAPIServer: tp.pinnedPath(addr)}
	for _, p := range cfg.Paths {
		paths[p] = tp.path(p)
	}
	localcluster.Eventually(t, 60*time.Second, "each patch delivered on every path", func() bool {
		for _, ps := range paths {
			if !ps.exposed() || ps.value(metrics.ForeignChanges) < float64(n) {
				return false
			}
		}
		return true
	})
	tp.settled(t, int(tp.acked(t, metrics.VerbCreate))+2)
	tp.stop()

	for path, ps := range paths {
		expectAnomalies(t, path, ps, nil)
		probetest.WantCounts(t, []probetest.Count{
			{path + " foreign changes", ps.value(metrics.ForeignChanges), float64(n)},
			{path + " lost", ps.lost(), 0},
		})
	}
	if errs := tp.sum(metrics.WriteErrors); errs != 0 {
		t.Errorf("%g write errors: the other client's annotations made the probe's writes fail", errs)
	}
	if named, others := foreign.managers(manager); named != n*len(paths) || others != nil {
		t.Errorf("%d foreign changes name %s, want %d; others named %v", named, manager, n*len(paths), others)
	}
	assertNoMarkers(t, client, ns, "foreign", "")
}

// probedEverywhere starts a probe named name in the new namespace ns on every
// path (informer, watch, etcd, and one pinned to the package's apiserver,
// whose address it returns too) with opts as the package's tests run
// probes; before reaches it between New and Run.
func probedEverywhere(t *testing.T, name, ns string, opts Options, before ...func(*Probe)) (*testProbe, string) {
	t.Helper()
	cfg, addr := pinnedToLoopback(t, name, ns)
	cfg.Paths = allPaths
	cfg.Etcd = config.DefaultConfig().Etcd
	cfg.Etcd.Endpoints = []string{cluster.EtcdURL}
	opts.Config, opts.Replica, opts.OrphanAge = cluster.AdminConfig(), "r1", time.Hour
	return startProbeWith(t, cfg, opts, before...), addr
}

// annotateEach patches an annotation of its own onto each of the first n
// markers it sees created in ns, as manager, and returns how many patches
// succeeded: a marker deleted before its patch is skipped.
func annotateEach(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, manager string, n int) int {
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedByValue})
	if err != nil {
		t.Errorf("the other client's watch: %v", err)
		return 0
	}
	defer w.Stop()
	patch := []byte(`{"metadata":{"annotations":{"example.com/touched":"yes"}}}`)
	done := 0
	for ev := range w.ResultChan() {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if ev.Type != watch.Added || !ok {
			continue
		}
		if patchMarker(ctx, t, client, ns, cm.Name, manager, patch) {
			if done++; done == n {
				return done
			}
		}
	}
	return done
}

// patchMarker merge-patches the marker name in ns with patch, as manager:
// false when it is gone, as a marker deleted before its patch is.
func patchMarker(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, name, manager string, patch []byte) bool {
	_, err := client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manager})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("the other client's patch of %s: %v", name, err)
	}
	return err == nil
}

// foreignChanges records the foreign changes a probe concluded.
type foreignChanges struct {
	mu     sync.Mutex
	byName map[string]int
}

func (f *foreignChanges) Outcome(o judge.Outcome) {
	if o.Kind != judge.ForeignChange {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byName == nil {
		f.byName = map[string]int{}
	}
	f.byName[o.Manager]++
}

// managers counts the changes that name manager, and the other names given.
func (f *foreignChanges) managers(manager string) (named int, others []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, n := range f.byName {
		if name == manager {
			named = n
		} else {
			others = append(others, name)
		}
	}
	return named, others
}

// Another client that puts a finalizer of its own on the markers, as a
// backup or protection controller does, holds their deletion: the apiserver
// answers the probe's delete with the marker, marked deleting, and sends
// no DELETED until the finalizer goes. Each such delete is unmeasurable on
// every path, never missed or lost; the finalizer's arrival is a foreign
// change; one log line per marker names the client; the cleaner tracks the
// markers held, with their finalizers and their manager, as pending
// deletion; and when the client lets go, the DELETED that follows is no
// verdict and the cleaner lets go too. Nothing is left.
func TestFinalizerHoldsDeletes(t *testing.T) {
	t.Parallel()
	const ns, manager, finalizer = "foreign-held", "finalizer-tester", "example.com/hold"
	logs := &logLines{}
	rec := &heard{}
	tp, addr := probedEverywhere(t, "held", ns, Options{Sinks: []judge.Sink{rec}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	cfg := tp.cfg
	t.Cleanup(func() { logs.show(t) })
	localcluster.Eventually(t, 60*time.Second, "paths synced", tp.ready)
	paths := append([]string{metrics.PathAPIServer}, cfg.Paths...)

	// The other client: a watch of the markers, and a finalizer of its
	// own on each it sees appear, until the probe has deleted enough of
	// them. A finalizer that races the probe's delete (set after the
	// apiserver decided to delete at once) does not hold the marker: the
	// cluster says which it held, once their cycles are over.
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	const want = 5
	patched := holdMarkers(t, client, ns, manager, finalizer, want)
	var held []string
	localcluster.Eventually(t, 30*time.Second, "every marker the other client patched deleted or held", func() bool {
		held = held[:0]
		for _, name := range patched {
			cm, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil || cm.DeletionTimestamp == nil:
				return false
			default:
				held = append(held, name)
			}
		}
		return true
	})
	if len(held) < want {
		t.Fatalf("the other client held %d markers, want %d", len(held), want)
	}

	// The cleaner tracks each.
	localcluster.Eventually(t, 60*time.Second, "every held marker tracked", func() bool { return len(tp.HeldMarkers()) == len(held) })
	for _, h := range tp.HeldMarkers() {
		if !slices.Contains(held, h.Name) || !slices.Equal(h.Finalizers, []string{finalizer}) || !slices.Equal(h.Managers, []string{manager}) {
			t.Errorf("held marker %+v, want one of %v held by %s's %s", h, held, manager, finalizer)
		}
	}
	snap := tp.at()
	probetest.WantCounts(t, []probetest.Count{
		{"markers held", snap.value(metrics.MarkersHeld, cfg.Name), float64(len(held))},
		{"markers pending deletion", snap.value(metrics.MarkersPendingDeletion, cfg.Name), float64(len(held))},
	})

	// The other client lets go: the markers go, and so does the cleaner's
	// record of them.
	for _, name := range held {
		_, err := client.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{FieldManager: manager})
		if err != nil {
			t.Errorf("removing the finalizer of %s: %v", name, err)
		}
	}
	localcluster.Eventually(t, 60*time.Second, "no marker held", func() bool {
		return len(tp.HeldMarkers()) == 0 && tp.value(metrics.MarkersHeld, cfg.Name) == 0 && tp.value(metrics.MarkersPendingDeletion, cfg.Name) == 0
	})
	tp.drained(t)
	snap = tp.at()
	tp.stop()

	deletes := float64(snap.acked(t, metrics.VerbDelete))
	blocked, foreign := float64(len(held)), float64(len(patched))
	for _, path := range paths {
		ps := snap.pinnedPath(addr)
		if path != metrics.PathAPIServer {
			ps = snap.path(path)
		}
		expectAnomalies(t, path, ps, nil)
		probetest.WantCounts(t, []probetest.Count{
			{path + " delete_blocked", ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurableDeleteBlocked), blocked},
			{path + " left_selector", ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector), 0},
			{path + " foreign changes", ps.value(metrics.ForeignChanges), foreign},
			{path + " observed deletes", ps.value(metrics.EventsObserved, metrics.EventDeleted), deletes - blocked},
			{path + " missed", ps.missed(), 0},
			{path + " lost", ps.lost(), 0},
		})
	}
	for _, o := range rec.kinds(judge.Unmeasurable) {
		if !slices.Contains(held, o.Marker) || o.Manager != manager {
			t.Errorf("unmeasurable %s of %s naming %q: want a held marker's, naming %s", o.Reason, o.Marker, o.Manager, manager)
		}
	}
	if got := len(rec.kinds(judge.Released)); got > len(held)*len(paths) {
		t.Errorf("%d releases for %d held markers on %d paths", got, len(held), len(paths))
	}
	named := logs.matching("other clients' finalizers hold a deleted marker")
	if len(named) != len(held) {
		t.Errorf("%d log lines name a held marker's finalizers, want one per marker (%d):\n%s", len(named), len(held), strings.Join(named, "\n"))
	}
	for _, l := range named {
		if !strings.Contains(l, "managers=["+manager+"]") {
			t.Errorf("the held marker's log line does not name %s: %s", manager, l)
		}
	}
	assertNoMarkers(t, client, ns, "held", "")
}

// holdMarkers puts finalizer on each marker it sees created in ns, as
// manager, until it has seen n of them marked deleting, and returns the
// names of those it patched: a marker deleted before its patch is skipped.
func holdMarkers(t *testing.T, client kubernetes.Interface, ns, manager, finalizer string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedByValue})
	if err != nil {
		t.Fatalf("the other client's watch: %v", err)
	}
	defer w.Stop()
	patch := []byte(`{"metadata":{"finalizers":["` + finalizer + `"]}}`)
	var patched []string
	deleting := map[string]bool{}
	for ev := range w.ResultChan() {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		switch {
		case !ok:
		case ev.Type == watch.Added && !slices.Contains(patched, cm.Name):
			if patchMarker(ctx, t, client, ns, cm.Name, manager, patch) {
				patched = append(patched, cm.Name)
			}
		case ev.Type == watch.Modified && cm.DeletionTimestamp != nil && slices.Contains(patched, cm.Name):
			if deleting[cm.Name] = true; len(deleting) == n {
				return patched
			}
		}
	}
	t.Fatalf("the other client saw %d of the markers it patched (%d) marked deleting within a minute, want %d", len(deleting), len(patched), n)
	return nil
}

// logLines keeps every line of a probe's log, and shows the last ones
// when the test fails.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// matching are the lines that contain s.
func (l *logLines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func (l *logLines) show(t *testing.T) {
	if !t.Failed() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("the probe's last log lines:\n%s", strings.Join(l.lines[max(0, len(l.lines)-logTailLines):], "\n"))
}

// heard keeps the outcomes a probe concluded.
type heard struct {
	mu       sync.Mutex
	outcomes []judge.Outcome
}

func (h *heard) Outcome(o judge.Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outcomes = append(h.outcomes, o)
}

// kinds are the outcomes of kind k heard, in order.
func (h *heard) kinds(k judge.Kind) []judge.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []judge.Outcome
	for _, o := range h.outcomes {
		if o.Kind == k {
			out = append(out, o)
		}
	}
	return out
}

// Another client that takes a marker out of the probe's label selector
// (strips its replica label) makes the selector paths (informer, watch,
// the pinned apiserver) deliver a DELETED the probe did not cause: a
// foreign change there. The probe's next update labels the marker again,
// and those paths deliver it as an ADDED: the update's own event, timed.
// A delete while the marker is out of the selector cannot be observed on
// those paths: unmeasurable there, never missed or lost, while the etcd
// path, which watches every key, times it. The other client strips the
// label after each update of a few markers, and the probe's next write
// waits until the selector paths have delivered that: the counts are then
// exact.
func TestMarkerTakenOutOfSelector(t *testing.T) {
	t.Parallel()
	const ns, manager = "foreign-label", "label-tester"
	rec := &heard{}
	client := adminClient(t)
	const want = 4
	s := &stripper{t: t, client: client, ns: ns, manager: manager, want: want, heard: rec, selectorPaths: 3}
	tp, addr := probedEverywhere(t, "label", ns, Options{Sinks: []judge.Sink{rec}}, func(p *Probe) { p.observers = append(p.observers, s) })
	cfg := tp.cfg
	localcluster.Eventually(t, 60*time.Second, "markers stripped after each update", func() bool { return s.count() == want*cfg.Updates })
	tp.drained(t)
	snap := tp.at()
	tp.stop()

	updates, deletes := float64(snap.acked(t, metrics.VerbUpdate)), float64(snap.acked(t, metrics.VerbDelete))
	for _, path := range append([]string{metrics.PathAPIServer}, cfg.Paths...) {
		ps := snap.pinnedPath(addr)
		if path != metrics.PathAPIServer {
			ps = snap.path(path)
		}
		left, observedDeletes := float64(want), deletes-want
		if path == metrics.PathEtcd {
			left, observedDeletes = 0, deletes
		}
		expectAnomalies(t, path, ps, nil)
		probetest.WantCounts(t, []probetest.Count{
			{path + " foreign changes", ps.value(metrics.ForeignChanges), float64(want * cfg.Updates)},
			{path + " left_selector", ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector), left},
			{path + " delete_blocked", ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurableDeleteBlocked), 0},
			{path + " observed updates", ps.value(metrics.EventsObserved, metrics.EventModified), updates},
			{path + " observed deletes", ps.value(metrics.EventsObserved, metrics.EventDeleted), observedDeletes},
			{path + " missed", ps.missed(), 0},
			{path + " lost", ps.lost(), 0},
		})
	}
	assertNoMarkers(t, client, ns, "label", "")
}

// stripper is the other client of TestMarkerTakenOutOfSelector: it hears
// each of the probe's writes as answered, and after each update of the
// first want markers it removes the marker's replica label, then waits
// until the selector paths have delivered that.
type stripper struct {
	t                   *testing.T
	client              kubernetes.Interface
	ns, manager         string
	want, selectorPaths int
	heard               *heard
	mu                  sync.Mutex
	markers             []string
	stripped            int
}

func (s *stripper) wrote(marker string, _ uint64, verb string, _ metav1.Object, err error, _ time.Time) {
	if verb != metrics.VerbUpdate || err != nil {
		return
	}
	s.mu.Lock()
	if !slices.Contains(s.markers, marker) {
		if len(s.markers) == s.want {
			s.mu.Unlock()
			return
		}
		s.markers = append(s.markers, marker)
	}
	s.mu.Unlock()
	out, err := s.client.CoreV1().ConfigMaps(s.ns).Patch(context.Background(), marker, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+LabelReplica+`":null}}}`), metav1.PatchOptions{FieldManager: s.manager})
	if err != nil {
		s.t.Errorf("the other client's patch of %s: %v", marker, err)
		return
	}
	rv := judge.RV(out)
	for deadline := time.Now().Add(30 * time.Second); s.delivered(marker, rv) < s.selectorPaths; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Errorf("%s left the selector at %d, delivered on %d selector paths within 30s, want %d", marker, rv, s.delivered(marker, rv), s.selectorPaths)
			return
		}
	}
	s.mu.Lock()
	s.stripped++
	s.mu.Unlock()
}

// delivered counts the selector paths that delivered marker's DELETED at
// rv: a foreign change there.
func (s *stripper) delivered(marker string, rv uint64) int {
	n := 0
	for _, o := range s.heard.kinds(judge.ForeignChange) {
		if o.Marker == marker && o.RV == rv && o.Path.Name != metrics.PathEtcd {
			n++
		}
	}
	return n
}

// count is how many strips the selector paths have delivered.
func (s *stripper) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stripped
}

// Another client strips a marker's label just before the probe deletes it,
// and the probe has no etcd path: the selector paths (informer and watch)
// alone deliver the strip's DELETED, and only after the delete was sent
// (their watch streams are held from just before the strip until the
// delete's answer came). The delete's answer says which state it removed
// (the stripped one: its precondition conflicted with the strip, and it
// was sent again with the state read), so that DELETED is the strip's: a
// foreign change, the delete unmeasurable{left_selector} there, never
// timed, missed or lost. The counts are exact. The probe has the verbs
// the chart's role grants on its markers, and no more.
func TestStripJustBeforeTheDelete(t *testing.T) {
	t.Parallel()
	const ns, manager, want = "strip-delete", "strip-tester", 3
	client := inNamespace(t, ns)
	prober := grant(t, client, ns, "strip-prober", "list", "watch", "create", "patch", "delete")
	gate := &watchGate{open: make(chan struct{})}
	close(gate.open)
	paths := rest.CopyConfig(prober)
	paths.Wrap(gate.wrap)
	cfg := fastConfig("strip", ns)
	var s *stripThenDelete
	tp := startProbeWith(t, cfg, Options{Config: prober, Replica: "r1", OrphanAge: time.Hour},
		routed(t, map[string]*rest.Config{metrics.PathInformer: paths, metrics.PathWatch: paths}),
		func(p *Probe) {
			s = &stripThenDelete{MarkerAPI: p.api, t: t, client: client, ns: ns, manager: manager, want: want, gate: gate}
			p.api = s
		})
	localcluster.Eventually(t, 60*time.Second, "paths synced", tp.ready)
	localcluster.Eventually(t, 60*time.Second, "markers stripped just before their deletes, and two deleted since", func() bool {
		return s.count() == want && tp.acked(t, metrics.VerbDelete) >= want+2
	})
	tp.drained(t)
	snap := tp.at()
	tp.stop()

	deletes := float64(snap.acked(t, metrics.VerbDelete))
	for _, path := range cfg.Paths {
		ps := snap.path(path)
		expectAnomalies(t, path, ps, nil)
		probetest.WantCounts(t, []probetest.Count{
			{path + " foreign changes", ps.value(metrics.ForeignChanges), want},
			{path + " left_selector", ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurableLeftSelector), want},
			{path + " observed deletes", ps.value(metrics.EventsObserved, metrics.EventDeleted), deletes - want},
			{path + " observed updates", ps.value(metrics.EventsObserved, metrics.EventModified), float64(snap.acked(t, metrics.VerbUpdate))},
			{path + " missed", ps.missed(), 0},
			{path + " lost", ps.lost(), 0},
		})
	}
	assertNoMarkers(t, client, ns, "strip", "")
}

// stripThenDelete is the probe's marker API, whose first want deletes
// another client's strip of the marker's replica label precedes, with the
// paths' watch streams held from before the strip until the delete is
// answered. It checks that the delete's answer names the stripped state
// as the one removed.
type stripThenDelete struct {
	kube.MarkerAPI
	t           *testing.T
	client      kubernetes.Interface
	ns, manager string
	want        int
	gate        *watchGate
	mu          sync.Mutex
	stripped    int
}

func (s *stripThenDelete) Delete(ctx context.Context, name, rv string) (metav1.Object, uint64, error) {
	s.mu.Lock()
	strip := s.stripped < s.want
	s.mu.Unlock()
	if !strip {
		return s.MarkerAPI.Delete(ctx, name, rv)
	}
	s.gate.hold()
	defer s.gate.release()
	out, err := s.client.CoreV1().ConfigMaps(s.ns).Patch(context.Background(), name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+LabelReplica+`":null}}}`), metav1.PatchOptions{FieldManager: s.manager})
	if err != nil {
		s.t.Errorf("the other client's strip of %s: %v", name, err)
		return s.MarkerAPI.Delete(ctx, name, rv)
	}
	held, removed, err := s.MarkerAPI.Delete(ctx, name, rv)
	if err == nil && removed != judge.RV(out) {
		s.t.Errorf("the delete of %s removed the state at %d, want the strip's %d", name, removed, judge.RV(out))
	}
	s.mu.Lock()
	s.stripped++
	s.mu.Unlock()
	return held, removed, err
}

func (s *stripThenDelete) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stripped
}

// watchGate holds what the watch streams of a client read, while held:
// a read that returns then waits for the release, so that nothing
// received after hold is handed on before release.
type watchGate struct {
	mu   sync.Mutex
	open chan struct{}
}

func (g *watchGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *watchGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.open)
}

func (g *watchGate) wait() {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	<-open
}

func (g *watchGate) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTrip(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && req.URL.Query().Get("watch") == "true" {
			resp.Body = gatedBody{resp.Body, g}
		}
		return resp, err
	})
}

type gatedBody struct {
	io.ReadCloser
	g *watchGate
}

func (b gatedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.g.wait()
	return n, err
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
