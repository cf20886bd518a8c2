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
// the exporter and what it must never import. A rule ending in "/..." is
// that package and every one below it; any other names one package.
// Judgement is pure: no client, no paths, no probe kinds; the clients know
// no path and the paths no probe kind; metrics and config know nothing of
// the probes that use them.
var packageRules = []struct {
	pkg       string
	forbidden []string
}{
	{"pkg/config", []string{"pkg/probe/...", "pkg/check/...", "k8s.io/client-go/..."}},
	{"pkg/metrics", []string{"pkg/probe/...", "pkg/check/...", "pkg/selfhealth", "k8s.io/client-go/..."}},
	{"pkg/selfhealth", []string{"pkg/probe/...", "pkg/check/...", "k8s.io/client-go/..."}},
	{"pkg/probe/judge", []string{"pkg/probe", "pkg/probe/kube", "pkg/probe/paths", "pkg/probe/freshness", "pkg/agent", "pkg/check",
		"pkg/selfhealth", "k8s.io/client-go/...", "go.etcd.io/..."}},
	{"pkg/probe/kube", []string{"pkg/probe", "pkg/probe/paths", "pkg/probe/freshness", "pkg/agent", "pkg/check"}},
	{"pkg/probe/paths", []string{"pkg/probe", "pkg/probe/paths/etcdpath", "pkg/probe/freshness", "pkg/agent", "pkg/check", "go.etcd.io/etcd/client/v3", "google.golang.org/grpc"}},
	{"pkg/probe/paths/etcdpath", []string{"pkg/probe", "pkg/probe/freshness", "pkg/agent", "pkg/check"}},
	{"pkg/probe/resolve", []string{"pkg/probe", "pkg/probe/kube", "pkg/probe/paths", "pkg/probe/judge", "pkg/probe/freshness", "pkg/probe/watchlist", "pkg/check"}},
	{"pkg/probe/freshness", []string{"pkg/probe", "pkg/probe/kube", "pkg/probe/paths", "pkg/probe/watchlist", "pkg/check"}},
	{"pkg/probe/watchlist", []string{"pkg/probe", "pkg/probe/kube", "pkg/probe/paths", "pkg/probe/freshness", "pkg/check"}},
	{"pkg/probe", []string{"pkg/check", "pkg/selfhealth", "pkg/agent", "cmd/..."}},
	// The node agent is a probe kind of its own, on the judgement, the
	// clients and the watch path; none of the exporter's other kinds.
	{"pkg/agent", []string{"pkg/probe", "pkg/probe/paths/etcdpath", "pkg/probe/freshness", "pkg/probe/watchlist", "pkg/probe/resolve", "pkg/check", "pkg/selfhealth", "cmd/...",
		"go.etcd.io/etcd/client/v3", "google.golang.org/grpc"}},
	{"pkg/check", []string{"pkg/selfhealth", "cmd/..."}},
}

// forbids reports whether the rule f covers the import path dep; rules
// without a domain are the module's own packages.
func forbids(f, dep string) bool {
	if !strings.Contains(strings.SplitN(f, "/", 2)[0], ".") {
		f = module + f
	}
	if base, ok := strings.CutSuffix(f, "/..."); ok {
		return dep == base || strings.HasPrefix(dep, base+"/")
	}
	return dep == f
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
			for _, f := range r.forbidden {
				if forbids(f, dep) {
					t.Errorf("%s depends on %s, which it must not (%s)", r.pkg, dep, f)
				}
			}
		}
	}
}
