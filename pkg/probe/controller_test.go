package probe

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// The controller probes against a real kube-controller-manager, one per
// test with a lease of its own, on the package's control plane. Each test
// injects one fault into the controller-manager, never into the apiserver,
// and asserts counts: every change reacted to or lost, every miss late or
// lost, never a latency. Last, the marker objects' shape, without a
// cluster.

var testControllers = []string{metrics.ControllerDeployment, metrics.ControllerReplicaSet}

// controllerRuns numbers the namespaces of the controller tests, so that
// -count repeats them on the package's one control plane.
var controllerRuns atomic.Int32

// startControllerProbe starts a probe of both controllers in a namespace
// of its own.
func startControllerProbe(t *testing.T, name string) *testProbe {
	t.Helper()
	client := adminClient(t)
	if n := controllerRuns.Add(1); n > 1 {
		name = fmt.Sprintf("%s-%d", name, n)
	}
	localcluster.CreateNamespacesForTest(t, client, name)
	cfg := fastConfig(name, name)
	cfg.Interval = model.Duration(250 * time.Millisecond)
	cfg.Updates = 1
	cfg.Deadline = model.Duration(3 * time.Second)
	cfg.StallAfter = model.Duration(20 * time.Second)
	cfg.LostAfter = model.Duration(time.Minute)
	cfg.Controllers = testControllers
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour)
	localcluster.Eventually(t, 60*time.Second, "the probe ready", tp.ready)
	return tp
}

// reactionCounts are one controller's counters; missed and lost summed
// over their reasons, undelivered the misses not the controller's.
type reactionCounts struct {
	changes, reacted, missed, late, lost, undelivered float64
}

func (tp *testProbe) reactions(ctl string) reactionCounts {
	name := tp.cfg.Name
	return reactionCounts{
		changes:     tp.value(metrics.ControllerChanges, name, ctl),
		reacted:     float64(tp.histogramOf(metrics.ControllerReaction, name, ctl).GetSampleCount()),
		missed:      tp.overReasons(metrics.ReactionsMissed, ctl),
		late:        tp.value(metrics.ReactionsLate, name, ctl),
		lost:        tp.overReasons(metrics.ReactionsLost, ctl),
		undelivered: tp.value(metrics.ReactionsMissed, name, ctl, metrics.ReactionUndelivered),
	}
}

// overReasons sums a probe's controller counter over its reasons.
func (tp *testProbe) overReasons(f *metrics.Family, ctl string) (n float64) {
	for _, r := range metrics.ReactionReasons {
		n += tp.value(f, tp.cfg.Name, ctl, r)
	}
	return n
}

func histogramMean(h *dto.Histogram) time.Duration {
	if h.GetSampleCount() == 0 {
		return 0
	}
	return time.Duration(h.GetSampleSum() / float64(h.GetSampleCount()) * float64(time.Second)).Round(10 * time.Microsecond)
}

// awaitReactions waits until every controller has reacted to n more
// changes than it had in from.
func (tp *testProbe) awaitReactions(t *testing.T, n float64, from map[string]reactionCounts) {
	t.Helper()
	tp.awaitEach(t, 90*time.Second, "reactions", func(c reactionCounts) float64 { return c.reacted }, n, from)
}

// awaitMisses waits until every controller has missed n more reactions
// than it had in from.
func (tp *testProbe) awaitMisses(t *testing.T, n float64, from map[string]reactionCounts) {
	t.Helper()
	tp.awaitEach(t, 60*time.Second, "misses", func(c reactionCounts) float64 { return c.missed }, n, from)
}

// awaitEach waits, up to timeout for each, until every controller's count
// of what is n more than in from.
func (tp *testProbe) awaitEach(t *testing.T, timeout time.Duration, what string, count func(reactionCounts) float64, n float64, from map[string]reactionCounts) {
	t.Helper()
	for _, ctl := range testControllers {
		localcluster.EventuallyShows(t, timeout, fmt.Sprintf("%v more %s of %s", n, what, ctl), func() bool {
			return count(tp.reactions(ctl)) >= count(from[ctl])+n
		}, func() string { return fmt.Sprintf("%+v", tp.reactions(ctl)) })
	}
}

// allReactions are every controller's counts at one instant, so that
// they can be compared with each other.
func (tp *testProbe) allReactions() map[string]reactionCounts {
	snap := tp.at()
	out := map[string]reactionCounts{}
	for _, ctl := range testControllers {
		out[ctl] = snap.reactions(ctl)
	}
	return out
}

// drainReactions stops the changes and waits until every change sent has
// been reacted to or counted lost, so that the counts can be compared
// exactly.
func (tp *testProbe) drainReactions(t *testing.T) map[string]reactionCounts {
	t.Helper()
	tp.StopWriting()
	// Every change answered is reacted to or lost, and every miss late or
	// lost, once the counts say so; a change counted twice keeps them from
	// ever saying so.
	var counts map[string]reactionCounts
	localcluster.Eventually(t, 2*time.Minute, "every change reacted to or lost", func() bool {
		if tp.tracker.Pending() != 0 {
			return false
		}
		counts = tp.allReactions()
		for _, c := range counts {
			if c.reacted+c.lost != c.changes || c.missed != c.late+c.lost {
				return false
			}
		}
		return true
	})
	for ctl, c := range counts {
		t.Logf("%s: %+v", ctl, c)
		if c.changes != c.reacted+c.lost {
			t.Errorf("%s: %v changes, but %v reactions and %v lost", ctl, c.changes, c.reacted, c.lost)
		}
		if c.missed != c.late+c.lost {
			t.Errorf("%s: %v missed, but %v late and %v lost", ctl, c.missed, c.late, c.lost)
		}
	}
	return counts
}

// eventMisses sums the misses of the probe's own watch paths.
func (tp *testProbe) eventMisses() float64 { return tp.sum(metrics.EventsMissed) }

func TestControllerReactions(t *testing.T) {
	tp := startControllerProbe(t, "ctrl-normal")
	localcluster.StartControllerManagerForTest(t, cluster, localcluster.ControllerManagerOptions{})
	tp.awaitReactions(t, 20, map[string]reactionCounts{})
	counts := tp.drainReactions(t)
	for ctl, c := range counts {
		if c.lost != 0 {
			t.Errorf("%s: %v reactions lost with the controller-manager running", ctl, c.lost)
		}
	}

	// For the record, not judged: the reactions beside the watch latency.
	for _, ctl := range testControllers {
		t.Logf("%s: mean reaction %s, mean controller share %s; watch path mean event latency %s", ctl,
			histogramMean(tp.histogramOf(metrics.ControllerReaction, tp.cfg.Name, ctl)),
			histogramMean(tp.histogramOf(metrics.ControllerShare, tp.cfg.Name, ctl)),
			histogramMean(tp.histogramOf(metrics.EventLatency, tp.cfg.Name, metrics.PathWatch, "", metrics.EventModified)))
	}

	ctx := context.Background()
	client := adminClient(t)
	ns := tp.cfg.Namespace
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods in %s; the controller probes must never make one", len(pods.Items), ns)
	}
	deployments, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(deployments.Items) != 1 {
		t.Fatalf("%d deployments in %s, want the one marker", len(deployments.Items), ns)
	}
	d := deployments.Items[0]
	rss, err := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := 0
	for _, rs := range rss.Items {
		if rs.Spec.Replicas == nil || *rs.Spec.Replicas != 0 || rs.Status.Replicas != 0 {
			t.Errorf("replicaset %s asks for or has replicas: spec %v, status %d", rs.Name, rs.Spec.Replicas, rs.Status.Replicas)
		}
		if metav1.IsControlledBy(&rs, &d) {
			owned++
		}
	}
	if owned != 1 {
		t.Errorf("the marker deployment owns %d replicasets after %v changes; want 1: a change must not roll out a revision", owned, counts[metrics.ControllerDeployment].changes)
	}
	if len(rss.Items) != 2 {
		t.Errorf("%d replicasets in %s, want 2: the deployment's and the replicaset marker", len(rss.Items), ns)
	}

	tp.stopLeavingNothing(t)
}

// stopLeavingNothing stops the probe, which deletes its markers, and waits
// for the garbage collector of the running controller-manager to delete
// the Deployment's ReplicaSet: nothing is left in the namespace.
func (tp *testProbe) stopLeavingNothing(t *testing.T) {
	t.Helper()
	tp.stop()
	ctx, client, ns := context.Background(), adminClient(t), tp.cfg.Namespace
	localcluster.EventuallyShows(t, 60*time.Second, "no deployment or replicaset left", func() bool {
		d, err1 := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		r, err2 := client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		return err1 == nil && err2 == nil && len(d.Items) == 0 && len(r.Items) == 0
	}, nil)
}

func TestControllerPaused(t *testing.T) {
	tp := startControllerProbe(t, "ctrl-paused")
	// Renewing its lease must outlast the pause, or it would exit on
	// SIGCONT for having lost it: this test is about a hang, not a restart.
	kcm := localcluster.StartControllerManagerForTest(t, cluster, localcluster.ControllerManagerOptions{
		LeaseDuration: time.Minute, RenewDeadline: 45 * time.Second,
	})
	tp.awaitReactions(t, 5, map[string]reactionCounts{})
	before := tp.allReactions()
	if err := kcm.Pause(); err != nil {
		t.Fatal(err)
	}
	tp.awaitMisses(t, 2, before)
	if err := kcm.Continue(); err != nil {
		t.Fatal(err)
	}
	tp.awaitReactions(t, 5, tp.allReactions())
	counts := tp.drainReactions(t)
	expectControllersMissed(t, counts, before, 2, "while paused")
	tp.stopLeavingNothing(t)
}

// The manager's watches stalled by a proxy between it and the apiserver:
// its controllers miss, the probe's own paths, straight to the apiserver,
// do not; resumed, then cut, it answers again and every miss is late.
func TestControllerWatchStalled(t *testing.T) {
	tp := startControllerProbe(t, "ctrl-stalled")
	proxy := newProxy(t, cluster)
	localcluster.StartControllerManagerForTest(t, cluster, localcluster.ControllerManagerOptions{Config: proxy.Config(cluster.AdminConfig())})
	tp.awaitReactions(t, 5, map[string]reactionCounts{})
	before := tp.allReactions()
	proxy.Stall()
	tp.awaitMisses(t, 3, before)
	stalled := tp.eventMisses()
	proxy.Resume()
	tp.awaitReactions(t, 5, tp.allReactions())
	// Cut: the manager's watches resume from their resourceVersions on
	// new connections, and it answers again.
	proxy.CutConnections()
	tp.awaitReactions(t, 5, tp.allReactions())
	counts := tp.drainReactions(t)
	expectControllersMissed(t, counts, before, 3, "while the controller-manager's watches stalled")
	if stalled != 0 {
		t.Errorf("the probe's own paths missed %v events while only the controller-manager's watches stalled", stalled)
	}
	tp.stopLeavingNothing(t)
}

func TestControllerRestarted(t *testing.T) {
	tp := startControllerProbe(t, "ctrl-restarted")
	kcm := localcluster.StartControllerManagerForTest(t, cluster, localcluster.ControllerManagerOptions{})
	tp.awaitReactions(t, 5, map[string]reactionCounts{})
	before := tp.allReactions()
	if err := kcm.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	tp.awaitMisses(t, 2, before)
	if err := kcm.Start(); err != nil {
		t.Fatal(err)
	}
	tp.awaitReactions(t, 1, tp.allReactions())
	t.Logf("reactions again %s after the kill (the lease lasts 8s)", time.Since(killed).Round(time.Millisecond))
	counts := tp.drainReactions(t)
	expectControllersMissed(t, counts, before, 2, "across the restart")
	tp.stopLeavingNothing(t)
}

// expectControllersMissed: every controller missed at least min reactions
// since before, each came late (none lost), and each miss is the
// controller's: the probe's own watch of the object stayed up throughout.
func expectControllersMissed(t *testing.T, counts, before map[string]reactionCounts, min float64, when string) {
	t.Helper()
	for ctl, c := range counts {
		if missed := c.missed - before[ctl].missed; missed < min || c.lost != 0 {
			t.Errorf("%s: %s %v missed and %v lost; want at least %v missed, each late", ctl, when, missed, c.lost, min)
		}
		if c.undelivered != 0 {
			t.Errorf("%s: %s %v misses blamed on delivery, while the probe's own watch of the object was up: want every miss the controller's", ctl, when, c.undelivered)
		}
	}
}

// A controller's marker object is valid however long its name: the
// longest probe name and a pod name of 63 characters as the replica.
func TestControllerMarkerValid(t *testing.T) {
	name := fmt.Sprintf(controllerNamePattern, strings.Repeat("p", config.MaxNameLength), strings.Repeat("r", 63), newRunID(), metrics.ControllerReplicaSet)
	client, err := kube.NewClient(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ctl := range config.KnownControllers {
		obj := newControllerKind(client, ctl, "ns").make(metav1.ObjectMeta{Name: name, Namespace: "ns"}, 1)
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%s: name %q: %v", ctl, name, errs)
		}
		var tmpl map[string]string
		switch o := obj.(type) {
		case *appsv1.Deployment:
			tmpl = o.Spec.Template.Labels
			if !equalSelector(o.Spec.Selector.MatchLabels, tmpl) || *o.Spec.Replicas != 0 {
				t.Errorf("%s: selector %v, template labels %v, replicas %d", ctl, o.Spec.Selector.MatchLabels, tmpl, *o.Spec.Replicas)
			}
		case *appsv1.ReplicaSet:
			tmpl = o.Spec.Template.Labels
			if !equalSelector(o.Spec.Selector.MatchLabels, tmpl) || *o.Spec.Replicas != 0 {
				t.Errorf("%s: selector %v, template labels %v, replicas %d", ctl, o.Spec.Selector.MatchLabels, tmpl, *o.Spec.Replicas)
			}
		}
		for k, v := range tmpl {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("%s: label %s=%q: %v", ctl, k, v, errs)
			}
		}
	}
}

func equalSelector(a, b map[string]string) bool { return maps.Equal(a, b) && len(a) > 0 }

// At start-up a probe deletes the controller markers its replica left in
// earlier runs, and other replicas' not changed for the orphan age; a live
// replica's, changed recently, stays. No controller-manager is needed.
func TestControllerMarkersCleanedUp(t *testing.T) {
	client := adminClient(t)
	ns := "ctrl-cleanup"
	if n := controllerRuns.Add(1); n > 1 {
		ns = fmt.Sprintf("%s-%d", ns, n)
	}
	localcluster.CreateNamespacesForTest(t, client, ns)
	ctx := context.Background()
	kind := newControllerKind(markerClient(t), metrics.ControllerDeployment, ns)
	leave := func(name, replica string, changed time.Time) {
		t.Helper()
		labels := map[string]string{LabelManagedBy: ManagedByValue, LabelProbe: ns, LabelReplica: replica, LabelController: metrics.ControllerDeployment}
		obj := kind.make(metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels,
			Annotations: map[string]string{annotationChangedAt: changed.UTC().Format(time.RFC3339)}}, 1)
		if _, err := kind.api.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	leave("earlier-run", "r1", time.Now())
	leave("gone-replica", "r2", time.Now().Add(-2*time.Hour))
	leave("live-replica", "r3", time.Now())

	cfg := fastConfig(ns, ns)
	cfg.Controllers = []string{metrics.ControllerDeployment}
	tp := startProbe(t, cluster.AdminConfig(), cfg, "r1", time.Hour)
	names := func() []string {
		list, err := client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range list.Items {
			out = append(out, d.Name)
		}
		return out
	}
	own := fmt.Sprintf(controllerNamePattern, ns, "r1", tp.run, metrics.ControllerDeployment)
	localcluster.EventuallyShows(t, 30*time.Second, "the live replica's marker and this run's", func() bool {
		got := names()
		return len(got) == 2 && slices.Contains(got, "live-replica") && slices.Contains(got, own)
	}, func() string { return fmt.Sprint(names()) })
	tp.stop()
	if got := names(); !slices.Equal(got, []string{"live-replica"}) {
		t.Errorf("after the probe stopped: %v, want the live replica's alone", got)
	}
	if _, _, err := kind.api.Delete(ctx, "live-replica", ""); err != nil {
		t.Error(err)
	}
}
