package probe

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/nativehist"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/paths"
)

// The addresses are what kube-proxy routes the kubernetes Service to:
// every ready or unknown endpoint, on the slice's port.
func TestEndpointAddresses(t *testing.T) {
	slice := func(port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Endpoints: eps, Ports: []discoveryv1.EndpointPort{{Port: ptr.To(port)}}}
	}
	ep := func(ready *bool, addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	got := endpointAddresses([]*discoveryv1.EndpointSlice{
		slice(6443, ep(nil, "10.0.0.2"), ep(ptr.To(true), "10.0.0.1"), ep(ptr.To(false), "10.0.0.3")),
		slice(6443, ep(nil, "fd00::1"), ep(nil, "10.0.0.1")),
	})
	want := []string{"10.0.0.1:6443", "10.0.0.2:6443", "[fd00::1]:6443"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// pinnedObserved sums what a probe's path pinned to addr observed and
// missed, read by the apiserver label.
func pinnedObserved(t *testing.T, tp *testProbe, addr string) (observed, missed float64) {
	t.Helper()
	for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		observed += tp.value(metrics.EventsObserved, tp.cfg.Name, metrics.PathAPIServer, addr, ev)
	}
	for _, r := range []string{metrics.MissedRelist, metrics.MissedUnavailable, metrics.MissedSilent} {
		missed += tp.value(metrics.EventsMissed, tp.cfg.Name, metrics.PathAPIServer, addr, r)
	}
	return observed, missed
}

// pinnedToLoopback is a probe with the watch path and a path pinned to the
// package's apiserver by its loopback address (its certificate names
// localhost), in a new namespace; it returns that address too.
func pinnedToLoopback(t *testing.T, name, namespace string) (config.Config, string) {
	t.Helper()
	localcluster.CreateNamespacesForTest(t, adminClient(t), namespace)
	addr := strings.TrimPrefix(cluster.APIServerURL, "https://")
	cfg := fastConfig(name, namespace)
	cfg.Paths = []string{metrics.PathWatch}
	cfg.APIServers = config.APIServersConfig{Endpoints: []string{addr}, ServerName: "localhost", RetireAfter: model.Duration(time.Minute), SeriesGrace: model.Duration(2 * time.Minute)}
	return cfg, addr
}

// A path pinned to an apiserver by address, beside the ordinary paths,
// observes every write exactly once, and its series carry the address.
func TestPinnedPathObservesEveryWrite(t *testing.T) {
	t.Parallel()
	cfg, addr := pinnedToLoopback(t, "pinned", "pinned")
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour)
	localcluster.Eventually(t, 60*time.Second, "the pinned path observes writes", func() bool {
		o, _ := pinnedObserved(t, tp, addr)
		return o >= 8
	})
	// A stop would cut the pinned stream with the last acknowledged write's
	// event on its way: the counts are compared once every write is seen.
	tp.drained(t)
	observed, missed := pinnedObserved(t, tp, addr)
	var acked uint64
	for _, verb := range []string{metrics.VerbCreate, metrics.VerbUpdate, metrics.VerbDelete} {
		acked += tp.acked(t, verb)
	}
	tp.stop()
	if missed != 0 || observed != float64(acked) {
		t.Errorf("pinned path: observed %g, missed %g; %d writes acknowledged", observed, missed, acked)
	}
	var hs []*dto.Histogram
	for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		hs = append(hs, tp.histogramOf(metrics.EventLatency, tp.cfg.Name, metrics.PathAPIServer, addr, ev))
	}
	compatP50(t, metrics.PathAPIServer, "", time.Duration(nativehist.Quantile(0.5, hs...)*float64(time.Second)))
	if got := tp.pinned.addrs(); !slices.Equal(got, []string{addr}) {
		t.Errorf("pinned paths %v, want [%s]", got, addr)
	}
}

// An apiserver is gone when a connection to it cannot be opened: refused,
// or no route to its node. One that accepts and then hangs is not.
func TestUnreachable(t *testing.T) {
	dial := func(err error) error {
		return &url.Error{Op: "Get", URL: "https://10.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{dial(syscall.ECONNREFUSED), true},
		{dial(syscall.EHOSTUNREACH), true},
		{dial(os.ErrDeadlineExceeded), true},
		{&url.Error{Op: "Get", URL: "https://10.0.0.1:6443", Err: errors.New("net/http: TLS handshake timeout")}, false},
		{&url.Error{Op: "Get", URL: "https://10.0.0.1:6443", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, false},
		{paths.ErrNoStream, false},
	} {
		if got := unreachable(tc.err); got != tc.want {
			t.Errorf("unreachable(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

// With KeepRetiredSeries (watchprobe check), the series of an apiserver
// that left stay for the whole run, past the grace after which the
// exporter deletes them; when the apiserver comes back, its path goes on
// from its counts rather than from zero.
func TestPinnedPathKeepsRetiredSeries(t *testing.T) {
	t.Parallel()
	cfg, addr := pinnedToLoopback(t, "keep", "pinned-keep")
	// A path withdrawn is retired at the next reconcile; its series would
	// go a tenth of a second later but for KeepRetiredSeries.
	cfg.APIServers.RetireAfter = model.Duration(time.Nanosecond)
	cfg.APIServers.SeriesGrace = model.Duration(100 * time.Millisecond)
	tp := startProbeWith(t, cfg, Options{
		Config: cluster.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, KeepRetiredSeries: true,
	})
	pinnedLabels := map[string]string{"probe": "keep", "path": metrics.PathAPIServer, "apiserver": addr}
	observed := func() float64 {
		families, err := exportertest.Gather(tp.registry)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := exportertest.Sum(families, "watchprobe_events_observed_total", pinnedLabels)
		return v
	}
	localcluster.Eventually(t, 60*time.Second, "the pinned path observes writes", func() bool { return observed() >= 6 })

	// The apiserver leaves the list, and stays out past RetireAfter.
	localcluster.Eventually(t, 10*time.Second, "the path retired once its apiserver left", func() bool {
		tp.pinned.reconcile(context.Background(), nil, time.Now())
		return len(tp.pinned.addrs()) == 0
	})
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
