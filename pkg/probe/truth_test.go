package probe

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// What the exporter reports is what happened on the wire. Each test injects
// a known number of a known fault through the proxy, or takes a permission
// away, and asserts the exact count under the exact label.

func requestIn(ns string, kinds ...string) faultproxy.RequestMatch {
	return func(r faultproxy.Request) bool {
		if r.Namespace != ns {
			return false
		}
		for _, k := range kinds {
			if r.Kind == k {
				return true
			}
		}
		return false
	}
}

// proxiedPath starts a probe named name with path as its only path, sent
// through a fault proxy of its own, in a namespace of its own, and waits
// until the path has synced.
func proxiedPath(t *testing.T, name, path string, edit func(*config.Config)) (*testProbe, *faultproxy.Proxy, exposedPath) {
	t.Helper()
	tp, proxy := proxiedProbe(t, name, name+"-"+path, path, func(cfg *config.Config) {
		cfg.Paths = []string{path}
		if edit != nil {
			edit(cfg)
		}
	})
	localcluster.Eventually(t, 60*time.Second, "path synced", tp.ready)
	return tp, proxy, tp.path(path)
}

// expectEnds fails unless the path's streams ended exactly as want says,
// and for no other reason.
func expectEnds(t *testing.T, path string, ps exposedPath, want map[string]float64) {
	t.Helper()
	for reason, got := range ps.ends() {
		if got != want[reason] {
			t.Errorf("%s: watch ends (%s) = %g, want %g", path, reason, got, want[reason])
		}
	}
}

// An ERROR event carrying 410 Expired ends the stream as expired and is
// followed by exactly one relist for that reason, whoever closes the stream
// after it: client-go's reflector stops it at once, and that stop used to be
// counted as the client's.
func TestInStreamExpiredCountedExactly(t *testing.T) {
	t.Parallel() // the informer backs off before each relist: minutes, spent beside the other long tests
	client := adminClient(t)
	const n = 10
	onEveryPath(t, func(t *testing.T, path string) {
		tp, proxy, ps := proxiedPath(t, "expired", path, nil)
		ns := tp.cfg.Namespace
		for i := 1; i <= n; i++ {
			// One at a time, each once the path is live again, so that
			// none lands inside the relist of the one before.
			proxy.Expire(1, modifiedIn(ns))
			localcluster.Eventually(t, 120*time.Second, fmt.Sprintf("expired relist %d", i), func() bool {
				return tp.path(path).relists(metrics.RelistExpired) == float64(i) && ps.value(metrics.PathUp) == 1
			})
		}
		if got := proxy.Applied(faultproxy.Expire); got != n {
			t.Fatalf("%d 410s injected, want %d", got, n)
		}
		expectEnds(t, path, ps, map[string]float64{metrics.EndExpired: n})
		for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistExpired: n, metrics.RelistError: 0} {
			if got := tp.path(path).relists(reason); got != want {
				t.Errorf("relists (%s) = %g, want %g", reason, got, want)
			}
		}
		if got := ps.value(metrics.EventsDuplicate) + ps.value(metrics.EventsOutOfOrder); got != 0 {
			t.Errorf("%g duplicates or reorderings around relists", got)
		}
		tp.stop()
		if ends := ps.ends(); ends[metrics.EndClient] != 1 {
			t.Errorf("client ends after the probe's own shutdown = %g, want 1; all ends: %v", ends[metrics.EndClient], ends)
		}
		assertNoMarkers(t, client, ns, "expired", "")
	})
}

// A stream that the server ends cleanly at its timeout but that reaches the
// client cut (no end of the response) is an eof, not a timeout: the end is
// read from the response body, not guessed from the lifetime.
func TestCutAtTimeoutIsEOF(t *testing.T) {
	const n = 3
	onEveryPath(t, func(t *testing.T, path string) {
		_, proxy, ps := proxiedPath(t, "cutend", path, func(cfg *config.Config) { cfg.WatchTimeout = model.Duration(2 * time.Second) })
		proxy.CutAtEnd(n, requestIn("cutend-"+path, "watch"))
		localcluster.Eventually(t, 60*time.Second, "cut streams, then a timeout", func() bool {
			return proxy.Applied(faultproxy.CutAtEnd) == n && ps.value(metrics.WatchRestarts, metrics.EndTimeout) >= 1
		})
		if got := ps.value(metrics.WatchRestarts, metrics.EndEOF); got != n {
			t.Errorf("eof ends = %g, want %d: every cut at the timeout", got, n)
		}
		for _, reason := range []string{metrics.EndClient, metrics.EndClosedEarly, metrics.EndError, metrics.EndExpired} {
			if got := ps.value(metrics.WatchRestarts, reason); got != 0 {
				t.Errorf("%s ends = %g, want 0", reason, got)
			}
		}
	})
}

// Every 429 is counted, by path or write and request kind, although
// client-go retries each one by itself and the caller never sees it.
func TestThrottlingCounted(t *testing.T) {
	ns := "throttled"
	inNamespace(t, ns)
	proxy := newProxy(t, cluster)
	const watches, creates, updates = 3, 2, 1
	proxy.Throttle(watches, requestIn(ns, "watch"))
	proxy.Throttle(creates, requestIn(ns, "create"))
	proxy.Throttle(updates, requestIn(ns, "patch")) // an update patches the probe's own annotation
	cfg := fastConfig("throttled", ns)
	tp := startProbe(t, proxy.Config(cluster.AdminConfig()), cfg, "r1", time.Hour)
	localcluster.Eventually(t, 60*time.Second, "every 429 sent", func() bool {
		return proxy.Applied(faultproxy.Throttle) == watches+creates+updates
	})
	tp.settled(t, 3)
	var gotWatches float64
	for _, path := range config.DefaultPaths {
		ps := tp.path(path)
		gotWatches += ps.value(metrics.RequestsThrottled, metrics.RequestWatch)
		if got := ps.value(metrics.RequestsThrottled, metrics.RequestList); got != 0 {
			t.Errorf("%s: throttled lists = %g, want 0", path, got)
		}
		expectAnomalies(t, path, ps, nil)
	}
	if gotWatches != watches {
		t.Errorf("throttled watch requests = %g, want %d", gotWatches, watches)
	}
	for request, want := range map[string]float64{metrics.RequestCreate: creates, metrics.RequestUpdate: updates, metrics.RequestDelete: 0, metrics.RequestList: 0} {
		if got := tp.path(metrics.SourceWrite).value(metrics.RequestsThrottled, request); got != want {
			t.Errorf("throttled %s writes = %g, want %g", request, got, want)
		}
	}
	if n := tp.sum(metrics.WriteErrors); n != 0 {
		t.Errorf("%g write errors: the retried 429s succeeded", n)
	}
	// The throttled creates waited Retry-After (1 s) before the attempt the
	// apiserver took: their round trips hold the wait, their events'
	// latencies, timed from that attempt, do not.
	// (The proxy refuses the next requests that match, so one create may
	// take both refusals and wait twice.)
	if slow := above(tp.histogramOf(metrics.WriteDuration, cfg.Name, metrics.VerbCreate), 1); slow < 1 {
		t.Error("no create round trip of 1 s or more: the creates were not throttled")
	}
	for _, path := range config.DefaultPaths {
		if slow := above(tp.path(path).histogram(metrics.EventLatency, metrics.EventAdded), 0.5); slow != 0 {
			t.Errorf("%s: %d created events timed at over 0.5 s: a throttled create was timed from its refused attempt", path, slow)
		}
	}
}

// above counts the observations of h over bound, a classic bucket bound.
func above(h *dto.Histogram, bound float64) uint64 {
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == bound {
			return h.GetSampleCount() - b.GetCumulativeCount()
		}
	}
	panic(fmt.Sprintf("no bucket bound %g", bound))
}

// A create whose response is lost after the apiserver committed it is a
// failed write: its events are counted apart, never timed, and its marker is
// deleted in the background while the cycles go on.
func TestLostCreateResponseCleanedUp(t *testing.T) {
	ns := "lost-response"
	client := inNamespace(t, ns)
	proxy := newProxy(t, cluster)
	proxy.LoseResponse(1, requestIn(ns, "create"))
	cfg := fastConfig("lost", ns)
	tp := startProbe(t, proxy.Config(cluster.AdminConfig()), cfg, "r1", time.Hour)
	localcluster.Eventually(t, 60*time.Second, "the response lost", func() bool { return proxy.Applied(faultproxy.LoseResponse) == 1 })
	first := fmt.Sprintf(markerNamePattern, cfg.Name, "r1", tp.run, 1)
	localcluster.Eventually(t, 30*time.Second, "the committed marker deleted", func() bool {
		_, err := client.CoreV1().ConfigMaps(ns).Get(context.Background(), first, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && tp.value(metrics.MarkersPendingDeletion, cfg.Name) == 0
	})
	tp.settled(t, 3)
	tp.drained(t)
	snap := tp.at()
	if got := snap.value(metrics.WriteErrors, cfg.Name, metrics.VerbCreate, "0"); got != 1 {
		t.Errorf("create errors (no response) = %g, want 1", got)
	}
	for _, path := range config.DefaultPaths {
		ps := snap.path(path)
		if got := ps.value(metrics.EventsAfterFailedWrite); got != 1 {
			t.Errorf("%s: events after failed writes = %g, want 1 (the lost create's ADDED)", path, got)
		}
		acked := snap.acked(t, metrics.VerbCreate)
		if got := ps.histogram(metrics.EventLatency, metrics.EventAdded).GetSampleCount(); got != acked {
			t.Errorf("%s: added latency samples = %d, acknowledged creates %d", path, got, acked)
		}
		expectAnomalies(t, path, ps, nil)
	}
}

// grant makes a user whose client certificate the test CA signs, with only
// verbs on the marker ConfigMaps of ns.
func grant(t *testing.T, client kubernetes.Interface, ns, user string, verbs ...string) *rest.Config {
	t.Helper()
	grantTo(t, client, ns, user, rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}, verbs...)
	cfg, err := cluster.ClientCertConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// grantTo lets subject use verbs on ConfigMaps in ns, by a Role and a
// RoleBinding named name.
func grantTo(t *testing.T, client kubernetes.Interface, ns, name string, subject rbacv1.Subject, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: verbs}},
	}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// With delete forbidden, every marker waits for deletion in the background:
// the cycles go on without waiting for it, and the gauge shows the backlog.
func TestDeleteForbiddenKeepsSchedule(t *testing.T) {
	ctx := context.Background()
	ns := "no-delete"
	client := inNamespace(t, ns)
	config, err := cluster.ServiceAccountConfig(ctx, ns, "no-delete")
	if err != nil {
		t.Fatal(err)
	}
	grantTo(t, client, ns, "no-delete", rbacv1.Subject{Kind: "ServiceAccount", Name: "no-delete", Namespace: ns}, "get", "list", "watch", "create", "patch")
	// The apiserver refuses each marker's first delete, the cycle's own;
	// every later one, the cleaner's, never returns (until its timeout).
	// A cycle loop that waited for the cleaner would wait that long
	// (cleanupTimeout) for each cycle.
	proxy := newProxy(t, cluster)
	var mu sync.Mutex
	tried := map[string]bool{}
	proxy.Hold(math.MaxInt32, func(r faultproxy.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		retry := r.Kind == "delete" && tried[r.Name]
		tried[r.Name] = tried[r.Name] || r.Kind == "delete"
		return retry
	})
	cfg := fastConfig("nodelete", ns)
	cfg.Interval = model.Duration(200 * time.Millisecond)
	tp := startProbe(t, proxy.Config(config), cfg, "r1", time.Hour)
	t.Cleanup(proxy.Release) // a failed test's probe stops without waiting on them
	localcluster.Eventually(t, 60*time.Second, "probe synced", tp.ready)
	tp.settled(t, 1)
	start, before := time.Now(), tp.acked(t, metrics.VerbCreate)
	localcluster.Eventually(t, 60*time.Second, "ten more cycles while the cleaner's deletes hang", func() bool {
		return tp.acked(t, metrics.VerbCreate) >= before+10
	})
	t.Logf("ten cycles took %s at a %s interval", time.Since(start).Round(time.Millisecond), time.Duration(cfg.Interval))
	// No more markers once the writes stop: the gauge and the list that
	// follows count the same ones.
	tp.StopWriting()
	localcluster.Eventually(t, 60*time.Second, "the writes drained", tp.Drained)
	if got, want := tp.value(metrics.WritesRefused, cfg.Name, metrics.VerbDelete, metrics.RefusedForbidden), float64(tp.acked(t, metrics.VerbCreate)); got != want {
		t.Errorf("forbidden deletes = %g, want one for each of the %g markers created", got, want)
	}
	if got := tp.sum(metrics.WriteErrors); got != 0 {
		t.Errorf("write errors = %g, want 0: a forbidden delete is refused, not the control plane's failure", got)
	}
	pending := tp.value(metrics.MarkersPendingDeletion, cfg.Name)
	markers, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: markerSelector(cfg.Name, "r1")})
	if err != nil {
		t.Fatal(err)
	}
	// Every marker left is queued for deletion, and only those.
	if n := float64(len(markers.Items)); pending != n {
		t.Errorf("markers pending deletion = %g, markers left = %g", pending, n)
	}
	proxy.Release()
	tp.stop()
	if err := client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: markerSelector(cfg.Name, "")}); err != nil {
		t.Fatal(err)
	}
}

// One relist is one relist, however many attempts it takes: a 410 followed
// by refused list and watch requests is one expired relist, not a storm, and
// the refused attempts are counted as failed requests.
func TestRelistCountedOnceAcrossAttempts(t *testing.T) {
	const refused = 4
	onEveryPath(t, func(t *testing.T, path string) {
		tp, proxy, ps := proxiedPath(t, "relistonce", path, nil)
		ns := tp.cfg.Namespace
		proxy.Refuse(refused, requestIn(ns, "list", "watch"), 503)
		proxy.Expire(1, modifiedIn(ns))
		localcluster.Eventually(t, 120*time.Second, "refusals used up and the path live", func() bool {
			return proxy.Applied(faultproxy.Refuse) == refused && ps.value(metrics.PathUp) == 1
		})
		for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistExpired: 1, metrics.RelistError: 0} {
			if got := tp.path(path).relists(reason); got != want {
				t.Errorf("relists (%s) = %g, want %g", reason, got, want)
			}
		}
		failed := tp.value(metrics.RequestsFailed, tp.cfg.Name, path, "", metrics.RequestList, "503") +
			tp.value(metrics.RequestsFailed, tp.cfg.Name, path, "", metrics.RequestWatch, "503")
		if failed != refused {
			t.Errorf("failed requests (503) = %g, want %d", failed, refused)
		}
		expectEnds(t, path, ps, map[string]float64{metrics.EndExpired: 1})
	})
}

// After an out-of-order delivery the watch path resumes from the newest
// resourceVersion it saw, so the server does not deliver again what already
// arrived, and nothing is counted as a duplicate. Each reordered pair is the
// last thing its stream delivers: the stream is cut right after it, before
// any bookmark could move the resume point on.
func TestResumeAfterReorderNoDuplicates(t *testing.T) {
	tp, proxy, ps := proxiedPath(t, "reorderresume", metrics.PathWatch, func(cfg *config.Config) {
		cfg.Updates = 1 // ADDED, MODIFIED, DELETED: the reordered MODIFIED comes last
		cfg.Interval = model.Duration(2 * time.Second)
	})
	ns := tp.cfg.Namespace
	const n = 3
	for i := 1; i <= n; i++ {
		proxy.Reorder(1, modifiedIn(ns))
		// Counted out of order once the held event was sent after the next.
		localcluster.Eventually(t, 30*time.Second, "reorder delivered", func() bool { return ps.value(metrics.EventsOutOfOrder) == float64(i) })
		proxy.CutConnections()
		localcluster.Eventually(t, 30*time.Second, "resumed after the cut", func() bool {
			return ps.value(metrics.WatchRestarts, metrics.EndEOF) == float64(i) && ps.value(metrics.PathUp) == 1
		})
	}
	tp.settled(t, int(tp.acked(t, metrics.VerbCreate))+1)
	expectAnomalies(t, metrics.PathWatch, ps, map[string]float64{"out_of_order": n})
}

// A watch request whose connection is lost before any response is not a
// stream, although client-go then hands out an empty watch and no error:
// the path is out with its requests failing, its misses are unavailable, and
// no stream end or lifetime is recorded for it.
func TestWatchWithoutResponseIsAFailedRequest(t *testing.T) {
	tp, proxy, ps := proxiedPath(t, "noresponse", metrics.PathWatch, func(cfg *config.Config) { cfg.Deadline = model.Duration(time.Second) })
	ns, cfg := tp.cfg.Namespace, tp.cfg
	proxy.LoseResponse(1<<30, requestIn(ns, "watch"))
	proxy.CutConnections()
	localcluster.Eventually(t, 60*time.Second, "a watch request without response", func() bool {
		return tp.value(metrics.RequestsFailed, cfg.Name, metrics.PathWatch, "", metrics.RequestWatch, "0") >= 1
	})
	if err := tp.Synced(); err == nil || !strings.Contains(err.Error(), "no response") {
		t.Errorf("readiness error %v, want one that says the watch got no response", err)
	}
	if got := ps.value(metrics.PathUp); got != 0 {
		t.Errorf("path_up = %g while no watch gets a response", got)
	}
	localcluster.Eventually(t, 30*time.Second, "misses counted", func() bool { return ps.missed() >= 1 })
	snap := ps.at()
	if got, all := snap.value(metrics.EventsMissed, metrics.MissedUnavailable), snap.missed(); got != all {
		t.Errorf("%g of %g misses are unavailable", got, all)
	}
	proxy.Clear()
	localcluster.Eventually(t, 60*time.Second, "live again", func() bool { return ps.value(metrics.PathUp) == 1 })
	// One stream ended: the one cut. The empty watches are no streams.
	expectEnds(t, metrics.PathWatch, ps, map[string]float64{metrics.EndEOF: 1})
	if got := ps.histogram(metrics.WatchDuration).GetSampleCount(); got != 1 {
		t.Errorf("%d watch lifetimes recorded, want 1 (the cut stream)", got)
	}
}

// A LIST that never gets an answer is bounded: a proxy, a load balancer or
// a half-open connection can hold one for ever, and the watch path used to
// wait in that relist for ever, up never again and counting nothing but
// misses. The fault proxy holds the relist's LIST after an in-stream 410;
// the list timeout ends it, it counts as one failed list request with no
// response, the retry belongs to the same relist, and the path is live again.
func TestHeldListBoundedAndCounted(t *testing.T) {
	t.Parallel() // the held LIST waits out the list timeout
	path := metrics.PathWatch
	ns := "heldlist-" + path
	localcluster.CreateNamespacesForTest(t, adminClient(t), ns)
	proxy := newProxy(t, cluster)
	cfg := fastConfig("heldlist", ns)
	cfg.Paths = []string{path}
	opts := Options{Config: cluster.AdminConfig(), Replica: "r1", OrphanAge: time.Hour}
	tp := startProbeWith(t, cfg, opts,
		func(p *Probe) { p.routePath(t, path, proxy.Config(cluster.AdminConfig())) })
	ps := tp.path(path)
	localcluster.Eventually(t, 60*time.Second, "path synced", tp.ready)

	proxy.Hold(1, requestIn(ns, "list"))
	proxy.Expire(1, modifiedIn(ns))
	// The list timeout, 70 s, is far above what a LIST of a few markers
	// takes on loopback: only the held one reaches it.
	localcluster.Eventually(t, 3*time.Minute, "relisted past the held LIST and live again", func() bool {
		return proxy.Applied(faultproxy.Hold) == 1 && tp.path(path).relists(metrics.RelistExpired) == 1 && ps.value(metrics.PathUp) == 1
	})
	if got := tp.value(metrics.RequestsFailed, cfg.Name, path, "", metrics.RequestList, "0"); got != 1 {
		t.Errorf("failed list requests without response = %g, want 1: the held LIST", got)
	}
	if got := tp.value(metrics.RequestsFailed, cfg.Name, path, "", metrics.RequestWatch, "0"); got != 0 {
		t.Errorf("failed watch requests = %g, want 0", got)
	}
	for reason, want := range map[string]float64{metrics.RelistInitial: 1, metrics.RelistExpired: 1, metrics.RelistError: 0} {
		if got := tp.path(path).relists(reason); got != want {
			t.Errorf("relists (%s) = %g, want %g: the retried LIST is the same relist", reason, got, want)
		}
	}
	expectEnds(t, path, ps, map[string]float64{metrics.EndExpired: 1})
	tp.stopLeavingNoMarkers(t, adminClient(t))
}

// relistRecord keeps what one relist verdict test needs of a probe's
// outcomes: when each write was sent, which writes each path delivered and
// which it lost, and when its expired stream ended and its relist completed.
type relistRecord struct {
	mu        sync.Mutex
	sent      map[uint64]time.Time
	arrived   map[uint64]bool
	lost      map[uint64]string // reason
	ended     time.Time         // the expired stream's end
	relistEnd time.Time         // the relist after it
}

func (r *relistRecord) Outcome(o judge.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch o.Kind {
	case judge.Sent:
		r.sent[o.Seq] = o.At
	case judge.Arrived:
		r.arrived[o.Seq] = true
	case judge.Lost:
		r.lost[o.Seq] = o.Reason
	case judge.StreamEnded:
		if o.Reason == metrics.EndExpired {
			r.ended = o.At
		}
	case judge.RelistDone:
		if !r.ended.IsZero() && r.relistEnd.IsZero() {
			r.relistEnd = o.At
		}
	}
}

// One 410 after a few cuts gets one verdict on every path kind: the writes
// whose events the relist replaced with final state are missed and lost
// for the relist, never timed, and nothing else is; each was sent before
// the relist completed and not before the write whose event the 410
// replaced. The cuts do not make the relist wait: a live stream resets a
// path's backoff, and a 410 is relisted at once (the informer waits as
// client-go's reflector does).
func TestRelistVerdictOnEveryPath(t *testing.T) {
	for _, path := range []string{metrics.PathInformer, metrics.PathWatch, metrics.PathAPIServer} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			ns := "relist-" + path
			localcluster.CreateNamespacesForTest(t, adminClient(t), ns)
			proxy := newProxy(t, cluster)
			cfg := fastConfig("relist", ns)
			cfg.Interval = model.Duration(100 * time.Millisecond)
			// Longer than the informer's wait before its relist, so that a
			// miss is judged once the relist has begun.
			cfg.Deadline = model.Duration(3 * time.Second)
			cfg.LostAfter = model.Duration(6 * time.Second)
			rec := &relistRecord{sent: map[uint64]time.Time{}, arrived: map[uint64]bool{}, lost: map[uint64]string{}}
			opts := Options{Config: cluster.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{&onPath{path: path, sink: rec}}}
			var before []func(*Probe)
			if path == metrics.PathAPIServer {
				cfg.Paths = []string{metrics.PathWatch}
				cfg.APIServers = config.APIServersConfig{Endpoints: []string{strings.TrimPrefix(proxy.URL, "https://")}, ServerName: "localhost", RetireAfter: model.Duration(time.Hour), SeriesGrace: model.Duration(2 * time.Minute)}
			} else {
				cfg.Paths = []string{path}
				before = append(before, routed(t, through(t, proxy, path)))
			}
			tp := startProbeWith(t, cfg, opts, before...)
			localcluster.Eventually(t, 60*time.Second, "paths synced", func() bool { return tp.ready() && (tp.pinned == nil || tp.pinned.synced()) })
			// Each cut once the stream has delivered an event: client-go's
			// reflector takes a stream cut within a second with nothing
			// on it for an error, and backs off and relists.
			eventOnStream := func(what string) {
				var ps exposedPath
				var observed float64
				localcluster.Eventually(t, 60*time.Second, what+": live", func() bool {
					var ok bool
					if ps, ok = tp.pathOf(path); !ok || ps.value(metrics.PathUp) != 1 {
						return false
					}
					observed = ps.value(metrics.EventsObserved, metrics.EventModified)
					return true
				})
				localcluster.Eventually(t, 60*time.Second, what+": an event on the stream", func() bool {
					return ps.value(metrics.EventsObserved, metrics.EventModified) > observed
				})
			}
			for i := 1; i <= 3; i++ {
				eventOnStream(fmt.Sprint("before cut ", i))
				proxy.CutConnections()
			}
			eventOnStream("after the cuts")
			proxy.Expire(1, modifiedIn(ns))
			localcluster.Eventually(t, 60*time.Second, "the 410 relisted", func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return !rec.relistEnd.IsZero()
			})
			after := tp.acked(t, metrics.VerbCreate)
			tp.settled(t, int(after)+3)
			tp.resolved(t)
			ps, ok := tp.pathOf(path)
			if !ok {
				t.Fatalf("no %s path", path)
			}
			if path == metrics.PathAPIServer {
				tp.resolvedOn(t, ps)
			}
			tp.stop()

			probetest.WantCounts(t, []probetest.Count{
				{"relists (expired)", ps.relists(metrics.RelistExpired), 1},
				{"relists (error)", ps.relists(metrics.RelistError), 0},
				{"late", ps.value(metrics.EventsLate), 0},
				{"missed (silent)", ps.value(metrics.EventsMissed, metrics.MissedSilent), 0},
				{"lost (silent)", ps.value(metrics.EventsLost, metrics.MissedSilent), 0},
				{"lost (unavailable)", ps.value(metrics.EventsLost, metrics.MissedUnavailable), 0},
				// A miss judged before the relist began, while the path
				// waited for it, says unavailable; the loss, relist.
				{"lost (relist) = missed", ps.value(metrics.EventsLost, metrics.MissedRelist), ps.missed()},
				{"duplicates", ps.value(metrics.EventsDuplicate), 0},
			})
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.lost) == 0 {
				t.Error("nothing lost: the write whose event the 410 replaced was delivered")
			}
			// The relist replaced one stretch of events: the writes lost are
			// consecutive, every one between the first and the last.
			var first, last time.Time
			for seq := range rec.lost {
				at := rec.sent[seq]
				if first.IsZero() || at.Before(first) {
					first = at
				}
				last = judge.Later(last, at)
			}
			for seq, at := range rec.sent {
				if !at.Before(first) && !at.After(last) && rec.lost[seq] == "" {
					t.Errorf("write %d, sent between the first and the last write lost for the relist, was not lost", seq)
				}
			}
			t.Logf("%s: %d writes lost for the relist; the relist completed %v after the 410", path, len(rec.lost), rec.relistEnd.Sub(rec.ended))
			assertNoMarkers(t, adminClient(t), ns, "relist", "")
		})
	}
}

// onPath passes on to sink the outcomes of path name and the probe's own.
type onPath struct {
	path string
	sink judge.Sink
}

func (o *onPath) Outcome(out judge.Outcome) {
	if out.Path == nil || out.Path.Name == o.path {
		o.sink.Outcome(out)
	}
}

// pathOf is the probe's path name: a configured one, or the first pinned
// to an apiserver, which is not there until it is added.
func (tp *testProbe) pathOf(name string) (exposedPath, bool) {
	if name != metrics.PathAPIServer {
		return tp.path(name), true
	}
	if addrs := tp.pinned.addrs(); len(addrs) > 0 {
		return tp.pinnedPath(addrs[0]), true
	}
	return exposedPath{}, false
}

// onEveryPath runs f for each of the default paths, as parallel subtests
// named after the path.
func onEveryPath(t *testing.T, f func(t *testing.T, path string)) {
	for _, path := range config.DefaultPaths {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			f(t, path)
		})
	}
}
