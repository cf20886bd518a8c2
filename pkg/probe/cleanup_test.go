package probe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/pkg/config"
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

func (d *deleteCounter) Delete(_ context.Context, name string) (metav1.Object, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deletes[name]++
	if strings.HasPrefix(name, "stuck-") {
		return nil, errors.New("the apiserver refused")
	}
	return nil, nil
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
	c := newCleaner(api, func(int, int) {}, testLogger(t), cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour, now: time.Now})
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
	c := newCleaner(hidingAPI{api, "late-commit"}, gaugeOf(pending), testLogger(t), cleanerConfig{probe: "queued", replica: "r1", orphanAge: time.Hour, now: time.Now})
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
// fail while refusing is set, as with an RBAC without delete.
type markerStore struct {
	kube.MarkerAPI
	mu       sync.Mutex
	items    []corev1.ConfigMap
	at       map[string]int // index in items
	refusing bool
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

func (m *markerStore) Delete(_ context.Context, name string) (metav1.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.at[name]
	switch {
	case m.refusing:
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, name, errors.New("no delete"))
	case !ok:
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
	}
	last := len(m.items) - 1
	m.items[i] = m.items[last]
	m.at[m.items[i].Name] = i
	m.items = m.items[:last]
	delete(m.at, name)
	return nil, nil
}

func (m *markerStore) List(context.Context, metav1.ListOptions) (runtime.Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &corev1.ConfigMapList{Items: slices.Clone(m.items)}, nil
}

// A day of deletes refused, a marker left every 10 s: the cleaner tracks a
// bounded number by name, finds the rest by listing, and its pending gauge
// says how many markers exist all along; once deletes work again it deletes
// them all and the gauge reads 0.
func TestCleanerBoundedThroughADayOfRefusedDeletes(t *testing.T) {
	t.Parallel()
	store := &markerStore{at: map[string]int{}, refusing: true}
	pending := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending"})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newCleaner(store, gaugeOf(pending), testLogger(t), cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour, now: func() time.Time { return now }})
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
}

// The start-up sweep runs beside the first cycles: a marker whose create
// failed there, and which the sweep's list did not show, stays queued
// until it can no longer commit, and is deleted once it does.
func TestStartupSweepKeepsAFailedCreate(t *testing.T) {
	store := &markerStore{at: map[string]int{}}
	pending := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending"})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newCleaner(store, gaugeOf(pending), testLogger(t), cleanerConfig{probe: "p", replica: "r1", orphanAge: time.Hour, now: func() time.Time { return now }})
	ctx := context.Background()
	c.add("m-1", true) // its create timed out at the client
	c.sweep(ctx, sweepStart)
	store.put("m-1")                             // and commits after the sweep's list
	now = now.Add(createMayCommit + time.Second) // an absent marker is tried again when it can no longer appear
	c.retry(ctx)
	if store.count() != 0 || testutil.ToFloat64(pending) != 0 {
		t.Errorf("%d markers left, pending gauge %g: the failed create that committed was forgotten", store.count(), testutil.ToFloat64(pending))
	}
}

// gaugeOf sets g to what a cleaner says is pending.
func gaugeOf(g prometheus.Gauge) func(int, int) { return func(n, _ int) { g.Set(float64(n)) } }
