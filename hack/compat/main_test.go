package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	probekube "github.com/watchprobe/watchprobe/pkg/probe/kube"
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
	// The exporter's "untested version" is said outside this range.
	if want := fmt.Sprintf("1.%d to 1.%d", probekube.OldestTestedMinor, probekube.NewestTestedMinor); want != kubeRange {
		t.Errorf("pkg/probe/kube tests 1.x against %s; make compat runs %s", want, kubeRange)
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
	var chart struct {
		Annotations map[string]string
		KubeVersion string `yaml:"kubeVersion"`
	}
	data, err := os.ReadFile("../../charts/watchprobe/Chart.yaml")
	if err == nil {
		err = yaml.Unmarshal(data, &chart)
	}
	if err != nil {
		t.Fatal(err)
	}
	// A lower bound only: the chart never refuses a newer release.
	if want := fmt.Sprintf(">=1.%d.0-0", probekube.OldestTestedMinor); chart.KubeVersion != want {
		t.Errorf("Chart.yaml kubeVersion %q, want %q: the oldest release tested, and no upper bound", chart.KubeVersion, want)
	}
	for key, want := range map[string]string{"watchprobe/kube-apiserver-versions": kubeRange, "watchprobe/etcd-versions": etcdRange} {
		if got := chart.Annotations[key]; got != want {
			t.Errorf("Chart.yaml annotation %s = %q, want %q", key, got, want)
		}
	}
}

// -merge puts a run's columns into the table the last runs left: a column
// of the same versions replaced, a new one in release order, the others
// and their notes kept, a row they never ran shown as not run.
func TestMergeKeepsOtherColumns(t *testing.T) {
	passing := func(name, kube, etcd string, took time.Duration) column {
		c := column{cp: controlPlane{name: name, kube: name}, kube: kube, etcd: etcd, took: took,
			results: map[string]map[string]string{}, p50: map[string]map[string]string{}, runFailed: map[string]bool{}, failedOutside: map[string][]string{}}
		for _, r := range rows {
			if c.results[r.run] == nil {
				c.results[r.run] = map[string]string{}
			}
			for _, test := range r.tests {
				c.results[r.run][test] = "pass"
			}
		}
		return c
	}
	old34 := passing("1.34", "1.34.4", "3.6.4", time.Minute)
	old34.results["probe"]["TestStallDetected"] = "fail"
	old34.runFailed["probe"] = true
	old37 := passing("1.37", "1.37.2", "3.7.0", time.Minute)
	old37e := passing("1.37+etcd3.6", "1.37.2", "3.6.16", time.Minute)
	// A table from before the last row existed.
	before := render([]column{old34, old37e, old37})
	last := rows[len(rows)-1].what
	var kept []string
	for _, line := range strings.Split(before, "\n") {
		if !strings.HasPrefix(line, "| "+last+" |") {
			kept = append(kept, line)
		}
	}
	doc := filepath.Join(t.TempDir(), "compat.md")
	if err := os.WriteFile(doc, []byte("# x\n\n<!-- BEGIN compat: generated by `make compat`, do not edit -->\n\n"+strings.Join(kept, "\n")+"\n<!-- END compat -->\n\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	new34 := passing("1.34", "1.34.4", "3.6.4", 2*time.Minute)
	new31 := passing("1.31", "1.31.14", "3.5.13", 3*time.Minute)
	if err := mergeInto(doc, []column{new34, new31}); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	body, err := block(out, "compat")
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseTable(body)
	if err != nil {
		t.Fatal(err)
	}
	wantHeaders := []string{header(new31), header(new34), header(old37), header(old37e)}
	if !slices.Equal(got.headers, wantHeaders) {
		t.Errorf("columns %q, want %q", got.headers, wantHeaders)
	}
	if c := got.cells[header(new34)]; c["stall raised and cleared"] != "pass" || c[minutesRow] != "2.0" {
		t.Errorf("1.34's column not replaced: %v", c)
	}
	if c := got.cells[header(new31)]; c[last] != "pass" || c[minutesRow] != "3.0" {
		t.Errorf("1.31's column: %v", c)
	}
	if c := got.cells[header(old37)]; c[last] != "not run" || c["stall raised and cleared"] != "pass" {
		t.Errorf("1.37's column not kept as it was, its missing row not run: %v", c)
	}
	if len(got.notes) != 0 {
		t.Errorf("notes %q: 1.34's old failure should have gone with its column", got.notes)
	}
	if !strings.HasSuffix(string(out), "<!-- END compat -->\n\nafter\n") || !strings.HasPrefix(string(out), "# x\n\n") {
		t.Errorf("the doc around the block changed:\n%s", out)
	}
}

// The doc's own table is one -merge can read.
func TestDocTableParses(t *testing.T) {
	doc, err := os.ReadFile("../../docs/compatibility.md")
	if err != nil {
		t.Fatal(err)
	}
	body, err := block(doc, "compat")
	if err != nil {
		t.Fatal(err)
	}
	tab, err := parseTable(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range tab.headers {
		if !headerRE.MatchString(h) || tab.cells[h][minutesRow] == "" {
			t.Errorf("column %q: not a column render writes", h)
		}
	}
}
