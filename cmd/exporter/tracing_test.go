package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
		createNS(t, admin, ns)
		e := startExporterEnv(t, otelEnv, probeArgs(t, c.AdminConfig(), ns, "admin", "500ms")...)
		var write, client, apiserver otlpreceiver.Span
		localcluster.Eventually(t, 90*time.Second, "an apiserver span under the exporter's write span", func() bool {
			spans := recv.Spans()
			for _, w := range spans {
				if w.Service != "watchprobe" || w.Name != "watchprobe.marker.create" || w.Attributes["watchprobe.probe"] != "admin" {
					continue
				}
				for _, cs := range spans {
					if cs.ParentSpanID != w.SpanID || cs.TraceID != w.TraceID {
						continue
					}
					for _, a := range spans {
						if a.Service == "apiserver" && a.TraceID == w.TraceID && descends(spans, a, cs.SpanID) {
							write, client, apiserver = w, cs, a
							return true
						}
					}
				}
			}
			return false
		})
		t.Logf("trace %s: %s > %s > apiserver %s", write.TraceID, write.Name, client.Name, apiserver.Name)

		// Exemplars on the latency histogram name traces the receiver holds.
		req, _ := http.NewRequest(http.MethodGet, e.url+"/metrics", nil)
		req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		exemplar := regexp.MustCompile(`(?m)^watchprobe_event_latency_seconds_bucket\{[^}]*\} \S+ # \{trace_id="([0-9a-f]{32})"\}`)
		matches := exemplar.FindAllStringSubmatch(string(body), -1)
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
		createNS(t, admin, ns)
		grantMarkers(t, admin, ns, "watchprobe")
		sa, err := c.ServiceAccountConfig(ctx, ns, "watchprobe")
		if err != nil {
			t.Fatal(err)
		}
		startExporterEnv(t, otelEnv, probeArgs(t, sa, ns, "sa", "500ms")...)
		localcluster.Eventually(t, 90*time.Second, "an apiserver span linking to the exporter's client span", func() bool {
			spans := recv.Spans()
			for _, w := range spans {
				if w.Service != "watchprobe" || w.Name != "watchprobe.marker.create" || w.Attributes["watchprobe.probe"] != "sa" {
					continue
				}
				for _, cs := range spans {
					if cs.ParentSpanID != w.SpanID {
						continue
					}
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
			}
			return false
		})
	})

	t.Run("unreachable collector slows nothing", func(t *testing.T) {
		ns := "traced-down"
		createNS(t, admin, ns)
		dead := []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + freeAddr(t), // nothing listens there
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
			return metricValue(t, e, fmt.Sprintf(`watchprobe_writes_total{probe=%q,verb="create"}`, probe))
		}
		t0, p0 := creates(traced, "down"), creates(plain, "plain")
		time.Sleep(6 * time.Second)
		dt, dp := creates(traced, "down")-t0, creates(plain, "plain")-p0
		t.Logf("cycles in 6 s: %g with the collector down, %g without tracing", dt, dp)
		if dt < 0.8*dp || dt < 15 {
			t.Errorf("probing slowed with the collector down: %g cycles against %g", dt, dp)
		}
		if got := metricValue(t, traced, `watchprobe_probe_success{probe="down"}`); got != 1 {
			t.Errorf("probe_success = %g with the collector down", got)
		}
		localcluster.Eventually(t, 30*time.Second, "dropped spans counted", func() bool {
			return metricValue(t, traced, "watchprobe_tracing_spans_dropped_total") > 0
		})
	})
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
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := localcluster.WriteKubeconfig(cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return []string{"--kubeconfig", kubeconfig, "--probe.namespace", ns, "--probe.name", probe,
		"--probe.replica", probe, "--probe.interval", interval}
}

func createNS(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantMarkers gives a ServiceAccount what the Helm chart gives it.
func grantMarkers(t *testing.T, client kubernetes.Interface, ns, sa string) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "watchprobe"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"list", "watch", "create", "update", "delete"},
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

// metricValue reads one sample from the text exposition; 0 if absent.
func metricValue(t *testing.T, e *exporter, series string) float64 {
	t.Helper()
	_, body := e.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	return 0
}
