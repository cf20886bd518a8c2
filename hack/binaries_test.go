package hack

import (
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// unlinked are packages no binary of watchprobe links, for its size and so
// its resident memory (docs/performance.md, "The binary's pages"): the
// kernel keeps a binary's pages resident 64 KiB around each one touched,
// so what is linked and initialised is resident, used or not. A rule
// ending in "/..." is that package and every one below it.
//
// The exporter links client-go's discovery, which the list-side checks
// resolve their resource types with (pkg/probe/resolve), and through it
// k8s.io/client-go/kubernetes/scheme: a copy of discovery without that
// scheme would save about 12 MB of its binary, but would be client-go's
// code written again (docs/performance.md, "The binary's pages"). The
// node agent, on every node, links neither.
var unlinked = []struct {
	pkg, why string
	// except are the binaries allowed to link it.
	except []string
}{
	{"k8s.io/client-go/kubernetes/scheme", "client-go's scheme of every API group: its init registers every built-in type, which the linker then keeps with their methods; pkg/probe/kube has a scheme of the groups used", []string{"cmd/exporter"}},
	{"k8s.io/client-go/kubernetes", "the typed clientset of every API group; pkg/probe/kube's Client has the groups used", nil},
	{"k8s.io/client-go/kubernetes/typed/...", "the typed clients of every API group link its scheme; pkg/probe/kube's Client has the groups used", nil},
	{"k8s.io/client-go/discovery/...", "it decodes with k8s.io/client-go/kubernetes/scheme; the exporter's list-side checks need it, the agent does not", []string{"cmd/exporter"}},
	{"k8s.io/client-go/informers/...", "the informer factories link every group's informers and listers; build the informer from a ListWatch", nil},
	{"k8s.io/client-go/testing", "client-go's fakes link strategic merge patch, managed fields and the OpenAPI models; k8s.io/client-go/gentype holds them, pkg/probe/kube's Resource is its client without", nil},
}

// Every binary (cmd/...) leaves the unlinked packages out, naming the
// chain of imports that brings one in.
func TestBinariesLeaveHeavyPackagesOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Name,Imports", "../cmd/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	var mains []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath, Name string
			Imports          []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		imports[p.ImportPath] = p.Imports
		if p.Name == "main" && strings.HasPrefix(p.ImportPath, module+"cmd/") {
			mains = append(mains, p.ImportPath)
		}
	}
	if len(mains) == 0 {
		t.Fatal("no binaries under cmd/")
	}
	for _, m := range mains {
		// The first chain of imports from m to each package it links.
		via := map[string][]string{m: {m}}
		queue := []string{m}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, i := range imports[p] {
				if _, seen := via[i]; !seen {
					via[i] = append(append([]string(nil), via[p]...), i)
					queue = append(queue, i)
				}
			}
		}
		for _, u := range unlinked {
			if slices.Contains(u.except, strings.TrimPrefix(m, module)) {
				continue
			}
			for dep, chain := range via {
				if forbids(u.pkg, dep) {
					t.Errorf("%s links %s (%s): %s", strings.TrimPrefix(m, module), dep, strings.Join(chain, " -> "), u.why)
					break
				}
			}
		}
	}
}
