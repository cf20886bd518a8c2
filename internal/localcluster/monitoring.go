package localcluster

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/internal/exportertest"
)

// The monitoring side of the end-to-end tests: a real Prometheus, and a
// real Alertmanager that delivers to a webhook the test reads.

// RunForTest starts bin with args, "{addr}" replaced by a free loopback
// address, which it returns; the process's log goes to dir/name.log, whose
// tail is shown if the test fails. It is stopped when t ends.
func RunForTest(t testing.TB, dir, name, bin string, args ...string) string {
	t.Helper()
	addr, _ := RunStoppableForTest(t, dir, name, bin, args...)
	return addr
}

// RunStoppableForTest is RunForTest, and also returns stop, which stops
// the process (interrupt, then kill after 15 s) and waits for it to exit;
// it is stopped when t ends if stop was not called.
func RunStoppableForTest(t testing.TB, dir, name, bin string, args ...string) (addr string, stop func()) {
	t.Helper()
	addr, err := exportertest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "{addr}", addr)
	}
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(func() {
		stop()
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			if len(log) > 4000 {
				log = log[len(log)-4000:]
			}
			t.Logf("%s log tail:\n%s", name, log)
		}
	})
	return addr, stop
}

// WriteFileForTest writes content to dir/name and returns the path.
func WriteFileForTest(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// WaitHTTP waits until url answers 200, for at most a minute.
func WaitHTTP(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 60 s (%v)", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PrometheusForTest runs the Prometheus `make test` builds, evaluating
// the rule files every second and sending alerts to the Alertmanager at
// alertmanager, with scrapeConfigs (the list under scrape_configs, whose
// default interval is a second), and returns its base URL once it is
// ready.
func PrometheusForTest(t testing.TB, dir string, ruleFiles []string, alertmanager, scrapeConfigs string) string {
	t.Helper()
	return runPrometheus(t, dir, "prometheus", prometheusConfig(t, "", ruleFiles, alertmanager)+"scrape_configs:\n"+scrapeConfigs,
		"--storage.tsdb.path", filepath.Join(dir, "prom-data"))
}

// CentralPrometheusForTest runs the Prometheus of a fleet's central store:
// it scrapes nothing, takes samples on its remote-write receiver
// (/api/v1/write) and evaluates the rule files every second, ruleOffset
// behind (rule_query_offset: how long remote-written samples take to
// arrive), sending alerts to alertmanager. It runs in dir/name.
func CentralPrometheusForTest(t testing.TB, dir, name string, ruleFiles []string, ruleOffset time.Duration, alertmanager string) string {
	t.Helper()
	dir = subdir(t, dir, name)
	global := fmt.Sprintf("  rule_query_offset: %s\n", promDuration(ruleOffset))
	return runPrometheus(t, dir, name, prometheusConfig(t, global, ruleFiles, alertmanager),
		"--storage.tsdb.path", filepath.Join(dir, "data"), "--web.enable-remote-write-receiver")
}

// PrometheusAgentForTest runs the Prometheus in agent mode, as a cluster of
// a fleet runs it: it scrapes scrapeConfigs every second and remote-writes
// every sample to remoteWrite (a receiver's /api/v1/write URL) with
// externalLabels added, in batches sent at least every second. It runs in
// dir/name and returns its base URL once it is ready.
func PrometheusAgentForTest(t testing.TB, dir, name string, externalLabels map[string]string, remoteWrite, scrapeConfigs string) string {
	t.Helper()
	dir = subdir(t, dir, name)
	labels, err := json.Marshal(externalLabels)
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`
global:
  scrape_interval: 1s
  external_labels: %s
remote_write:
  - url: %q
    queue_config: {batch_send_deadline: 1s, min_backoff: 50ms, max_backoff: 1s}
scrape_configs:
%s`, labels, remoteWrite, scrapeConfigs)
	return runPrometheus(t, dir, name, config, "--agent", "--storage.agent.path", filepath.Join(dir, "data"))
}

// prometheusConfig is the global, rule and alerting sections of a
// Prometheus that evaluates ruleFiles every second; global adds to the
// global section.
func prometheusConfig(t testing.TB, global string, ruleFiles []string, alertmanager string) string {
	t.Helper()
	rules, err := json.Marshal(ruleFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
%srule_files: %s
alerting:
  alertmanagers:
    - static_configs:
        - targets: [%q]
`, global, rules, alertmanager)
}

// runPrometheus runs Prometheus with config as dir/name.yml and args, and
// returns its base URL once it is ready.
func runPrometheus(t testing.TB, dir, name, config string, args ...string) string {
	t.Helper()
	addr := RunForTest(t, dir, name, ToolForTest(t, "prometheus"), append([]string{
		"--config.file", WriteFileForTest(t, dir, name+".yml", config), "--web.listen-address", "{addr}"}, args...)...)
	prom := "http://" + addr
	WaitHTTP(t, prom+"/-/ready")
	return prom
}

// subdir makes dir/name, for a process that shares dir with others of its
// kind.
func subdir(t testing.TB, dir, name string) string {
	t.Helper()
	dir = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// promDuration is d as a Prometheus duration (whole milliseconds).
func promDuration(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// PromQuery runs an instant query and returns its result's series.
func PromQuery(t testing.TB, prom, query string) []json.RawMessage {
	t.Helper()
	resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     json.RawMessage
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "success" {
		t.Fatalf("query %s: %s", query, r.Error)
	}
	if r.Data.ResultType == "scalar" {
		return []json.RawMessage{r.Data.Result}
	}
	var series []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		t.Fatal(err)
	}
	return series
}

// AlertmanagerForTest runs Debian's Alertmanager ($WATCHPROBE_ALERTMANAGER,
// which `make test` installs), routing every alert at once to a webhook,
// one group per alert name, and returns its address and the webhook.
func AlertmanagerForTest(t testing.TB, dir string) (string, *Webhook) {
	t.Helper()
	return AlertmanagerWithConfigForTest(t, dir, []string{"alertname"}, "")
}

// AlertmanagerWithConfigForTest is AlertmanagerForTest with the route's
// group_by and more top-level configuration (such as inhibit_rules) added to
// Alertmanager's.
func AlertmanagerWithConfigForTest(t testing.TB, dir string, groupBy []string, extra string) (string, *Webhook) {
	t.Helper()
	bin := os.Getenv("WATCHPROBE_ALERTMANAGER")
	if bin == "" {
		bin = "/usr/bin/prometheus-alertmanager"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("Alertmanager is missing (%v): run `make test`, which installs Debian's prometheus-alertmanager", err)
	}
	by, err := json.Marshal(groupBy)
	if err != nil {
		t.Fatal(err)
	}
	hook := newWebhook(t)
	addr := RunForTest(t, dir, "alertmanager", bin,
		"--config.file", WriteFileForTest(t, dir, "alertmanager.yml", fmt.Sprintf(`
route:
  receiver: test
  group_by: %s
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %s
%s`, by, hook.URL, extra)),
		"--storage.path", filepath.Join(dir, "am-data"), "--web.listen-address", "{addr}", "--cluster.listen-address", "")
	WaitHTTP(t, "http://"+addr+"/-/ready")
	return addr, hook
}

// DeliveredAlert is an alert as Alertmanager's webhook delivers it.
type DeliveredAlert struct {
	Status      string
	Labels      map[string]string
	Annotations map[string]string
}

// Webhook receives Alertmanager's notifications.
type Webhook struct {
	*httptest.Server
	mu            sync.Mutex
	alerts        []DeliveredAlert
	notifications [][]DeliveredAlert
}

func newWebhook(t testing.TB) *Webhook {
	w := &Webhook{}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var msg struct{ Alerts []DeliveredAlert }
		if err := json.NewDecoder(r.Body).Decode(&msg); err == nil {
			w.mu.Lock()
			w.alerts = append(w.alerts, msg.Alerts...)
			w.notifications = append(w.notifications, msg.Alerts)
			w.mu.Unlock()
		}
	}))
	t.Cleanup(w.Close)
	return w
}

// Wait returns the first firing alert named name that Alertmanager delivered.
func (w *Webhook) Wait(t testing.TB, within time.Duration, name string) DeliveredAlert {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		for _, a := range w.alerts {
			if a.Labels["alertname"] == name && a.Status == "firing" {
				w.mu.Unlock()
				return a
			}
		}
		w.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("Alertmanager delivered no firing %s within %s", name, within)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Notifications returns every notification received so far, each the
// alerts it carried.
func (w *Webhook) Notifications() [][]DeliveredAlert {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]DeliveredAlert(nil), w.notifications...)
}
