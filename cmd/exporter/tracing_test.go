package main

import (
	"context"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/otlpreceiver"
)

// Marker writes are traced end to end: the exporter's spans and
// kube-apiserver's own spans for the same write reach one OTLP receiver,
// joined in one trace for a system:masters caller and by a span link for a
// ServiceAccount; latency exemplars name those traces; and a collector that
// is down slows nothing.
func TestTracing(t *testing.T) {
	ctx := context.Background()
	recv, err := otlpreceiver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(recv.Stop)
	tracingConfig := filepath.Join(t.TempDir(), "tracing.yaml")
	if err := os.WriteFile(tracingConfig, fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: TracingConfiguration
endpoint: %s
samplingRatePerMillion: 1000000
`, recv.Addr), 0o600); err != nil {
		t.Fatal(err)
	}
	c := localcluster.StartForTest(t, localcluster.Options{APIServerFlags: []string{"--tracing-config-file", tracingConfig}})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	otelEnv := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + recv.Addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}

	t.Run("system:masters caller: one trace", func(t *testing.T) {
		ns := "traced-admin"
		localcluster.CreateNamespacesForTest(t, admin, ns)
		e := startExporterEnv(t, otelEnv, probeArgs(t, c.AdminConfig(), ns, "admin", "500ms")...)
		var write, client, apiserver otlpreceiver.Span
		localcluster.Eventually(t, 90*time.Second, "an apiserver span under the exporter's write span", func() bool {
			spans := recv.Spans()
			for w, cs := range writeClients(spans, "admin") {
				if cs.TraceID != w.TraceID {
					continue
				}
				for _, a := range spans {
					if a.Service == "apiserver" && a.TraceID == w.TraceID && descends(spans, a, cs.SpanID) {
						write, client, apiserver = w, cs, a
						return true
					}
				}
			}
			return false
		})
		t.Logf("trace %s: %s > %s > apiserver %s", write.TraceID, write.Name, client.Name, apiserver.Name)

		// Exemplars on the latency histogram name traces the receiver holds.
		_, body, err := e.Get("/metrics", "application/openmetrics-text; version=1.0.0")
		if err != nil {
			t.Fatal(err)
		}
		exemplar := regexp.MustCompile(`(?m)^watchprobe_event_latency_seconds_bucket\{[^}]*\} \S+ # \{trace_id="([0-9a-f]{32})"\}`)
		matches := exemplar.FindAllStringSubmatch(body, -1)
		if len(matches) == 0 {
			t.Fatalf("no latency exemplar with a trace_id in the OpenMetrics output")
		}
		// A write's span ends, and is exported, once the write has arrived on
		// every path; the exemplar is recorded at the first arrival.
		localcluster.Eventually(t, 30*time.Second, "every exemplar's trace in the receiver", func() bool {
			held := map[string]bool{}
			for _, s := range recv.Spans() {
				if s.Service == "watchprobe" {
					held[s.TraceID] = true
				}
			}
			for _, m := range matches {
				if !held[m[1]] {
					return false
				}
			}
			return true
		})
	})

	t.Run("ServiceAccount caller: a linked trace", func(t *testing.T) {
		ns := "traced-sa"
		localcluster.CreateNamespacesForTest(t, admin, ns)
		grantMarkers(t, admin, ns, "watchprobe")
		sa, err := c.ServiceAccountConfig(ctx, ns, "watchprobe")
		if err != nil {
			t.Fatal(err)
		}
		startExporterEnv(t, otelEnv, probeArgs(t, sa, ns, "sa", "500ms")...)
		localcluster.Eventually(t, 90*time.Second, "an apiserver span linking to the exporter's client span", func() bool {
			spans := recv.Spans()
			for w, cs := range writeClients(spans, "sa") {
				for _, a := range spans {
					if a.Service != "apiserver" {
						continue
					}
					if a.TraceID == w.TraceID {
						t.Errorf("apiserver span %s joined the trace of a ServiceAccount caller", a.Name)
					}
					for _, l := range a.Links {
						if l.TraceID == cs.TraceID && l.SpanID == cs.SpanID {
							return true
						}
					}
				}
			}
			return false
		})
	})

	t.Run("unreachable collector slows nothing", func(t *testing.T) {
		ns := "traced-down"
		localcluster.CreateNamespacesForTest(t, admin, ns)
		nowhere, err := exportertest.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		dead := []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + nowhere, // nothing listens there
			"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
			"OTEL_EXPORTER_OTLP_TIMEOUT=500",
			"OTEL_BSP_SCHEDULE_DELAY=100",
		}
		traced := startExporterEnv(t, dead, probeArgs(t, c.AdminConfig(), ns, "down", "200ms")...)
		plain := startExporter(t, append(probeArgs(t, c.AdminConfig(), ns, "plain", "200ms"), "--tracing", "off")...)
		for _, e := range []*exporter{traced, plain} {
			localcluster.Eventually(t, 60*time.Second, "ready", func() bool { code, _ := e.get("/-/ready"); return code == 200 })
		}
		creates := func(e *exporter, probe string) float64 {
			v, _ := e.series(t, "watchprobe_writes_total", map[string]string{"probe": probe, "verb": "create"})
			return v
		}
		t0, p0 := creates(traced, "down"), creates(plain, "plain")
		time.Sleep(6 * time.Second)
		dt, dp := creates(traced, "down")-t0, creates(plain, "plain")-p0
		t.Logf("cycles in 6 s: %g with the collector down, %g without tracing", dt, dp)
		if dt < 0.8*dp || dt < 15 {
			t.Errorf("probing slowed with the collector down: %g cycles against %g", dt, dp)
		}
		if got, _ := traced.series(t, "watchprobe_probe_success", map[string]string{"probe": "down"}); got != 1 {
			t.Errorf("probe_success = %g with the collector down", got)
		}
		localcluster.Eventually(t, 30*time.Second, "dropped spans counted", func() bool {
			v, _ := traced.series(t, "watchprobe_tracing_spans_dropped_total", nil)
			return v > 0
		})
	})
}

// writeClients yields each marker create span of the exporter's probe
// with each span its write made as a client (its children).
func writeClients(spans []otlpreceiver.Span, probe string) iter.Seq2[otlpreceiver.Span, otlpreceiver.Span] {
	return func(yield func(otlpreceiver.Span, otlpreceiver.Span) bool) {
		for _, w := range spans {
			if w.Service != "watchprobe" || w.Name != "watchprobe.marker.create" || w.Attributes["watchprobe.probe"] != probe {
				continue
			}
			for _, cs := range spans {
				if cs.ParentSpanID == w.SpanID && !yield(w, cs) {
					return
				}
			}
		}
	}
}

// descends reports whether s has ancestor as its parent, or a parent's parent.
func descends(spans []otlpreceiver.Span, s otlpreceiver.Span, ancestor string) bool {
	byID := map[string]otlpreceiver.Span{}
	for _, x := range spans {
		byID[x.SpanID] = x
	}
	for range len(spans) {
		if s.ParentSpanID == ancestor {
			return true
		}
		parent, ok := byID[s.ParentSpanID]
		if !ok {
			return false
		}
		s = parent
	}
	return false
}

func probeArgs(t *testing.T, cfg *rest.Config, ns, probe, interval string) []string {
	t.Helper()
	return []string{"--kubeconfig", writeKubeconfig(t, cfg), "--probe.namespace", ns, "--probe.name", probe,
		"--probe.replica", probe, "--probe.interval", interval}
}

// grantMarkers gives a ServiceAccount what the Helm chart gives it.
func grantMarkers(t *testing.T, client kubernetes.Interface, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "watchprobe"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"list", "watch", "create", "patch", "delete"},
		}},
	}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "watchprobe"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "watchprobe"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
