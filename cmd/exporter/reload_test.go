package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

func (e *exporter) post(path string) (int, string) {
	resp, err := http.Post(e.URL+path, "", nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// probeSeries lists the metric names that have a series of probe.
func (e *exporter) probeSeries(t *testing.T, name string) []string {
	t.Helper()
	_, body := e.get("/metrics")
	var names []string
	for _, line := range strings.Split(body, "\n") {
		if strings.Contains(line, `probe="`+name+`"`) && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	return names
}

func probeMarkers(t *testing.T, client kubernetes.Interface, ns, probeName string) []string {
	t.Helper()
	return configMapNames(t, client, ns, probe.LabelProbe+"="+probeName)
}

// A reload stops and starts only the probes whose settings changed: the
// unchanged probe keeps its watch streams (no restart, no relist, its
// counters go on), the removed one deletes its markers and its series, the
// added one runs. A file that does not load changes nothing, and says why.
func TestReload(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{EtcdTLS: true})
	admin := c.AdminConfig()
	client := kubernetes.NewForConfigOrDie(admin)
	ns := "reload"
	localcluster.CreateNamespacesForTest(t, client, ns)
	etcdCert, etcdKey, etcdCA := c.EtcdClientFiles()
	probeYAML := func(name string) string {
		// Many updates keep a marker alive most of the time, so that a
		// removed probe has one to delete. A long watch timeout keeps
		// streams from ending by themselves during the test.
		return fmt.Sprintf(`  - name: %s
    namespace: %s
    interval: 200ms
    updates: 20
    watch_timeout: 30m
`, name, ns)
	}
	// b reaches etcd with a client key: /config must show where the key
	// is, never the key.
	b := probeYAML("b") + fmt.Sprintf(`    paths: [informer, watch, etcd]
    etcd: {endpoints: [%q], cert_file: %q, key_file: %q, ca_file: %q}
`, c.EtcdURL, etcdCert, etcdKey, etcdCA)
	// a also times WatchList syncs: its series go with it.
	a := probeYAML("a") + "    watch_list: {resources: [configmaps], every: 1s, bound: 500ms, stuck_window: 3s}\n"
	file := filepath.Join(t.TempDir(), "probes.yml")
	writeFile(t, file, "probes:\n"+a+b)
	kubeconfig := writeKubeconfig(t, admin)
	e := startExporter(t, "--kubeconfig", kubeconfig, "--config.file", file, "--probe.replica", "r1",
		"--web.enable-lifecycle", "--web.disable-exporter-metrics", "--web.enable-pprof")

	succeeding := func(name string) func() bool {
		return func() bool {
			v, ok := e.series(t, "watchprobe_probe_success", map[string]string{"probe": name})
			return ok && v == 1
		}
	}
	localcluster.Eventually(t, 60*time.Second, "a succeeds", succeeding("a"))
	localcluster.Eventually(t, 60*time.Second, "b succeeds", succeeding("b"))
	localcluster.Eventually(t, 30*time.Second, "a has a live marker", func() bool { return len(probeMarkers(t, client, ns, "a")) > 0 })
	localcluster.Eventually(t, 30*time.Second, "a's WatchList syncs counted", func() bool {
		v, _ := e.series(t, "watchprobe_watchlist_syncs_total", map[string]string{"probe": "a", "resource": "configmaps"})
		return v > 0
	})

	t.Run("exporter conventions", func(t *testing.T) {
		if v, ok := e.series(t, "watchprobe_build_info", nil); !ok || v != 1 {
			t.Errorf("watchprobe_build_info missing with --web.disable-exporter-metrics")
		}
		if _, ok := e.series(t, "go_goroutines", nil); ok {
			t.Errorf("go_goroutines served with --web.disable-exporter-metrics")
		}
		// The self-health alert reads these: they stay.
		if v, ok := e.series(t, "watchprobe_exporter_starved_threshold_seconds", nil); !ok || v != 30 {
			t.Errorf("watchprobe_exporter_starved_threshold_seconds = %g (present %v) with --web.disable-exporter-metrics, want the tests' 30 (loadTolerant)", v, ok)
		}
		if v, ok := e.series(t, "watchprobe_config_last_reload_successful", nil); !ok || v != 1 {
			t.Errorf("watchprobe_config_last_reload_successful = %g (present %v) at start-up, want 1", v, ok)
		}
		if v, _ := e.series(t, "watchprobe_config_last_reload_success_timestamp_seconds", nil); time.Since(time.Unix(int64(v), 0)) > 10*time.Minute {
			t.Errorf("watchprobe_config_last_reload_success_timestamp_seconds = %g, not the start-up time", v)
		}
		if code, body := e.get("/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
			t.Errorf("/debug/pprof/: %d %.200q", code, body)
		}
		if code, body := e.get("/debug/pprof/heap"); code != 200 || len(body) == 0 {
			t.Errorf("/debug/pprof/heap: %d, %d bytes", code, len(body))
		}

		code, body := e.get("/config")
		if code != 200 {
			t.Fatalf("/config: %d %s", code, body)
		}
		if !strings.Contains(body, "key_file: "+etcdKey) {
			t.Errorf("/config does not show the etcd key file's path:\n%s", body)
		}
		key, err := os.ReadFile(etcdKey)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(body, "PRIVATE KEY") || strings.Contains(body, strings.TrimSpace(string(key))) {
			t.Errorf("/config shows a private key:\n%s", body)
		}
		// What /config shows is the running config: it loads, and is the
		// same probes.
		served := filepath.Join(t.TempDir(), "served.yml")
		writeFile(t, served, body)
		got, err := config.LoadFile(served)
		if err != nil {
			t.Fatalf("/config does not load as a config file: %v\n%s", err, body)
		}
		want, err := config.LoadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Compared as YAML: an empty list is nil in one and [] in the other.
		gotYAML, _ := yaml.Marshal(got)
		wantYAML, _ := yaml.Marshal(want)
		if string(gotYAML) != string(wantYAML) {
			t.Errorf("/config shows\n%s\nwant\n%s", gotYAML, wantYAML)
		}

		localcluster.Eventually(t, 30*time.Second, "the landing page lists b's recent cycles", func() bool {
			_, page := e.get("/")
			return strings.Contains(page, "Probe b:") && strings.Contains(page, "<td>success</td>")
		})
		_, page := e.get("/")
		for _, want := range []string{`href="/config"`, `href="/metrics"`, "Probe a:", "debug/pprof"} {
			if !strings.Contains(page, want) {
				t.Errorf("the landing page lacks %s", want)
			}
		}
	})

	// What would move if b's streams were restarted: its stream ends and
	// relists. Its writes go on counting from where they were.
	bEnds := func() float64 {
		v, _ := e.series(t, "watchprobe_watch_restarts_total", map[string]string{"probe": "b"})
		return v
	}
	bRelists := func() float64 {
		v, _ := e.series(t, "watchprobe_relists_total", map[string]string{"probe": "b"})
		return v
	}
	bWrites := func() float64 {
		v, _ := e.series(t, "watchprobe_writes_total", map[string]string{"probe": "b"})
		return v
	}
	endsBefore, relistsBefore := bEnds(), bRelists()
	if relistsBefore != 3 {
		t.Fatalf("b has relisted %g times before the reload, want 3 (one initial relist per path)", relistsBefore)
	}
	writesBefore := bWrites()

	writeFile(t, file, "probes:\n"+b+probeYAML("c"))
	if err := e.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// c's series appear as it starts, after b was kept or restarted: b's
	// writes read at once would be a handful had it been restarted.
	localcluster.Eventually(t, 60*time.Second, "c started", func() bool { return len(e.probeSeries(t, "c")) > 0 })
	if got := bWrites(); got < writesBefore {
		t.Errorf("b's writes went from %g to %g: its counters were reset", writesBefore, got)
	}
	localcluster.Eventually(t, 60*time.Second, "a's series gone", func() bool { return len(e.probeSeries(t, "a")) == 0 })
	localcluster.Eventually(t, 60*time.Second, "c succeeds", succeeding("c"))
	if left := probeMarkers(t, client, ns, "a"); len(left) != 0 {
		t.Errorf("a's markers left after its removal: %v", left)
	}
	if got := bEnds(); got != endsBefore {
		t.Errorf("b's watch streams ended %g times across the reload, want %g: the unchanged probe was restarted", got, endsBefore)
	}
	if got := bRelists(); got != relistsBefore {
		t.Errorf("b relisted %g times across the reload, want %g", got, relistsBefore)
	}
	if v, _ := e.series(t, "watchprobe_config_last_reload_successful", nil); v != 1 {
		t.Errorf("watchprobe_config_last_reload_successful = %g after a good reload", v)
	}

	// A broken file: rejected with the error --config.check gives, and
	// everything goes on as it was.
	writeFile(t, file, "probes:\n"+b+probeYAML("c")+"    kind: Secret\n")
	code, body := e.post("/-/reload")
	if code != http.StatusInternalServerError || !strings.Contains(body, `probe "c" (line 9): kind: "Secret" is not supported; use ConfigMap or Lease`) {
		t.Errorf("reloading a broken file: %d %q", code, body)
	}
	if v, _ := e.series(t, "watchprobe_config_last_reload_successful", nil); v != 0 {
		t.Errorf("watchprobe_config_last_reload_successful = %g after a failed reload, want 0", v)
	}
	cWrites := func() float64 {
		v, _ := e.series(t, "watchprobe_writes_total", map[string]string{"probe": "c"})
		return v
	}
	bNow, cNow := bWrites(), cWrites()
	localcluster.Eventually(t, 30*time.Second, "b and c go on writing", func() bool { return bWrites() > bNow && cWrites() > cNow })
	if code, _ := e.get("/-/ready"); code != 200 {
		t.Errorf("/-/ready answers %d after a failed reload", code)
	}
	if got := bEnds(); got != endsBefore {
		t.Errorf("b's watch streams ended %g times across the failed reload, want %g", got, endsBefore)
	}

	// A file that loads but names an etcd certificate that cannot be read:
	// refused as it is read, before b is stopped, so b goes on as it was
	// rather than being restarted with its previous settings.
	writeFile(t, file, "probes:\n"+strings.Replace(b, etcdCert, "/nonexistent/cert.pem", 1)+probeYAML("c"))
	bNow = bWrites()
	code, body = e.post("/-/reload")
	if want := `probe "b": etcd.cert_file: open /nonexistent/cert.pem: no such file or directory`; code != http.StatusInternalServerError || !strings.Contains(body, want) {
		t.Errorf("reloading with an unreadable certificate: %d %q, want 500 with %q", code, body, want)
	}
	if got := bWrites(); got < bNow {
		t.Errorf("b's writes went from %g to %g: the reload restarted it", bNow, got)
	}
	if v, _ := e.series(t, "watchprobe_config_last_reload_successful", nil); v != 0 {
		t.Errorf("watchprobe_config_last_reload_successful = %g after a refused reload, want 0", v)
	}

	if code, _ := e.get("/-/reload"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /-/reload answered %d, want 405", code)
	}
	writeFile(t, file+".2", "probes:\n"+probeYAML("d"))
	noLifecycle := startExporter(t, "--kubeconfig", kubeconfig, "--config.file", file+".2", "--probe.replica", "r2")
	localcluster.Eventually(t, 30*time.Second, "the exporter without the lifecycle API answers", func() bool { code, _ := noLifecycle.get("/-/healthy"); return code == 200 })
	if code, body := noLifecycle.post("/-/reload"); code != http.StatusForbidden {
		t.Errorf("POST /-/reload without --web.enable-lifecycle answered %d %q, want 403", code, body)
	}
	// Profiles only when asked for: they are not served on the metrics
	// port by default, nor linked from the landing page.
	if code, _ := noLifecycle.get("/debug/pprof/heap"); code == http.StatusOK {
		t.Errorf("/debug/pprof/heap served without --web.enable-pprof")
	}
	if _, page := noLifecycle.get("/"); strings.Contains(page, "debug/pprof") {
		t.Errorf("the landing page links profiles without --web.enable-pprof")
	}
	if v, _ := noLifecycle.series(t, "watchprobe_config_last_reload_successful", nil); v != 1 {
		t.Errorf("a refused reload counted as failed")
	}

	// Without a config file there is nothing to reload: SIGHUP and
	// /-/reload say so, and the configuration is not counted as broken.
	flagsOnly := startExporter(t, "--kubeconfig", kubeconfig, "--probe.namespace", ns, "--probe.replica", "r3", "--web.enable-lifecycle")
	localcluster.Eventually(t, 30*time.Second, "the exporter with flags only answers", func() bool { code, _ := flagsOnly.get("/-/healthy"); return code == 200 })
	if err := flagsOnly.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if code, body := flagsOnly.post("/-/reload"); code != http.StatusInternalServerError || !strings.Contains(body, "no --config.file to reload") {
		t.Errorf("POST /-/reload without a config file answered %d %q", code, body)
	}
	time.Sleep(time.Second) // SIGHUP is handled on a goroutine of its own
	select {
	case <-flagsOnly.Done():
		t.Fatalf("SIGHUP without a config file ended the exporter")
	default:
	}
	if v, _ := flagsOnly.series(t, "watchprobe_config_last_reload_successful", nil); v != 1 {
		t.Errorf("watchprobe_config_last_reload_successful = %g after reloads without a config file, want 1", v)
	}
}
