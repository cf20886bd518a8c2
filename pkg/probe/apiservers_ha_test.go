package probe

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// pinnedState is what one apiserver's path shows at a moment.
type pinnedState struct {
	observed, missed, stalled float64
}

func (tp *testProbe) pinnedState(addr string) pinnedState {
	var s pinnedState
	name, path := tp.cfg.Name, metrics.PathAPIServer
	for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		s.observed += tp.value(metrics.EventsObserved, name, path, addr, ev)
	}
	for _, r := range []string{metrics.MissedRelist, metrics.MissedUnavailable, metrics.MissedSilent} {
		s.missed += tp.value(metrics.EventsMissed, name, path, addr, r)
	}
	s.stalled = tp.value(metrics.WatchStalled, name, path, addr)
	return s
}

// exposedAPIServers lists the apiserver label values in the probe's
// registry, read without creating any series.
func (tp *testProbe) exposedAPIServers(t *testing.T) []string {
	t.Helper()
	families, err := tp.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "apiserver" && l.GetValue() != "" && !slices.Contains(out, l.GetValue()) {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// On a highly available control plane, per-apiserver paths name the sick
// apiserver: one whose etcd connection stalls, or whose process is frozen,
// shows stall and misses on its own path while the others deliver every
// write; it recovers when healed; an apiserver that leaves loses its path
// and series, and one that joins gains them.
func TestPerAPIServerPathsNameTheSickOne(t *testing.T) {
	t.Parallel()
	ha := localcluster.StartHAForTest(t, localcluster.HAOptions{APIServers: 3})
	apis := ha.APIServers()
	// Writes, discovery and the ordinary watch go through apiserver 1,
	// which stays healthy throughout, so that breaking apiserver 0 breaks
	// only its watch cache, never the writes.
	writer := apis[1].RESTConfig()
	client := kubernetes.NewForConfigOrDie(writer)
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ha"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig("ha", "ha")
	cfg.Interval = model.Duration(500 * time.Millisecond)
	cfg.Updates = 1
	cfg.Deadline = model.Duration(2 * time.Second)
	cfg.StallAfter = model.Duration(4 * time.Second)
	cfg.Paths = []string{metrics.PathWatch}
	cfg.APIServers = config.APIServersConfig{Discover: true, ServerName: ha.ServerName(), RetireAfter: model.Duration(5 * time.Minute),
		// A departed apiserver's series stay 2 s rather than minutes.
		SeriesGrace: model.Duration(2 * time.Second)}
	tp := startProbeWith(t, cfg, Options{Config: writer, Replica: "r1", OrphanAge: time.Hour})
	listed := func() []string {
		list, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{LabelSelector: kubernetesService})
		if err != nil {
			return nil
		}
		var items []*discoveryv1.EndpointSlice
		for i := range list.Items {
			items = append(items, &list.Items[i])
		}
		return endpointAddresses(items)
	}

	addrs := func(as ...*localcluster.APIServer) []string {
		var out []string
		for _, a := range as {
			out = append(out, a.Address())
		}
		slices.Sort(out)
		return out
	}
	states := func() map[string]pinnedState {
		m := map[string]pinnedState{}
		for _, a := range tp.pinned.addrs() {
			m[a] = tp.pinnedState(a)
		}
		return m
	}
	// healthy waits until every path in addrs has observed n more writes
	// than in from, and checks none of them missed one meanwhile.
	deliversAgain := func(t *testing.T, what string, from map[string]pinnedState, n float64, addrs ...string) {
		t.Helper()
		localcluster.EventuallyShows(t, 90*time.Second, what, func() bool {
			for _, a := range addrs {
				if s := tp.pinnedState(a); s.observed < from[a].observed+n || s.stalled != 0 {
					return false
				}
			}
			return true
		}, func() string {
			seen := fmt.Sprintf("paths for %v;", tp.pinned.addrs())
			for _, a := range addrs {
				seen += fmt.Sprintf(" %s %+v (from %+v)", a, tp.pinnedState(a), from[a])
			}
			return seen
		})
	}
	// sick breaks apiserver 0 with breakIt, expects its path alone to stall
	// and miss, heals it, and expects it to deliver again. With untilWithdrawn
	// the fault lasts until apiserver 0's endpoint lease has expired and the
	// others have withdrawn it: the path must stay, still reporting, since
	// that apiserver still holds whatever watches clients had on it.
	sick := func(t *testing.T, untilWithdrawn bool, breakIt, heal func() error) {
		bad, good := apis[0].Address(), []string{apis[1].Address(), apis[2].Address()}
		deliversAgain(t, "every path delivers before the fault", states(), 2, append(good, bad)...)
		before := states()
		if err := breakIt(); err != nil {
			t.Fatal(err)
		}
		broken := time.Now()
		// Stall is declared stall_after after the first unanswered write,
		// and misses a deadline after it: well within 30 s on a slow machine.
		localcluster.Eventually(t, 30*time.Second, "apiserver 0's path stalled and missing", func() bool {
			s := tp.pinnedState(bad)
			return s.stalled == 1 && s.missed > before[bad].missed
		})
		t.Logf("apiserver 0's path stalled and missed %.0f writes %s after the fault", tp.pinnedState(bad).missed-before[bad].missed, time.Since(broken).Round(time.Millisecond))
		healthy := func(when string) {
			t.Helper()
			for _, a := range good {
				if s := tp.pinnedState(a); s.missed != before[a].missed || s.stalled != 0 || s.observed <= before[a].observed {
					t.Errorf("healthy apiserver %s %s: %+v (before the fault: %+v), want more observed, no miss, no stall", a, when, s, before[a])
				}
			}
		}
		healthy("during the fault")
		if untilWithdrawn {
			localcluster.Eventually(t, 60*time.Second, "apiserver 0's endpoint withdrawn", func() bool {
				return !slices.Contains(listed(), bad)
			})
			missed := tp.pinnedState(bad).missed
			localcluster.Eventually(t, 30*time.Second, "apiserver 0's path kept and still counting misses after its withdrawal", func() bool {
				return tp.pinnedState(bad).missed > missed
			})
			if !slices.Contains(tp.pinned.addrs(), bad) {
				t.Fatalf("apiserver 0's path removed while the apiserver still accepts connections")
			}
			healthy("after apiserver 0's withdrawal")
		}
		if err := heal(); err != nil {
			t.Fatal(err)
		}
		deliversAgain(t, "apiserver 0's path delivers again after healing", states(), 3, bad)
		if untilWithdrawn {
			localcluster.Eventually(t, 60*time.Second, "apiserver 0's endpoint listed again", func() bool {
				return slices.Contains(listed(), bad)
			})
		}
		if got := tp.pinned.addrs(); !slices.Equal(got, addrs(apis...)) {
			t.Errorf("paths %v after healing, want %v", got, addrs(apis...))
		}
		healthy("after healing")
	}

	t.Run("every apiserver's path observes every write", func(t *testing.T) {
		localcluster.Eventually(t, 60*time.Second, "a path per apiserver", func() bool {
			return slices.Equal(tp.pinned.addrs(), addrs(apis...))
		})
		deliversAgain(t, "every path delivers", states(), 10, addrs(apis...)...)
		for _, a := range addrs(apis...) {
			if s := tp.pinnedState(a); s.missed != 0 || s.stalled != 0 {
				t.Errorf("%s: %+v, want no miss and no stall", a, s)
			}
		}
		if got := tp.exposedAPIServers(t); !slices.Equal(got, addrs(apis...)) {
			t.Errorf("series carry apiservers %v, want %v", got, addrs(apis...))
		}
		if got := tp.value(metrics.ProbeSuccess, cfg.Name); got != 1 {
			t.Errorf("probe_success %g, want 1", got)
		}
	})
	t.Run("stalled etcd connection", func(t *testing.T) {
		link := apis[0].EtcdLink()
		sick(t, true, func() error { link.Stall(); return nil }, func() error { link.Resume(); return nil })
	})
	t.Run("frozen apiserver", func(t *testing.T) {
		sick(t, false, apis[0].Freeze, apis[0].Thaw)
	})
	t.Run("an apiserver leaves and another joins", func(t *testing.T) {
		gone := apis[2]
		if err := gone.Stop(); err != nil {
			t.Fatal(err)
		}
		localcluster.EventuallyShows(t, 60*time.Second, "the stopped apiserver's path and series removed", func() bool {
			return !slices.Contains(tp.pinned.addrs(), gone.Address()) && !slices.Contains(tp.exposedAPIServers(t), gone.Address())
		}, func() string {
			return fmt.Sprintf("paths for %v, series for %v", tp.pinned.addrs(), tp.exposedAPIServers(t))
		})
		added, err := ha.AddAPIServer(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		want := addrs(apis[0], apis[1], added)
		localcluster.EventuallyShows(t, 90*time.Second, fmt.Sprintf("paths for %v", want), func() bool {
			return slices.Equal(tp.pinned.addrs(), want)
		}, func() string {
			return fmt.Sprintf("paths for %v; the EndpointSlice lists %v", tp.pinned.addrs(), listed())
		})
		deliversAgain(t, "the new apiserver's path delivers", states(), 3, added.Address())
		if got := tp.exposedAPIServers(t); !slices.Equal(got, want) {
			t.Errorf("series carry apiservers %v, want %v", got, want)
		}
		// It owes nothing for the writes sent while it was still listing,
		// so it misses none, and the probe succeeds.
		if s := tp.pinnedState(added.Address()); s.missed != 0 {
			t.Errorf("the new apiserver's path: %+v, want no miss", s)
		}
		localcluster.Eventually(t, 30*time.Second, "probe_success 1 with the new apiserver", func() bool {
			return tp.value(metrics.ProbeSuccess, cfg.Name) == 1
		})
	})
}
