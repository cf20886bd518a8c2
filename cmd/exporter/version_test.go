package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// A kube-apiserver newer than the tested range is measured, never refused:
// `check` passes on it and notes an untested version, naming the release.
// The real apiserver stands for a newer one by lowering the newest tested
// minor below it (kube.NewestTestedMinor), not by serving another /version.
func TestCheckUntestedVersion(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{})
	release, err := c.KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	v, err := kube.ParseServerVersion(version.Info{GitVersion: release})
	if err != nil {
		t.Fatal(err)
	}
	admin := c.AdminConfig()
	localcluster.CreateNamespacesForTest(t, kubernetes.NewForConfigOrDie(admin), "check-untested")
	kubeconfig := writeKubeconfig(t, admin)
	config := filepath.Join(t.TempDir(), "probes.yml")
	writeFile(t, config, `probes:
  - name: configmaps
    namespace: check-untested
    interval: 500ms
    deadline: 2s
    paths: [watch]
`)
	args := []string{"check", "--kubeconfig", kubeconfig, "--config.file", config, "--cycles", "2", "--objective.latency", "2s"}

	// In the range: no note.
	code, stdout, stderr := runInProcess(append(args, "--output", "json")...)
	if code != checkOK {
		t.Fatalf("exit status %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if r := validateReport(t, stdout); r.ServerVersion != release || len(r.Notes) != 0 {
		t.Errorf("server_version %q, notes %q; want %s and no note", r.ServerVersion, r.Notes, release)
	}

	saved := kube.NewestTestedMinor
	kube.NewestTestedMinor = v.Minor - 1
	t.Cleanup(func() { kube.NewestTestedMinor = saved })
	want := fmt.Sprintf("untested version: kube-apiserver %s is newer than 1.%d", release, v.Minor-1)
	code, stdout, stderr = runInProcess(append(args, "--output", "json")...)
	if code != checkOK {
		t.Fatalf("exit status %d on an untested version, want 0: nothing refuses\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	r := validateReport(t, stdout)
	if !r.OK || len(r.Notes) != 1 || !strings.HasPrefix(r.Notes[0], want) {
		t.Errorf("ok %v, notes %q; want ok and one note %q", r.OK, r.Notes, want)
	}
	if strings.Count(stderr, want) != 1 {
		t.Errorf("the log says %q %d times, want once:\n%s", want, strings.Count(stderr, want), stderr)
	}
	code, stdout, stderr = runInProcess(args...)
	if code != checkOK || !strings.Contains(stdout, "note: "+want) || !strings.Contains(stdout, "(kube-apiserver "+release+")") {
		t.Errorf("text report (exit status %d) does not name the release and note %q:\n%s\nstderr:\n%s", code, want, stdout, stderr)
	}
}
