package probe

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// gathered sums the samples of family name that carry the labels in match,
// read from the registry without creating any series.
func gathered(t *testing.T, reg prometheus.Gatherer, name string, match map[string]string) (sum float64, found bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue next
				}
			}
			found = true
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, found
}

// With KeepRetiredSeries (watchprobe check), the series of an apiserver
// that left stay for the whole run, past the grace after which the
// exporter deletes them; when the apiserver comes back, its path goes on
// from its counts rather than from zero.
func TestPinnedPathKeepsRetiredSeries(t *testing.T) {
	t.Parallel()
	cfg, addr := pinnedToLoopback(t, "keep", "pinned-keep")
	tp := startProbeWith(t, cfg, Options{
		Config: cluster.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, KeepRetiredSeries: true,
	}, seriesGrace(100*time.Millisecond))
	pinnedLabels := map[string]string{"probe": "keep", "path": metrics.PathAPIServer, "apiserver": addr}
	observed := func() float64 {
		v, _ := gathered(t, tp.registry, "watchprobe_events_observed_total", pinnedLabels)
		return v
	}
	localcluster.Eventually(t, 60*time.Second, "the pinned path observes writes", func() bool { return observed() >= 6 })

	// The apiserver leaves the list, and stays out past RetireAfter.
	now := time.Now()
	tp.pinned.reconcile(context.Background(), nil, now)
	tp.pinned.reconcile(context.Background(), nil, now.Add(2*time.Minute))
	if got := tp.pinned.addrs(); len(got) != 0 {
		t.Fatalf("pinned paths %v after the apiserver left, want none", got)
	}
	before := observed()
	time.Sleep(time.Second) // ten times the grace
	if got := tp.exposedAPIServers(t); len(got) != 1 || got[0] != addr {
		t.Fatalf("series of apiservers %v a second after %s left, want its series kept", got, addr)
	}
	if got := observed(); got != before {
		t.Errorf("the retired path's observed count went from %g to %g", before, got)
	}

	tp.pinned.reconcile(context.Background(), []string{addr}, time.Now())
	localcluster.Eventually(t, 60*time.Second, "the returned path counts on from where it was", func() bool { return observed() >= before+6 })
}

// hidingAPI lists every marker but one, as a list does that was answered
// before that marker's create committed.
type hidingAPI struct {
	markerAPI
	hide string
}

func (h hidingAPI) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	obj, err := h.markerAPI.list(ctx, opts)
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
	client := adminClient(t)
	ns := "cleanup-queued"
	createNamespace(t, client, ns)
	api, err := newMarkerAPI(markerClient(t), KindConfigMap, ns)
	if err != nil {
		t.Fatal(err)
	}
	obj := api.newObject(metav1.ObjectMeta{Name: "late-commit", Labels: map[string]string{
		LabelManagedBy: ManagedByValue, LabelProbe: "queued", LabelReplica: "r1",
	}})
	if _, err := api.create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	pending := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending"})
	c := newCleaner(hidingAPI{api, "late-commit"}, pending, testLogger(t))
	c.add("late-commit", true) // its create failed at the client
	c.sweep(context.Background(), "queued", "r1", time.Hour, true)
	_, err = client.CoreV1().ConfigMaps(ns).Get(context.Background(), "late-commit", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the queued marker the list missed is still there after the final cleanup (get: %v)", err)
	}
}
