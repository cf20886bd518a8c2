package freshness

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// conversionWebhook is a CRD conversion webhook that answers every
// ConversionReview with HTTP 500 while broken, else converts each object
// by setting its apiVersion to the desired one, keeping the rest.
type conversionWebhook struct {
	broken atomic.Bool
	// failed and converted count the reviews answered each way.
	failed, converted atomic.Int64
}

// conversionReview is the part of an apiextensions.k8s.io/v1
// ConversionReview the webhook reads and writes.
type conversionReview struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID               string           `json:"uid"`
		DesiredAPIVersion string           `json:"desiredAPIVersion"`
		Objects           []map[string]any `json:"objects"`
	} `json:"request,omitempty"`
	Response *conversionResponse `json:"response,omitempty"`
}

type conversionResponse struct {
	UID              string           `json:"uid"`
	ConvertedObjects []map[string]any `json:"convertedObjects"`
	Result           map[string]any   `json:"result"`
}

func (h *conversionWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.broken.Load() {
		h.failed.Add(1)
		http.Error(w, "conversion is broken", http.StatusInternalServerError)
		return
	}
	var review conversionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not a ConversionReview: %v", err), http.StatusBadRequest)
		return
	}
	out := make([]map[string]any, 0, len(review.Request.Objects))
	for _, o := range review.Request.Objects {
		o["apiVersion"] = review.Request.DesiredAPIVersion
		out = append(out, o)
	}
	h.converted.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(conversionReview{
		APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview",
		Response: &conversionResponse{UID: review.Request.UID, ConvertedObjects: out, Result: map[string]any{"status": "Success"}},
	})
}

var (
	gadgetsV2 = schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "gadgets"}
)

// gadget is the one Gadget, stored in v1 in namespace elsewhere; gizmo the
// one Gizmo, cluster-scoped.
var (
	gadget = map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g1", "namespace": "elsewhere"},
		"spec":     map[string]any{"color": "red"},
	}
	gizmo = map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gizmo",
		"metadata": map[string]any{"name": "z1"},
		"spec":     map[string]any{"color": "blue"},
	}
	gizmosV2 = schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "gizmos"}
)

// createConverted serves the CRD singular+"s.example.com" (namespaced, or
// cluster-scoped if not) in v1 alone, stores obj in it, then serves v2
// too, converted by the webhook at url whose serving certificate is
// caPEM, and waits until discovery has v2. The object is in etcd before
// v2's watch cache starts (the CRD's update replaces its storage), so that
// cache's first list must convert it: a cache started before it would
// hear of it only by its watch, which would stall on it for a while
// (checks time out) before a relist fails.
func createConverted(t *testing.T, dyn dynamic.Interface, client kubernetes.Interface, singular, kind string, namespaced bool, obj map[string]any, url string, caPEM []byte) {
	t.Helper()
	ctx := context.Background()
	schemaAny := map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
	crds := dyn.Resource(crdsResource)
	crd := namespacedCRD(singular, kind)
	v1 := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: singular + "s"}
	var in dynamic.ResourceInterface = dyn.Resource(v1)
	if namespaced {
		in = dyn.Resource(v1).Namespace("elsewhere")
	} else if err := unstructured.SetNestedField(crd.Object, "Cluster", "spec", "scope"); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	localcluster.Eventually(t, 60*time.Second, singular+"s v1 served", func() bool {
		_, err := in.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	if _, err := in.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{
		"versions": []any{
			map[string]any{"name": "v1", "served": true, "storage": true, "schema": schemaAny},
			map[string]any{"name": "v2", "served": true, "storage": false, "schema": schemaAny},
		},
		"conversion": map[string]any{
			"strategy": "Webhook",
			"webhook": map[string]any{
				"conversionReviewVersions": []any{"v1"},
				"clientConfig":             map[string]any{"url": url, "caBundle": base64.StdEncoding.EncodeToString(caPEM)},
			},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Patch(ctx, singular+"s.example.com", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	localcluster.Eventually(t, 60*time.Second, singular+"s v2 in discovery", func() bool {
		l, err := client.Discovery().ServerResourcesForGroupVersion("example.com/v2")
		if err != nil {
			return false
		}
		for _, r := range l.APIResources {
			if r.Name == singular+"s" {
				return true
			}
		}
		return false
	})
}

// A CRD whose conversion webhook answers 500: its v2 watch cache, which
// must convert the object stored in v1 (in another namespace than the
// probe's), never initializes. The checker lists v2, the version
// discovery prefers, in the probe's empty namespace and reports the
// cache as not ready, while configmaps in the same round are fresh; once
// the webhook converts again, the cache initializes and the check is
// fresh.
func TestFreshnessConversionWebhook500(t *testing.T) {
	start := time.Now()
	hook := &conversionWebhook{}
	hook.broken.Store(true)
	srv := httptest.NewTLSServer(hook)
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	localcluster.CreateNamespacesForTest(t, client, "fresh", "elsewhere")
	createConverted(t, dyn, client, "gadget", "Gadget", true, gadget, srv.URL+"/convert", caPEM)
	createConverted(t, dyn, client, "gizmo", "Gizmo", false, gizmo, srv.URL+"/convert", caPEM)
	ctx := context.Background()
	// The v2 cache cannot convert the gadget: its consistent LIST fails,
	// even in a namespace with no gadget at all, and names the webhook
	// once the cache's first list has failed (before it, the cache
	// answers a bare "storage is (re)initializing").
	var listErr error
	localcluster.EventuallyShows(t, 60*time.Second, "a consistent LIST of gadgets v2 in the probe's namespace failing on the webhook", func() bool {
		_, listErr = dyn.Resource(gadgetsV2).Namespace("fresh").List(ctx, metav1.ListOptions{})
		_, zErr := dyn.Resource(gizmosV2).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + noSuchName})
		return listErr != nil && strings.Contains(listErr.Error(), "conversion webhook") &&
			zErr != nil && strings.Contains(zErr.Error(), "conversion webhook")
	}, func() string { return fmt.Sprintf("webhook answered %d reviews with 500", hook.failed.Load()) })
	t.Logf("consistent LIST of gadgets v2 in fresh with the webhook answering 500: %v", listErr)
	if hook.failed.Load() == 0 {
		t.Fatalf("the LIST failed (%v) without the webhook being asked", listErr)
	}

	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	chk, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: admin, Metrics: m,
		Config: settings([]string{"configmaps", "gadgets.example.com"}, []string{"gizmos.example.com"})})
	counter := func(f *metrics.Family, values ...string) float64 {
		return testutil.ToFloat64(m.ForResource("p", "gadgets.example.com", "").Counter(f, values...))
	}

	chk.Round(ctx) // the series, at zero
	chk.Round(ctx)
	// The checker lists the version that needs converting: v2, the one
	// discovery prefers, not v1, where the object is stored.
	chk.mu.Lock()
	var path string
	for _, r := range chk.resolved {
		if r.label == "gadgets.example.com" {
			path = r.path
		}
	}
	chk.mu.Unlock()
	if want := "/apis/example.com/v2/namespaces/%s/gadgets"; path != want {
		t.Fatalf("gadgets.example.com resolved to %q, want %q", path, want)
	}
	ev := rec.take()
	g := check(t, ev, "gadgets.example.com", "")
	t.Logf("checker's LIST of gadgets v2: status %d, message %q, took %s: %+v", g.Answer.Status, g.Answer.Message, g.Answer.Took, g.Verdict)
	if want := (Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Uncached: true}); g.Verdict != want {
		t.Errorf("gadgets behind a 500 conversion webhook: %+v (%+v), want %+v", g.Verdict, g.Answer, want)
	}
	// The apiserver's answer: 429, the cacher's "storage is
	// (re)initializing" carrying its last list error, the webhook's.
	if g.Answer.Status != http.StatusTooManyRequests ||
		!strings.HasPrefix(g.Answer.Message, "storage is (re)initializing: ") ||
		!strings.Contains(g.Answer.Message, `conversion webhook for example.com/v1, Kind=Gadget failed: an error on the server ("conversion is broken")`) {
		t.Errorf("gadgets v2 answer %d %q, want 429 storage is (re)initializing: ... conversion webhook for example.com/v1, Kind=Gadget failed: an error on the server (\"conversion is broken\") ...", g.Answer.Status, g.Answer.Message)
	}
	// A cluster-scoped resource is checked by a name no object has: its
	// cache, not ready, answers 429 as well, where a LIST with limit=1
	// would have gone to etcd and failed at once, or looked fresh.
	if z := check(t, ev, "gizmos.example.com", ""); z.Verdict != (Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Uncached: true}) || z.Answer.Status != http.StatusTooManyRequests {
		t.Errorf("gizmos behind a 500 conversion webhook: %+v (%+v), want failed conversion_failed, uncached, a 429", z.Verdict, z.Answer)
	}
	if cm := check(t, ev, "configmaps", ""); cm.Verdict.Outcome != Fresh {
		t.Errorf("configmaps beside gadgets: %+v (%+v), want fresh", cm.Verdict, cm.Answer)
	}
	for _, r := range metrics.FreshnessErrorReasons {
		want := 0.0
		if r == metrics.FreshnessConversionFailed {
			want = 1
		}
		if got := counter(metrics.ListFreshnessErrors, r); got != want {
			t.Errorf("watchprobe_list_freshness_errors_total{resource=gadgets.example.com,reason=%q} %v, want %v", r, got, want)
		}
	}
	if got := counter(metrics.ListFreshnessChecks); got != 1 {
		t.Errorf("gadgets checks %v, want 1", got)
	}

	// The webhook converts again: the v2 cache initializes on its next
	// relist, and the check is fresh. Until then each check fails as
	// before, and is counted so.
	hook.broken.Store(false)
	rounds, notReady := 0, 0
	var last Event
	localcluster.EventuallyShows(t, 60*time.Second, "gadgets fresh once the webhook converts", func() bool {
		chk.Round(ctx)
		rounds++
		ev := rec.take()
		last = check(t, ev, "gadgets.example.com", "")
		if last.Verdict.Outcome == Fresh {
			return true
		}
		if want := (Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Uncached: true}); last.Verdict != want {
			t.Errorf("gadgets while the cache recovers: %+v (%+v), want %+v or fresh", last.Verdict, last.Answer, want)
		}
		notReady++
		return false
	}, func() string { return fmt.Sprintf("%d rounds, last %+v (%+v)", rounds, last.Verdict, last.Answer) })
	if hook.converted.Load() == 0 {
		t.Errorf("gadgets fresh without the webhook converting anything")
	}
	t.Logf("gadgets fresh after %d rounds (%d still not ready) once the webhook converted; %d reviews answered 500, %d converted",
		rounds, notReady, hook.failed.Load(), hook.converted.Load())
	if got := counter(metrics.ListFreshnessErrors, metrics.FreshnessConversionFailed); got != float64(1+notReady) {
		t.Errorf("gadgets conversion_failed %v, want %d (the first round and %d while recovering)", got, 1+notReady, notReady)
	}
	if got := counter(metrics.ListFreshnessChecks); got != float64(1+rounds) {
		t.Errorf("gadgets checks %v, want %d (one per round)", got, 1+rounds)
	}
	// The object in elsewhere is served in v2, converted.
	got, err := dyn.Resource(gadgetsV2).Namespace("elsewhere").Get(ctx, "g1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetAPIVersion() != "example.com/v2" {
		t.Errorf("g1 in v2 has apiVersion %q", got.GetAPIVersion())
	}
	if color, _, _ := unstructured.NestedString(got.Object, "spec", "color"); color != "red" {
		t.Errorf("g1 in v2 has spec.color %q, want red (kept by the conversion)", color)
	}
	t.Logf("test took %s", time.Since(start))
}
