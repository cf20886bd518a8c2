// Command demo starts the local control plane and the exporter against it,
// and prints a live summary of what the exporter measures until Ctrl-C.
// It is what `make demo` runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/nativehist"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "directory holding watchprobe, kube-apiserver and etcd")
	listen := flag.String("listen", "127.0.0.1:9917", "address for the exporter's web server")
	every := flag.Duration("every", 5*time.Second, "time between summary lines")
	flag.Parse()
	if err := run(*binDir, *listen, *every); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(binDir, listen string, every time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return err
	}

	fmt.Println(">> starting etcd and kube-apiserver on loopback")
	cluster, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println(">> stopping the control plane and removing", cluster.Dir())
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()
	kubeconfig := filepath.Join(cluster.Dir(), "kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cluster.AdminConfig())
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "watchprobe"}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}

	logPath := filepath.Join(cluster.Dir(), "watchprobe.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	exporter := exec.Command(filepath.Join(binDir, "watchprobe"),
		"--kubeconfig", kubeconfig, "--web.listen-address", listen,
		"--probe.interval", "1s", "--probe.replica", "demo",
		// The local etcd is plain http on loopback; a real one wants certificates.
		"--probe.paths", "informer,watch,etcd", "--probe.etcd.endpoints", cluster.EtcdURL)
	exporter.Stdout, exporter.Stderr = logFile, logFile
	if err := exporter.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- exporter.Wait() }()
	defer func() {
		fmt.Println(">> stopping the exporter (it deletes its markers)")
		_ = exporter.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = exporter.Process.Kill()
		}
	}()

	metricsURL := "http://" + listen + "/metrics"
	fmt.Printf(`>> control plane: %s   (kubectl --kubeconfig %s get configmaps -n watchprobe -w)
>> exporter:      %s   (log: %s)
>> one line every %s, per path (etcd itself, the bare apiserver watch, a client-go informer): latency
   p50/p99 since start; events observed, missed, duplicated (dup), out of order (ooo); watch streams
   restarted; the apiserver's share (watch arrival minus etcd arrival). Ctrl-C stops everything.
`, cluster.APIServerURL, kubeconfig, metricsURL, logPath, every)

	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-exited:
			return fmt.Errorf("the exporter exited (%v); its log is %s:\n%s", err, logPath, tail(logPath, 20))
		case <-ticker.C:
			line, err := summary("http://" + listen)
			if err != nil {
				line = "(no metrics yet: " + err.Error() + ")"
			}
			fmt.Println(time.Now().Format("15:04:05"), line)
		}
	}
}

// summary scrapes the exporter at url in the protobuf format, which
// carries the native histograms the percentiles are computed from.
func summary(url string) (string, error) {
	families, err := exportertest.ScrapeNative(url)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, path := range []string{"etcd", "watch", "informer"} {
		lat := histograms(families["watchprobe_event_latency_seconds"], "path", path)
		parts = append(parts, fmt.Sprintf("%-8s p50 %s p99 %s observed %4.0f missed %.0f dup %.0f ooo %.0f restarts %.0f", path,
			ms(nativehist.Quantile(0.5, lat...)), ms(nativehist.Quantile(0.99, lat...)),
			sum(families["watchprobe_events_observed_total"], "path", path),
			sum(families["watchprobe_events_missed_total"], "path", path),
			sum(families["watchprobe_events_duplicate_total"], "path", path),
			sum(families["watchprobe_events_out_of_order_total"], "path", path),
			sum(families["watchprobe_watch_restarts_total"], "path", path)))
	}
	lag := histograms(families["watchprobe_apiserver_lag_seconds"], "path", "watch")
	parts = append(parts, fmt.Sprintf("apiserver share p50 %s", ms(nativehist.Quantile(0.5, lag...))))
	writes := histograms(families["watchprobe_write_duration_seconds"], "", "")
	parts = append(parts, fmt.Sprintf("write p50 %s", ms(nativehist.Quantile(0.5, writes...))))
	return strings.Join(parts, " | "), nil
}

func matches(m *dto.Metric, label, value string) bool {
	if label == "" {
		return true
	}
	for _, l := range m.GetLabel() {
		if l.GetName() == label {
			return l.GetValue() == value
		}
	}
	return false
}

func histograms(mf *dto.MetricFamily, label, value string) []*dto.Histogram {
	var hs []*dto.Histogram
	for _, m := range mf.GetMetric() {
		if matches(m, label, value) {
			hs = append(hs, m.GetHistogram())
		}
	}
	return hs
}

func sum(mf *dto.MetricFamily, label, value string) float64 {
	var s float64
	for _, m := range mf.GetMetric() {
		if matches(m, label, value) {
			s += m.GetCounter().GetValue()
		}
	}
	return s
}

func ms(seconds float64) string {
	if math.IsNaN(seconds) {
		return "   -   "
	}
	return fmt.Sprintf("%5.2fms", seconds*1000)
}

func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
