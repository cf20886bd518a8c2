package probe

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/probetest"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// BenchmarkResumeCheckCost measures what one resume check costs
// kube-apiserver and etcd, in CPU time of their processes per check, with
// the ConfigMaps watch cache at its 102,400-event bound: from a write 1k,
// 10k and 100k events back, through the apiserver (its walk through the
// ring) and on the etcd path (etcd reading its history). A check reads
// until the probe's newest write arrives, as a real one does. The CPU
// counters tick in 10 ms steps, and the scrape that reads kube-apiserver's
// costs it some CPU of its own: the figures are means over many checks
// (the default benchtime; -benchtime 3x reads high). docs/configuration.md
// quotes them.
func BenchmarkResumeCheckCost(b *testing.B) {
	c := localcluster.StartForTest(b, localcluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := kubernetes.NewForConfigOrDie(c.AdminConfig()).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cost"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	cfg := resumeConfig("cost", "cost", time.Hour, time.Second)
	cfg.Paths = []string{metrics.PathWatch, metrics.PathEtcd}
	cfg.Etcd.Endpoints = []string{c.EtcdURL}
	reg := prometheus.NewRegistry()
	m := metrics.NewProbe(reg)
	p, err := New(cfg, Options{Config: c.AdminConfig(), Metrics: m, Logger: slog.New(slog.DiscardHandler), Replica: "r1", OrphanAge: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done })
	// Run adds the resume checker before the first write, whose count is
	// read here.
	localcluster.Eventually(b, time.Minute, "the probe writing", func() bool {
		return probetest.Sample(reg, metrics.Writes, cfg.Name, metrics.VerbUpdate).GetCounter().GetValue() > 0
	})
	resume := resumeOf(b, p)
	ledger := &resume.ledger

	// 50 events a revision, so that 100k events take seconds: the ring
	// counts events, and etcd reads them key by key.
	const perRevision = 50
	stop := busyWriter(b, c, "busy", 5000, perRevision)
	localcluster.Eventually(b, 3*time.Minute, "the ring at its bound and full", func() bool {
		families := apiserverMetrics(b, c)
		return configMapsMetric(b, families, "watch_cache_capacity") == 102400 &&
			configMapsMetric(b, families, "apiserver_watch_cache_events_received_total") > 110000
	})
	stop()
	time.Sleep(2 * time.Second) // the newest writes reach the ring
	head := ledger.newest()
	api, etcd := resume.fixed[0], resume.fixed[1]
	client, err := rest.HTTPClientFor(c.AdminConfig())
	if err != nil {
		b.Fatal(err)
	}
	cpu := func() (apiserver, etcd float64) {
		return processCPU(b, client, c.APIServerURL+"/metrics"), processCPU(b, http.DefaultClient, c.EtcdURL+"/metrics")
	}
	for _, src := range []*resumeSource{api, etcd} {
		for _, back := range []uint64{1000, 10000, 100000} {
			from := head.rv - back/perRevision
			b.Run(fmt.Sprintf("%s/%d_events_back", src.path, back), func(b *testing.B) {
				apiserver0, etcd0 := cpu()
				for b.Loop() {
					end, err := src.replay(context.Background(), from, time.Minute, func(ev replayEvent) bool { return ev.key == head.key })
					if end != replayDone {
						b.Fatalf("the replay ended %d: %v", end, err)
					}
				}
				apiserver1, etcd1 := cpu()
				b.ReportMetric((apiserver1-apiserver0)*1000/float64(b.N), "apiserver-cpu-ms/op")
				b.ReportMetric((etcd1-etcd0)*1000/float64(b.N), "etcd-cpu-ms/op")
			})
		}
	}
}

// processCPU reads process_cpu_seconds_total from a /metrics endpoint.
func processCPU(b *testing.B, client *http.Client, url string) float64 {
	b.Helper()
	f, ok := scrape(b, client, url)["process_cpu_seconds_total"]
	if !ok || len(f.GetMetric()) == 0 {
		b.Fatalf("%s has no process_cpu_seconds_total", url)
	}
	return f.GetMetric()[0].GetCounter().GetValue()
}

// newest is the newest acknowledged write with a resourceVersion.
func (l *resumeLedger) newest() ledgerWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.writes) - 1; i >= 0; i-- {
		if w := l.writes[i]; w.sure && w.rv != 0 {
			return w
		}
	}
	return ledgerWrite{}
}
