package probe

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// A cluster is not the probe's alone. Another client that annotates each
// marker as it appears, as a labelling, policy or backup controller does,
// makes changes the paths deliver: each is counted once per path as a
// foreign change naming that client, and none is a duplicate, out of
// order, timed or lost; the probe's own writes go on without a conflict.
func TestForeignWriterCountedNotJudged(t *testing.T) {
	t.Parallel()
	const ns, manager = "foreign", "foreign-tester"
	cfg, addr := pinnedToLoopback(t, "foreign", ns)
	cfg.Paths = allPaths
	cfg.Etcd = config.DefaultConfig().Etcd
	cfg.Etcd.Endpoints = []string{cluster.EtcdURL}
	foreign := &foreignChanges{}
	tp := startProbeWith(t, cfg, Options{Config: cluster.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{foreign}})
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
		_, err := client.CoreV1().ConfigMaps(ns).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: manager})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			t.Errorf("the other client's patch of %s: %v", cm.Name, err)
		default:
			if done++; done == n {
				return done
			}
		}
	}
	return done
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
