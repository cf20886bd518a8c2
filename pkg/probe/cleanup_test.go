package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// deleteCounter is a markerAPI whose deletes of markers named stuck-* fail
// and whose other deletes succeed; it counts them. The cleaner must not call
// anything else here.
type deleteCounter struct {
	kube.MarkerAPI
	mu      sync.Mutex
	deletes map[string]int
}

func (d *deleteCounter) Delete(_ context.Context, name, _ string) (metav1.Object, uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deletes[name]++
	if strings.HasPrefix(name, "stuck-") {
		return nil, 0, errors.New("the apiserver refused")
	}
	return nil, 0, nil
}

// List finds no marker: the start-up sweep has nothing to do here.
func (d *deleteCounter) List(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return &corev1.ConfigMapList{}, nil
}

func (d *deleteCounter) count(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deletes[name]
}

// The cleaner ticks only while markers wait; markers queued more often than
// it ticks must not keep putting off the retry of the ones already queued.
func TestCleanerRetriesWhileMarkersKeepComing(t *testing.T) {
	api := &deleteCounter{deletes: map[string]int{}}
	c := newCleaner(api, func(int, int) {}, testLogger(t), cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour, now: time.Now, deleted: func(string, time.Time) {}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.run(ctx)
	}()
	c.add("stuck-1", false)
	start := time.Now()
	var others []string
	for i := 0; time.Since(start) < 3200*time.Millisecond; i++ {
		name := fmt.Sprintf("other-%d", i)
		c.add(name, false)
		others = append(others, name)
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the last ones' first retry
	cancel()
	<-done
	// Retries of a failing delete wait 1 s, then 2 s: at about 1 s and 2 s.
	if n := api.count("stuck-1"); n < 2 {
		t.Errorf("the failing marker was tried %d times in 3.2 s of markers queued every 100 ms, want at least 2", n)
	}
	for _, name := range others {
		if api.count(name) != 1 {
			t.Errorf("marker %s deleted %d times, want once", name, api.count(name))
		}
	}
	if len(c.markers) != 1 || c.markers["stuck-1"] == nil {
		t.Errorf("queued after the run: %v, want only stuck-1", c.markers)
	}
}

// hidingAPI lists every marker but one, as a list does that was answered
// before that marker's create committed.
type hidingAPI struct {
	kube.MarkerAPI
	hide string
}

func (h hidingAPI) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := h.MarkerAPI.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, err
	}
	var kept []runtime.Object
	for _, item := range items {
		if m, err := meta.Accessor(item); err == nil && m.GetName() != h.hide {
			kept = append(kept, item)
		}
	}
	return obj, meta.SetList(obj, kept)
}

// The final cleanup deletes a marker queued for deletion that its list did
// not show: a create in flight when the run stopped may commit after the
// list.
func TestCleanupDeletesQueuedMarkerTheListMissed(t *testing.T) {
	ns := "cleanup-queued"
	client := inNamespace(t, ns)
	api := configMapMarkers(t, ns)
	leaveMarker(t, api, "late-commit", "queued", "r1")
	pending := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending"})
	c := newCleaner(hidingAPI{api, "late-commit"}, gaugeOf(pending), testLogger(t), cleanerConfig{probe: "queued", replica: "r1", orphanAge: time.Hour, now: time.Now, deleted: func(string, time.Time) {}})
	c.add("late-commit", true) // its create failed at the client
	c.sweep(context.Background(), sweepStop)
	_, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), "late-commit", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the queued marker the list missed is still there after the final cleanup (get: %v)", err)
	}
}

// configMapMarkers is the marker API of the ConfigMaps in ns, as the
// cluster's admin.
func configMapMarkers(t *testing.T, ns string) kube.MarkerAPI {
	t.Helper()
	api, err := kube.NewMarkerAPI(markerClient(t), config.KindConfigMap, ns)
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// leaveMarker creates a marker named name through api, with the labels
// that replica of probe gives its own markers.
func leaveMarker(t *testing.T, api kube.MarkerAPI, name, probe, replica string) {
	t.Helper()
	obj := api.NewObject(metav1.ObjectMeta{Name: name, Labels: map[string]string{
		LabelManagedBy: ManagedByValue, LabelProbe: probe, LabelReplica: replica,
	}})
	if _, err := api.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}

// markerStore is a markerAPI over markers held in memory, whose deletes
// fail while refusing is set, as with an RBAC without delete, and only
// mark the marker deleting while holding is, as another client's
// finalizer does.
type markerStore struct {
	kube.MarkerAPI
	mu       sync.Mutex
	items    []corev1.ConfigMap
	at       map[string]int // index in items
	refusing bool
	holding  bool
}

var storeLabels = map[string]string{LabelReplica: "r1"}

func (m *markerStore) put(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.at[name] = len(m.items)
	m.items = append(m.items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: storeLabels}})
}

func (m *markerStore) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}

func (m *markerStore) Delete(_ context.Context, name, _ string) (metav1.Object, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.at[name]
	switch {
	case m.refusing:
		return nil, 0, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, name, errors.New("no delete"))
	case !ok:
		return nil, 0, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	case m.holding:
		item := &m.items[i]
		if item.DeletionTimestamp == nil {
			ts := metav1.Now()
			item.DeletionTimestamp, item.Finalizers = &ts, []string{"example.com/hold"}
		}
		return item.DeepCopy(), 0, nil
	}
	m.remove(i)
	return nil, 0, nil
}

// remove drops items[i]. The caller holds mu.
func (m *markerStore) remove(i int) {
	name := m.items[i].Name
	last := len(m.items) - 1
	m.items[i] = m.items[last]
	m.at[m.items[i].Name] = i
	m.items = m.items[:last]
	delete(m.at, name)
}

// letGo removes the finalizers it held: the markers marked deleting go.
func (m *markerStore) letGo() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holding = false
	for i := len(m.items) - 1; i >= 0; i-- {
		if m.items[i].DeletionTimestamp != nil {
			m.remove(i)
		}
	}
}

func (m *markerStore) List(context.Context, metav1.ListOptions) (runtime.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &corev1.ConfigMapList{Items: slices.Clone(m.items)}, nil
}

// A day of deletes refused, a marker left every 10 s: the cleaner tracks a
// bounded number by name, finds the rest by listing, and its pending gauge
// says how many markers exist all along; once deletes work again it deletes
// them all and the gauge reads 0. Each marker's delete is heard once, when
// it succeeded, whether the marker was tracked by name or listed: the
// freshness checks must not take a marker deleted so for one missing.
func TestCleanerBoundedThroughADayOfRefusedDeletes(t *testing.T) {
	t.Parallel()
	store := &markerStore{at: map[string]int{}, refusing: true}
	pending := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending"})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	heard := heardDeletes{}
	c := newCleaner(store, gaugeOf(pending), testLogger(t), cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour,
		now: func() time.Time { return now }, deleted: heard.hear})
	ctx := context.Background()
	const day = 24 * time.Hour / (10 * time.Second)
	for i := range day {
		name := fmt.Sprintf("m-%d", i)
		c.cycling(name)
		store.put(name)
		c.cycling("")
		c.add(name, false)
		now = now.Add(10 * time.Second)
		c.retry(ctx)
		if len(c.markers) > cleanupMaxQueued {
			t.Fatalf("after %d cycles %d markers queued by name, want at most %d", i+1, len(c.markers), cleanupMaxQueued)
		}
		if got := testutil.ToFloat64(pending); int(got) != store.count() {
			t.Fatalf("after %d cycles the pending gauge reads %g; %d markers exist", i+1, got, store.count())
		}
		if len(heard) > 0 {
			t.Fatalf("after %d cycles of refused deletes %d deletes heard", i+1, len(heard))
		}
	}
	store.mu.Lock()
	store.refusing = false
	store.mu.Unlock()
	for pass := 0; store.count() > 0 || c.waiting(); pass++ {
		if pass > int(day) {
			t.Fatalf("%d markers left after %d passes with deletes working", store.count(), pass)
		}
		now = now.Add(cleanupMaxWait)
		c.retry(ctx)
	}
	if got := testutil.ToFloat64(pending); got != 0 {
		t.Errorf("the pending gauge reads %g with every marker deleted", got)
	}
	if len(heard) != int(day) {
		t.Errorf("%d of the %d deleted markers heard deleted", len(heard), day)
	}
	for name, n := range heard {
		if n != 1 {
			t.Errorf("%s heard deleted %d times", name, n)
		}
	}
}

// heardDeletes counts, by marker, the deletes a cleaner reports.
type heardDeletes map[string]int

func (h heardDeletes) hear(name string, _ time.Time) { h[name]++ }

// The start-up sweep runs beside the first cycles: a marker whose create
// failed there, and which the sweep's list did not show, stays queued
// until it can no longer commit, and is deleted once it does. It is heard
// deleted then, not when a try found it absent while its create could
// still commit.
func TestStartupSweepKeepsAFailedCreate(t *testing.T) {
	store := &markerStore{at: map[string]int{}}
	pending := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending"})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	heard := heardDeletes{}
	c := newCleaner(store, gaugeOf(pending), testLogger(t), cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour,
		now: func() time.Time { return now }, deleted: heard.hear})
	ctx := context.Background()
	c.add("m-1", true) // its create timed out at the client
	c.sweep(ctx, sweepStart)
	now = now.Add(cleanupFirstWait)
	c.retry(ctx) // not there yet: no delete to hear
	if heard["m-1"] != 0 {
		t.Errorf("m-1 heard deleted while its create could still commit")
	}
	store.put("m-1")                             // and commits after the sweep's list
	now = now.Add(createMayCommit + time.Second) // an absent marker is tried again when it can no longer appear
	c.retry(ctx)
	if store.count() != 0 || testutil.ToFloat64(pending) != 0 {
		t.Errorf("%d markers left, pending gauge %g: the failed create that committed was forgotten", store.count(), testutil.ToFloat64(pending))
	}
	if heard["m-1"] != 1 {
		t.Errorf("m-1 heard deleted %d times, want once", heard["m-1"])
	}
}

// gaugeOf sets g to what a cleaner says is pending.
func gaugeOf(g prometheus.Gauge) func(int, int) { return func(n, _ int) { g.Set(float64(n)) } }

// Markers whose deletes another client's finalizers hold, one per cycle
// for longer than the cleaner tracks by name: it tracks a bounded number,
// oldest first, and finds the rest by listing; its gauges say how many
// exist and how many are held all along, and it never warns of a failed
// delete. A held marker a path sees deleted is let go at once, tracked or
// not; once the other client lets go of the rest, the cleaner finds them
// gone, and tells each gone once, those it only listed too: freshness was
// told they exist.
func TestCleanerTracksHeldMarkers(t *testing.T) {
	t.Parallel()
	store := &markerStore{at: map[string]int{}, holding: true}
	var pending, held int
	gone := map[string]int{}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	logs := &logLines{}
	c := newCleaner(store, func(n, h int) { pending, held = n, h }, slog.New(slog.NewTextHandler(logs, nil)),
		cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour, now: func() time.Time { return now }, deleted: func(name string, _ time.Time) { gone[name]++ }})
	t.Cleanup(func() { logs.show(t) })
	ctx := context.Background()
	const cycles = cleanupMaxQueued + 20
	for i := range cycles {
		name := fmt.Sprintf("m-%d", i)
		store.put(name)
		obj, _, err := store.Delete(ctx, name, "") // the probe's delete, held
		if err != nil || obj == nil {
			t.Fatalf("the store's delete of %s answered %v, %v", name, obj, err)
		}
		c.hold(obj)
		if pending != i+1 || held != i+1 {
			t.Fatalf("after %d held markers the gauges read %d pending, %d held", i+1, pending, held)
		}
		now = now.Add(10 * time.Second)
		c.retry(ctx)
		if len(c.markers) > cleanupMaxQueued {
			t.Fatalf("after %d cycles %d markers tracked by name, want at most %d", i+1, len(c.markers), cleanupMaxQueued)
		}
	}
	now = now.Add(cleanupMaxWait)
	c.retry(ctx) // lists what it does not track
	if pending != cycles || held != cycles {
		t.Errorf("gauges: %d pending, %d held; %d markers held exist", pending, held, cycles)
	}
	list := c.held()
	if len(list) != cleanupMaxQueued || list[0].Name != "m-0" || !slices.Equal(list[0].Finalizers, []string{"example.com/hold"}) {
		t.Errorf("%d held markers listed, the oldest %+v; want %d, m-0 held by example.com/hold first", len(list), list[0], cleanupMaxQueued)
	}
	c.released("m-0")
	if pending != cycles-1 || held != cycles-1 || slices.ContainsFunc(c.held(), func(h HeldMarker) bool { return h.Name == "m-0" }) {
		t.Errorf("after m-0 was seen deleted: %d pending, %d held, still listed: %v", pending, held, c.held()[0].Name)
	}
	untracked := fmt.Sprintf("m-%d", cycles-1)
	store.mu.Lock()
	store.remove(store.at[untracked]) // its finalizers gone, a path sees it deleted
	store.mu.Unlock()
	c.released(untracked)
	c.released(untracked) // and another path
	if pending != cycles-2 || held != cycles-2 || gone[untracked] != 1 {
		t.Errorf("after %s, not tracked by name, was seen deleted: %d pending, %d held, told gone %d times", untracked, pending, held, gone[untracked])
	}
	store.letGo()
	for pass := 0; c.waiting(); pass++ {
		if pass > cycles {
			t.Fatalf("%d markers still tracked after %d passes with none held", len(c.markers), pass)
		}
		now = now.Add(cleanupMaxWait)
		c.retry(ctx)
	}
	if pending != 0 || held != 0 {
		t.Errorf("gauges: %d pending, %d held with every held marker gone", pending, held)
	}
	if len(gone) != cycles || slices.ContainsFunc(slices.Collect(maps.Values(gone)), func(n int) bool { return n != 1 }) {
		t.Errorf("told gone: %v, want each of the %d held markers once", gone, cycles)
	}
	if n := len(logs.matching("level=WARN")) - len(logs.matching("more markers wait for deletion than are tracked by name")); n != 0 {
		t.Errorf("%d warnings of the cleaner's about held markers, want none:\n%s", n, strings.Join(logs.matching("level=WARN"), "\n"))
	}
	if n := len(logs.matching("other clients' finalizers hold a deleted marker")); n != cycles {
		t.Errorf("%d log lines name a held marker, want one per marker (%d)", n, cycles)
	}
}

// The tracker hands the sinks what any goroutine queued, on whichever
// goroutine delivers next: the cleaner's own too, while it holds its lock
// and reports the markers pending. A release delivered so (another path
// saw a held marker deleted) must not wait for that lock: the cleaner
// would wait for itself. It takes effect once the cleaner lets go.
func TestReleaseDeliveredWhileTheCleanerReports(t *testing.T) {
	t.Parallel()
	store := &markerStore{at: map[string]int{}, holding: true}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &Probe{}
	var mu sync.Mutex
	var pending, held int
	deliver := ""
	p.cleaner = newCleaner(store, func(n, h int) {
		mu.Lock()
		pending, held = n, h
		name := deliver
		deliver = ""
		mu.Unlock()
		if name != "" {
			releases{p}.Outcome(judge.Outcome{Kind: judge.Released, Marker: name})
		}
	}, slog.New(slog.DiscardHandler), cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour, now: func() time.Time { return now }})
	ctx := context.Background()
	for _, name := range []string{"m-0", "m-1"} {
		store.put(name)
		obj, _, err := store.Delete(ctx, name, "")
		if err != nil || obj == nil {
			t.Fatalf("the store's delete of %s answered %v, %v", name, obj, err)
		}
		if name == "m-1" {
			mu.Lock()
			deliver = "m-0" // queued by a path, delivered by this report
			mu.Unlock()
		}
		p.cleaner.hold(obj)
	}
	localcluster.Eventually(t, time.Minute, "m-0 released", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return pending == 1 && held == 1
	})
	if list := p.cleaner.held(); len(list) != 1 || list[0].Name != "m-1" {
		t.Errorf("held markers %+v, want m-1 alone", list)
	}
}
