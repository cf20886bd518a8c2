package hack

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/watchprobe/watchprobe/"

// packageRules are the package graph docs/design.md draws: each package of
// the exporter and what it must never import. Judgement is pure: no
// client, no paths, no probe kinds; metrics and config know nothing of
// the probes that use them.
var packageRules = []struct {
	pkg       string
	forbidden []string
}{
	{"pkg/config", []string{module + "pkg/probe", module + "pkg/check", "k8s.io/client-go"}},
	{"pkg/metrics", []string{module + "pkg/probe", module + "pkg/check", "k8s.io/client-go"}},
	{"pkg/probe/judge", []string{module + "pkg/probe", module + "pkg/check", "k8s.io/client-go", "go.etcd.io/"}},
	{"pkg/probe/freshness", []string{module + "pkg/probe", module + "pkg/check"}},
	{"pkg/probe", []string{module + "pkg/check", module + "cmd/"}},
	{"pkg/check", []string{module + "cmd/"}},
}

// The package graph runs one way, as docs/design.md draws it: every
// package's imports, its tests' aside, against the rules.
func TestPackageGraph(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "../pkg/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Deps       []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		deps[strings.TrimPrefix(p.ImportPath, module)] = p.Deps
	}
	for _, r := range packageRules {
		d, ok := deps[r.pkg]
		if !ok {
			t.Errorf("%s: no such package; the rules and docs/design.md name it", r.pkg)
			continue
		}
		for _, dep := range d {
			if dep == module+r.pkg || strings.HasPrefix(dep, module+r.pkg+"/") {
				continue // itself, or a package of its own below it
			}
			for _, f := range r.forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s depends on %s, which it must not (%s)", r.pkg, dep, f)
				}
			}
		}
	}
}
