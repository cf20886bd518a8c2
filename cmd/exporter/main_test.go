package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/starve"
)

// The helpers that the tests of several files share. Most of these tests
// run the real exporter binary against the real control plane.

var exporterBin string

func TestMain(m *testing.M) {
	starve.ClientMain() // the self-health test's independent client runs as this binary
	dir, err := os.MkdirTemp("", "watchprobe-bin-")
	if err != nil {
		panic(err)
	}
	if exporterBin, err = exportertest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// exporter is the exporter binary running for a test; its log is shown if
// the test fails.
type exporter struct {
	*exportertest.Process
	stderr *bytes.Buffer
}

func startExporter(t *testing.T, args ...string) *exporter {
	t.Helper()
	return startExporterEnv(t, nil, args...)
}

// startExporterEnv starts the exporter with env added to this process's,
// tolerant of the test machine's load (loadTolerant).
func startExporterEnv(t *testing.T, env []string, args ...string) *exporter {
	t.Helper()
	return startBinary(t, exporterBin, env, loadTolerant(args)...)
}

// loadTolerant gives args a starvation threshold of 30s unless they set
// one. The tests here count injected faults exactly, and on the loaded test
// machine (several control planes on two cores) the exporter's self-monitor
// rightly finds itself starved at times and makes a share of its verdicts
// unmeasurable: a third of them under a load of 15, none of them injected.
// No cgroup limits these exporters, so nothing else counts as starvation.
// The self-health tests start theirs with the default.
func loadTolerant(args []string) []string {
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--exporter.starved-threshold") }) {
		return args
	}
	return append([]string{"--exporter.starved-threshold", "30s"}, args...)
}

// startBinary starts bin, the exporter or what executes it, as
// startExporterEnv does.
func startBinary(t *testing.T, bin string, env []string, args ...string) *exporter {
	t.Helper()
	e := &exporter{stderr: &bytes.Buffer{}}
	p, err := exportertest.Start(bin, env, e.stderr, args...)
	if err != nil {
		t.Fatal(err)
	}
	e.Process = p
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("exporter log:\n%s", e.stderr)
		}
	})
	return e
}

// get fetches path; a request that fails is answered 0 with its error.
func (e *exporter) get(path string) (int, string) {
	code, body, err := e.Get(path, "")
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

// series returns every sample of the exporter's /metrics whose name is
// name and whose labels include match, summed; and whether there was one.
func (e *exporter) series(t *testing.T, name string, match map[string]string) (float64, bool) {
	t.Helper()
	code, body := e.get("/metrics")
	if code != http.StatusOK {
		return 0, false
	}
	families, err := exportertest.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	return exportertest.Sum(families, name, match)
}

// configMapNames lists the ConfigMaps in ns that selector selects.
func configMapNames(t *testing.T, client kubernetes.Interface, ns, selector string) []string {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	return names
}

func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := localcluster.WriteKubeconfig(rc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
