package probe

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/tcpproxy"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// refusedAfter is how many refusals in a row make the judgement ask for
// a check over fresh connections (judge.refusedAfter).
const refusedAfter = 3

// refusals keeps the Refused outcomes a probe concluded.
type refusals struct {
	mu   sync.Mutex
	seen []judge.Outcome
}

func (r *refusals) Outcome(o judge.Outcome) {
	if o.Kind == judge.Refused && o.Reason != "" {
		r.mu.Lock()
		r.seen = append(r.seen, o)
		r.mu.Unlock()
	}
}

func (r *refusals) list() []judge.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]judge.Outcome(nil), r.seen...)
}

// One apiserver of two behind a load balancer refuses the markers' list
// and watch (403, as a stale authorization cache does), and the probe's
// client, as in the default install, has its one connection on it: every
// retry of its paths goes there and is refused. The second apiserver
// serves only the refusal checks (told apart by their User-Agent's
// suffix) and refuses the paths' own requests too, so that the paths stay
// refused should the client reconnect to it. The refusals are checked over
// fresh connections, which the round-robin load balancer sends to the
// second apiserver in turn, and it serves them: the refusal is the control
// plane's, the paths are down, never refused, and the writes due are
// missed there, never unmeasurable. Once the second apiserver refuses the
// checks too, a check is refused on every connection, and the paths are
// refused: the exporter's own.
func TestOneAPIServerRefusingBehindALoadBalancer(t *testing.T) {
	t.Parallel()
	ha := localcluster.StartHAForTest(t, localcluster.HAOptions{APIServers: 2})
	apis := ha.APIServers()
	ns := "lb-refused"
	admin := kubernetes.NewForConfigOrDie(apis[1].RESTConfig())
	if _, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refusing, serving := apis[0].FaultProxyForTest(t), apis[1].FaultProxyForTest(t)
	listOrWatch := requestIn(ns, "list", "watch")
	refusing.Refuse(1<<30, listOrWatch, http.StatusForbidden)
	// The other apiserver serves only the refusal checks: should the
	// probe's client open a new connection (a missed HTTP/2 health ping on
	// a loaded machine), the load balancer sends it there, and its paths
	// must still be refused wherever they go.
	serving.Refuse(1<<30, func(r faultproxy.Request) bool {
		return listOrWatch(r) && !strings.HasSuffix(r.UserAgent, refusalCheckSuffix)
	}, http.StatusForbidden)
	var targets []string
	for _, p := range []*faultproxy.Proxy{refusing, serving} {
		u, err := url.Parse(p.URL)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, u.Host)
	}
	// Each new connection goes to the next apiserver in turn, the first
	// to the refusing one.
	lb, err := tcpproxy.NewBalancer("127.0.0.1:0", func() []string { return targets })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lb.Close() })
	config := ha.RESTConfig()
	config.Host = "https://" + lb.Addr()

	cfg := fastConfig("lb", ns)
	cfg.Deadline = model.Duration(time.Second)
	log := &logTail{}
	seen := &refusals{}
	opts := Options{Config: config, Replica: "r1", OrphanAge: time.Hour,
		Logger: slog.New(slog.NewTextHandler(log, nil)), Sinks: []judge.Sink{seen}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the probe's last log lines:\n%s", log.String())
		}
	})
	// The probe's client opens its connection, the load balancer's first,
	// before its paths start, as a client that has run for a while holds
	// one: every request of the paths then goes over it.
	tp := startProbeWith(t, cfg, opts, func(p *Probe) {
		_, err := p.api.List(context.Background(), metav1.ListOptions{LabelSelector: markerSelector(cfg.Name, "r1")})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("the probe's first request: %v, want the refusing apiserver's 403", err)
		}
	})
	failed := func(path string) float64 {
		ps := tp.path(path)
		return ps.value(metrics.RequestsFailed, metrics.RequestList, "403") + ps.value(metrics.RequestsFailed, metrics.RequestWatch, "403")
	}

	t.Run("one apiserver refuses", func(t *testing.T) {
		// Each path refused past the point where it asks for checks.
		localcluster.EventuallyShows(t, 2*time.Minute, "paths refused", func() bool {
			return failed(metrics.PathInformer) > refusedAfter && failed(metrics.PathWatch) > refusedAfter
		}, func() string {
			return fmt.Sprintf("informer refused %g, watch %g", failed(metrics.PathInformer), failed(metrics.PathWatch))
		})
		// Writes due since then are judged on both paths, whatever the
		// verdict.
		judged := func(path string) float64 {
			ps := tp.path(path)
			return ps.missed() + ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)
		}
		before := map[string]float64{}
		for _, path := range cfg.Paths {
			before[path] = judged(path)
		}
		localcluster.Eventually(t, 2*time.Minute, "writes judged on both paths since", func() bool {
			for _, path := range cfg.Paths {
				if judged(path) < before[path]+2 {
					return false
				}
			}
			return true
		})
		if got := serving.Requests(); got < 1 {
			t.Errorf("the other apiserver got %d requests, want the checks'", got)
		}
		for _, o := range seen.list() {
			t.Errorf("%s judged refused (%s) while the other apiserver serves", o.Path.Label(), o.Reason)
		}
		for _, path := range cfg.Paths {
			ps := tp.path(path)
			for _, reason := range metrics.PathRefusals {
				if got := ps.value(metrics.PathRefused, reason); got != 0 {
					t.Errorf("%s: path_refused{%s} = %g, want 0", path, reason, got)
				}
			}
			if got := ps.value(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused); got != 0 {
				t.Errorf("%s: unmeasurable (path_refused) = %g, want 0: the control plane refused", path, got)
			}
			if got, want := ps.value(metrics.EventsMissed, metrics.MissedUnavailable), before[path]+2; got < want {
				t.Errorf("%s: missed (unavailable) = %g, want at least %g", path, got, want)
			}
			if got := ps.value(metrics.PathUp); got != 0 {
				t.Errorf("%s: path_up = %g, want 0: every request of the path is refused", path, got)
			}
		}
		if got := float64(refusing.Applied(faultproxy.Refuse) + serving.Applied(faultproxy.Refuse)); got < failed(metrics.PathInformer)+failed(metrics.PathWatch) {
			t.Errorf("the apiservers refused %g requests, fewer than the paths' %g refusals", got, failed(metrics.PathInformer)+failed(metrics.PathWatch))
		}
		wantLogged(t, log, "was served over a fresh connection")
	})

	t.Run("every apiserver refuses", func(t *testing.T) {
		serving.Refuse(1<<30, listOrWatch, http.StatusForbidden)
		localcluster.EventuallyShows(t, 3*time.Minute, "both paths refused", func() bool {
			return tp.path(metrics.PathInformer).value(metrics.PathRefused, metrics.PathForbidden) == 1 &&
				tp.path(metrics.PathWatch).value(metrics.PathRefused, metrics.PathForbidden) == 1
		}, func() string {
			return fmt.Sprintf("%d refused outcomes; the other apiserver refused %d requests", len(seen.list()), serving.Applied(faultproxy.Refuse))
		})
		unmeasurable := func(path string) float64 {
			return tp.path(path).value(metrics.EventsUnmeasurable, metrics.UnmeasurablePathRefused)
		}
		before := map[string]float64{}
		for _, path := range cfg.Paths {
			before[path] = unmeasurable(path)
		}
		localcluster.Eventually(t, 2*time.Minute, "writes unmeasurable on both paths", func() bool {
			for _, path := range cfg.Paths {
				if unmeasurable(path) < before[path]+2 {
					return false
				}
			}
			return true
		})
		// Only the checks reach the second apiserver: of the three fresh
		// connections of the check that confirmed, one at least went there.
		if got := serving.Applied(faultproxy.Refuse); got < 1 {
			t.Errorf("the other apiserver refused %d requests, want at least one check's", got)
		}
		for _, o := range seen.list() {
			if o.Err == nil || !strings.Contains(o.Err.Error(), "refused by faultproxy") {
				t.Errorf("refused for %v, want the fault proxy's 403", o.Err)
			}
		}
	})
}
