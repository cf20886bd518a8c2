package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// minorOf returns the minor ("1.34", "3.6") of the version that the tools
// module in dir requires of mod.
func minorOf(t *testing.T, dir, mod string) string {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join("..", "tools", dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(mod) + `\s+v(\d+\.\d+)\.`).FindSubmatch(gomod)
	if m == nil {
		t.Fatalf("hack/tools/%s/go.mod requires no %s", dir, mod)
	}
	return string(m[1])
}

// The range the docs state is the range of the control planes `make compat`
// runs, read from the tools modules that build them.
func TestRangeIsWhatCompatRuns(t *testing.T) {
	var kube, etcd []string
	for _, cp := range controlPlanes {
		dir := "controlplane"
		if cp.kube != "" {
			dir += "-" + cp.kube
		}
		k := minorOf(t, dir, "k8s.io/kubernetes")
		if cp.kube != "" && k != cp.kube {
			t.Errorf("hack/tools/%s builds kubernetes %s", dir, k)
		}
		e := minorOf(t, dir, "go.etcd.io/etcd/server/v3")
		if cp.etcd != "" {
			if e = minorOf(t, "etcd-"+cp.etcd, "go.etcd.io/etcd/server/v3"); e != cp.etcd {
				t.Errorf("hack/tools/etcd-%s builds etcd %s", cp.etcd, e)
			}
		}
		kube, etcd = append(kube, k), append(etcd, e)
	}
	byVersion := func(a, b string) int {
		x, y := parseMinor(a), parseMinor(b)
		if x[0] != y[0] {
			return x[0] - y[0]
		}
		return x[1] - y[1]
	}
	for _, tc := range []struct {
		what, stated string
		got          []string
	}{{"kube-apiserver", kubeRange, kube}, {"etcd", etcdRange, etcd}} {
		if want := slices.MinFunc(tc.got, byVersion) + " to " + slices.MaxFunc(tc.got, byVersion); tc.stated != want {
			t.Errorf("%s range stated %q; make compat runs %q", tc.what, tc.stated, want)
		}
	}
}

func parseMinor(v string) [2]int {
	var out [2]int
	for i, part := range strings.SplitN(v, ".", 2) {
		for _, c := range part {
			out[i] = out[i]*10 + int(c-'0')
		}
	}
	return out
}

// README.md, the install guide and the chart state the range the suite
// passed, in the same words, and no other.
func TestDocsStateTheRange(t *testing.T) {
	for _, path := range []string{"README.md", "docs/install.md", "docs/compatibility.md", "charts/watchprobe/README.md.gotmpl", "charts/watchprobe/README.md"} {
		doc, err := os.ReadFile(filepath.Join("..", "..", path))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"kube-apiserver " + kubeRange, "etcd " + etcdRange} {
			if !strings.Contains(string(doc), want) {
				t.Errorf("%s does not state %q", path, want)
			}
		}
		if strings.Contains(string(doc), "1.29 and later") {
			t.Errorf("%s still claims 1.29 and later", path)
		}
	}
	var chart struct{ Annotations map[string]string }
	data, err := os.ReadFile("../../charts/watchprobe/Chart.yaml")
	if err == nil {
		err = yaml.Unmarshal(data, &chart)
	}
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"watchprobe/kube-apiserver-versions": kubeRange, "watchprobe/etcd-versions": etcdRange} {
		if got := chart.Annotations[key]; got != want {
			t.Errorf("Chart.yaml annotation %s = %q, want %q", key, got, want)
		}
	}
}
