package probe

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The start-up condition of the 100-probe bench in one namespace: the
// apiserver ends the informer's stream right after its initial events (as
// kube-apiserver ends a watcher it finds unresponsive:
// apiserver_terminated_watchers_total), client-go's reflector takes a watch
// that closed in under a second with no event for an error and relists, and
// the first cycle, written while that relist is under way, is seen by the
// informer only as final state. Its writes are missed as relist, exactly as
// many as were written during the relist; the watch path misses none.
//
// Nothing here depends on timing: the relist's WatchList is held at the
// proxy until the first cycle is settled, and the first create is held until
// the relist has begun, so every write of the cycle falls inside it.
func TestRelistRightAfterFirstSync(t *testing.T) {
	ns := "startup-relist"
	inNamespace(t, ns)
	informerProxy, writeProxy := newProxy(t, cluster), newProxy(t, cluster)

	// The informer's first stream ends right after its initial-events-end
	// bookmark; its second WatchList (the relist) waits for Release.
	// The first WatchList after that end is the relist, however many
	// attempts the first one took (client-go retries a watch request whose
	// connection broke before any response).
	var ended atomic.Bool
	informerProxy.EndAfter(1, func(ev faultproxy.Event) bool {
		if ev.InitialEventsEnd {
			ended.Store(true)
		}
		return ev.InitialEventsEnd
	})
	informerProxy.Hold(1, func(r faultproxy.Request) bool { return r.WatchList && ended.Load() })
	// The first create waits until the relist has begun.
	writeProxy.Hold(1, func(r faultproxy.Request) bool { return r.Kind == "create" && r.Namespace == ns })

	cfg := fastConfig("startup", ns)
	cfg.Updates = 1
	cfg.Interval = model.Duration(time.Hour) // one cycle: create, update, delete
	cfg.Deadline = model.Duration(2 * time.Second)
	cfg.LostAfter = model.Duration(5 * time.Second)
	tp := startProbe(t, writeProxy.Config(cluster.AdminConfig()), cfg, "r1", time.Hour, map[string]*rest.Config{
		metrics.PathInformer: informerProxy.Config(cluster.AdminConfig()),
		metrics.PathWatch:    cluster.AdminConfig(),
	})
	informer, watch := tp.path(metrics.PathInformer), tp.path(metrics.PathWatch)

	localcluster.Eventually(t, 60*time.Second, "informer relisting after its first stream ended", func() bool {
		return tp.path(metrics.PathInformer).relists(metrics.RelistError) == 1 && informerProxy.Applied(faultproxy.Hold) == 1
	})
	if !tp.tracker.WasLive(0) {
		t.Fatal("the informer path was never live before the writes: not the condition under test")
	}
	writeProxy.Release()
	tp.settled(t, 1)
	informerProxy.Release()
	localcluster.Eventually(t, 60*time.Second, "informer live again", func() bool { return informer.value(metrics.PathUp) == 1 })

	tp.resolved(t)
	const writes = 3 // create, update, delete
	expectAnomalies(t, metrics.PathInformer, informer, map[string]float64{"missed_relist": writes, "lost_relist": writes})
	if got := informer.value(metrics.EventsMissed, metrics.MissedUnavailable); got != 0 {
		t.Errorf("informer: missed unavailable = %g, want 0", got)
	}
	for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistError: 1, metrics.RelistExpired: 0} {
		if got := tp.path(metrics.PathInformer).relists(reason); got != want {
			t.Errorf("informer relists (%s) = %g, want %g", reason, got, want)
		}
	}
	expectEnds(t, metrics.PathInformer, informer, map[string]float64{metrics.EndClosedEarly: 1})
	expectAnomalies(t, metrics.PathWatch, watch, nil)
	if got := watch.value(metrics.EventsMissed, metrics.MissedUnavailable); got != 0 {
		t.Errorf("watch: missed unavailable = %g, want 0", got)
	}
	if got := informerProxy.Applied(faultproxy.EndAfter); got != 1 {
		t.Errorf("streams ended after their initial events = %d, want 1", got)
	}
}

// Writes sent before a configured path was ever live (its first WatchList
// held past syncTimeout, so the probe writes anyway) are missed, then lost,
// as unavailable: the path had not started. Not as relist: the initial
// relist is where a path starts, not a restart that lost events.
func TestWritesBeforeFirstLiveUnavailable(t *testing.T) {
	t.Parallel()
	ns := "startup-never-live"
	inNamespace(t, ns)
	informerProxy := newProxy(t, cluster)
	informerProxy.Hold(1, func(r faultproxy.Request) bool { return r.WatchList })
	cfg := fastConfig("neverlive", ns)
	cfg.Updates = 1
	cfg.Interval = model.Duration(time.Hour)
	cfg.Deadline = model.Duration(2 * time.Second)
	cfg.LostAfter = model.Duration(5 * time.Second)
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour, through(t, informerProxy, metrics.PathInformer))
	informer := tp.path(metrics.PathInformer)
	tp.settled(t, 1) // after syncTimeout: the writes go, the informer never live
	if tp.tracker.WasLive(0) {
		t.Fatal("the informer was live before the writes: not the condition under test")
	}
	informerProxy.Release()
	localcluster.Eventually(t, 60*time.Second, "informer live", func() bool { return informer.value(metrics.PathUp) == 1 })
	tp.resolved(t)
	const writes = 3
	probetest.WantCounts(t, []probetest.Count{
		{"informer missed unavailable", informer.value(metrics.EventsMissed, metrics.MissedUnavailable), writes},
		{"informer lost unavailable", informer.value(metrics.EventsLost, metrics.MissedUnavailable), writes},
	})
	expectAnomalies(t, metrics.PathInformer, informer, nil) // no relist, no silent
	expectAnomalies(t, metrics.PathWatch, tp.path(metrics.PathWatch), nil)
}
