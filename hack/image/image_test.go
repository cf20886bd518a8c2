package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/watchprobe/watchprobe/internal/repotest"
)

// TestImage runs what `make image PUSH=...` runs, for both platforms, into
// a registry in this process, pulls the image back by its tag and runs the
// binaries in it: the exporter and, where the tree has its package, the
// node agent (TestAssembleHoldsEveryProgram holds the image to both
// without building them). The builder runs as `go run`, outside this test's race
// detector, which would make compressing two 55 MB binaries four times
// slower. The first run cross-compiles the exporter for arm64 (minutes on
// 2 cores); once both are in Go's build cache it takes about a minute,
// mostly linking the binaries (the second build included) and compressing.
func TestImage(t *testing.T) {
	version := repotest.Version(t, "../..")
	const revision = "0123456789abcdef0123456789abcdef01234567"
	created := time.Unix(1796025518, 0).UTC()

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := strings.TrimPrefix(srv.URL, "http://") + "/watchprobe/watchprobe"
	dir := filepath.Join(t.TempDir(), "image")
	var progs []program
	for _, p := range programs {
		if _, err := os.Stat(filepath.Join("../..", p.Package)); err == nil {
			progs = append(progs, p)
		} else {
			t.Logf("no %s in this tree: the image is built without %s", p.Package, p.Path)
		}
	}
	var names []string
	for _, p := range progs {
		names = append(names, path.Base(p.Path))
	}
	args := []string{"-root", "../..", "-version", version, "-revision", revision, "-source-date-epoch", "1796025518", "-repository", "ghcr.io/watchprobe/watchprobe", "-binaries", strings.Join(names, ",")}
	out := runImage(t, append(args, "-o", dir, "-push", repo)...)
	pushed, err := name.NewDigest(out)
	if err != nil || pushed.Context().String() != repo {
		t.Fatalf("the builder printed %q, want %s@sha256:...", out, repo)
	}

	want := pushed.DigestStr()
	fromLayout, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := fromLayout.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(lm.Manifests) != 1 || lm.Manifests[0].Digest.String() != want || lm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Errorf("layout index.json = %+v, want one entry %s named %s", lm.Manifests, want, version)
	}

	tag, err := name.NewTag(repo + ":" + version)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := pulled.Digest(); d.String() != want {
		t.Errorf("%s is %s, but %s was pushed", tag, d, want)
	}
	im, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.Annotations["org.opencontainers.image.version"] != version {
		t.Errorf("index annotations %v lack version %s", im.Annotations, version)
	}
	var platforms []string
	manifests := map[string]v1.Hash{}
	ran := false
	for _, desc := range im.Manifests {
		p := desc.Platform
		if p == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		platforms = append(platforms, p.String())
		manifests[p.String()] = desc.Digest
		img, err := pulled.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		bins := checkImage(t, img, *p, progs, version, revision, created)
		if p.OS == runtime.GOOS && p.Architecture == runtime.GOARCH {
			for i, prog := range progs {
				checkVersion(t, path.Base(prog.Path), bins[i], version, revision)
			}
			ran = true
		}
	}
	if got := strings.Join(platforms, ","); got != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %s, want linux/amd64,linux/arm64", got)
	}
	if !ran {
		t.Logf("no image for %s/%s here: --version not run", runtime.GOOS, runtime.GOARCH)
	}

	// Building again gives the same image, byte for byte: nothing of the
	// moment or the machine gets in. One platform is enough to show it.
	dir2 := filepath.Join(t.TempDir(), "image")
	runImage(t, append(args, "-o", dir2, "-platforms", "linux/amd64")...)
	again, err := layout.ImageIndexFromPath(dir2)
	if err != nil {
		t.Fatal(err)
	}
	first, err := pulled.Image(manifests["linux/amd64"])
	if err != nil {
		t.Fatal(err)
	}
	second := onlyImage(t, again)
	if d, _ := second.Digest(); d != manifests["linux/amd64"] {
		// Say which part differs: a binary that differs means the sources
		// changed between the builds, or the Go build is not reproducible.
		l1, _ := first.Manifest()
		l2, _ := second.Manifest()
		t.Errorf("building linux/amd64 again gave the manifest %s, want %s as before:\nconfig %s, then %s\nlayers %v\nthen   %v",
			d, manifests["linux/amd64"], l1.Config.Digest, l2.Config.Digest, layerDigests(l1), layerDigests(l2))
	}
}

func layerDigests(m *v1.Manifest) []string {
	var ds []string
	for _, l := range m.Layers {
		ds = append(ds, l.Digest.String())
	}
	return ds
}

// runImage runs the builder as `make image` does and returns what it printed
// on stdout: the image's reference.
func runImage(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "."}, args...)...)
	// Push anonymously, whatever docker login left on this machine.
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./hack/image %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	t.Logf("go run ./hack/image %s: %s\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), stderr.Bytes())
	return strings.TrimSpace(string(out))
}

// onlyImage is the one image in the layout's one index.
func onlyImage(t *testing.T, l v1.ImageIndex) v1.Image {
	t.Helper()
	idx, err := l.ImageIndex(onlyManifest(t, l, "layout index.json"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(onlyManifest(t, idx, "image index"))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// onlyManifest is the digest of the one manifest idx lists; what names idx
// where it lists none or more.
func onlyManifest(t *testing.T, idx v1.ImageIndex, what string) v1.Hash {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("%s: %v, %+v", what, err, m)
	}
	return m.Manifests[0].Digest
}

// checkImage checks the image's config and files, and returns the binaries
// of progs in it.
func checkImage(t *testing.T, img v1.Image, p v1.Platform, progs []program, version, revision string, created time.Time) [][]byte {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != p.OS || cfg.Architecture != p.Architecture {
		t.Errorf("%s: config says %s/%s", p, cfg.OS, cfg.Architecture)
	}
	c := cfg.Config
	if c.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532 (distroless nonroot)", p, c.User)
	}
	if strings.Join(c.Entrypoint, " ") != "/bin/watchprobe" || len(c.Cmd) != 0 {
		t.Errorf("%s: entrypoint %q cmd %q, want [/bin/watchprobe] and no cmd", p, c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["9917/tcp"]; !ok {
		t.Errorf("%s: ports %v lack 9917/tcp", p, c.ExposedPorts)
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/watchprobe/watchprobe",
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.licenses": "Apache-2.0",
	} {
		if c.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", p, k, c.Labels[k], v)
		}
	}
	if !cfg.Created.Time.Equal(created) {
		t.Errorf("%s: created %s, want the commit time %s", p, cfg.Created.Time, created)
	}

	files := extract(t, img)
	for name, mode := range map[string]int64{"bin/watchprobe": 0o755, "tmp/": 0o1777, "home/nonroot/": 0o700, "etc/passwd": 0o644} {
		if f, ok := files[name]; !ok {
			t.Errorf("%s: no %s in the image", p, name)
		} else if f.hdr.Mode != mode {
			t.Errorf("%s: %s has mode %o, want %o", p, name, f.hdr.Mode, mode)
		}
	}
	if f := files["home/nonroot/"]; f.hdr != nil && (f.hdr.Uid != 65532 || f.hdr.Gid != 65532) {
		t.Errorf("%s: /home/nonroot owned by %d:%d, want 65532:65532", p, f.hdr.Uid, f.hdr.Gid)
	}
	if !strings.Contains(string(files["etc/passwd"].data), "\nnonroot:x:65532:65532:") {
		t.Errorf("%s: /etc/passwd has no nonroot user 65532:\n%s", p, files["etc/passwd"].data)
	}
	ca := files["etc/ssl/certs/ca-certificates.crt"].data
	if n := countCerts(t, ca); n < 100 {
		t.Errorf("%s: the CA bundle holds %d certificates, want Mozilla's (over 100)", p, n)
	}

	var bins [][]byte
	for _, prog := range progs {
		f, ok := files[prog.Path[1:]]
		if !ok {
			t.Errorf("%s: no %s in the image", p, prog.Path)
			bins = append(bins, nil)
			continue
		}
		if f.hdr.Mode != 0o755 {
			t.Errorf("%s: %s has mode %o, want 755", p, prog.Path, f.hdr.Mode)
		}
		checkELF(t, p, prog.Path, f.data)
		bins = append(bins, f.data)
	}
	return bins
}

func checkELF(t *testing.T, p v1.Platform, name string, bin []byte) {
	t.Helper()
	e, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Errorf("%s: %s is not an ELF binary: %v", p, name, err)
		return
	}
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]; e.Machine != want {
		t.Errorf("%s: %s is built for %s, want %s", p, name, e.Machine, want)
	}
	// Static: nothing else in the image could satisfy a dynamic loader.
	for _, prog := range e.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s: %s is dynamically linked", p, name)
		}
	}
}

func countCerts(t *testing.T, data []byte) int {
	t.Helper()
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return n
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Fatalf("the CA bundle's certificate %d does not parse: %v", n+1, err)
		}
		n++
	}
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// extract reads the image's file system as a container runtime would see
// it, layers applied in order.
func extract(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]entry{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = entry{hdr: h, data: data}
		}
		rc.Close()
	}
	return files
}

// checkVersion runs a binary pulled from the registry.
func checkVersion(t *testing.T, name string, bin []byte, version, revision string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(file, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", name, err, out)
	}
	m := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `, version (\S+) \(branch: \S+, revision: (\S+)\)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("%s --version printed:\n%s", name, out)
	}
	if string(m[1]) != version || string(m[2]) != revision {
		t.Errorf("the image's %s reports version %s revision %s, want %s %s (VERSION and the revision given)", name, m[1], m[2], version, revision)
	}
}

// The image holds every program of the image's list in one layer, each
// its own build, executable, the exporter the entrypoint: the chart's
// DaemonSet runs /bin/watchprobe-agent from the exporter's image.
func TestAssembleHoldsEveryProgram(t *testing.T) {
	if got := []string{programs[0].Path, programs[1].Path}; got[0] != "/bin/watchprobe" || got[1] != "/bin/watchprobe-agent" || len(programs) != 2 {
		t.Fatalf("programs %v, want /bin/watchprobe and /bin/watchprobe-agent", programs)
	}
	o := options{Version: "0.1.0", Revision: "abc", Created: time.Unix(1796025518, 0).UTC(), Programs: programs}
	amd64 := v1.Platform{OS: "linux", Architecture: "amd64"}
	exporter, agent := []byte("the exporter's build"), []byte("the agent's build")
	idx, err := assemble(o, []binary{{platform: amd64, data: [][]byte{exporter, agent}}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(onlyManifest(t, idx, "image index"))
	if err != nil {
		t.Fatal(err)
	}
	files := extract(t, img)
	for name, data := range map[string][]byte{"bin/watchprobe": exporter, "bin/watchprobe-agent": agent} {
		f, ok := files[name]
		if !ok {
			t.Errorf("no %s in the image", name)
			continue
		}
		if !bytes.Equal(f.data, data) || f.hdr.Mode != 0o755 || f.hdr.Typeflag != tar.TypeReg {
			t.Errorf("%s: %q, mode %o, type %c; want %q, 755, a regular file", name, f.data, f.hdr.Mode, f.hdr.Typeflag, data)
		}
	}
	// Both in the one layer of the image's own files, which says how.
	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("%d layers (%v), want the base and the binaries'", len(layers), err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Config; len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/bin/watchprobe" {
		t.Errorf("entrypoint %v, want /bin/watchprobe", c.Entrypoint)
	}
	by := cfg.History[len(cfg.History)-1].CreatedBy
	for _, want := range []string{"hack/build.sh /bin/watchprobe 0.1.0 abc ./cmd/exporter", "hack/build.sh /bin/watchprobe-agent 0.1.0 abc ./cmd/agent"} {
		if !strings.Contains(by, want) {
			t.Errorf("the binaries' layer says it was made by %q, lacking %q", by, want)
		}
	}

	// A binary short, or the entrypoint not first: refused, not an image
	// without the program the chart runs.
	if _, err := assemble(o, []binary{{platform: amd64, data: [][]byte{exporter}}}); err == nil {
		t.Error("one binary for two programs: assembled")
	}
	o.Programs = []program{programs[1]}
	if _, err := assemble(o, []binary{{platform: amd64, data: [][]byte{agent}}}); err == nil || !strings.Contains(err.Error(), "entrypoint") {
		t.Errorf("an image without its entrypoint: %v, want refused naming the entrypoint", err)
	}
}

func TestPushRefusesATag(t *testing.T) {
	_, err := push(context.Background(), nil, "127.0.0.1:1/watchprobe:latest", "0.1.0")
	if err == nil || !strings.Contains(err.Error(), "-push") || !strings.Contains(err.Error(), "without tag") {
		t.Errorf("push to a tagged reference: %v, want an error naming -push and saying to leave the tag out", err)
	}
}

func TestLayoutLeavesOtherDirectoriesAlone(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := writeLayout(dir, nil, "0.1.0")
	if err == nil || !strings.Contains(err.Error(), "-o "+dir) {
		t.Errorf("writing a layout over a foreign directory: %v, want an error naming -o", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the foreign directory lost its file: %v", err)
	}
}

func TestCreationTime(t *testing.T) {
	got, err := creationTime(".", "1796025518")
	if err != nil || !got.Equal(time.Unix(1796025518, 0)) {
		t.Errorf("creationTime(SOURCE_DATE_EPOCH=1796025518) = %s, %v", got, err)
	}
	if _, err := creationTime(".", "yesterday"); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("a bad SOURCE_DATE_EPOCH: %v, want an error naming it", err)
	}
}

func TestFlagsNameTheProblem(t *testing.T) {
	ok := []string{"-version", "0.1.0", "-revision", "abc", "-repository", "ghcr.io/watchprobe/watchprobe"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-revision", "abc", "-repository", "r"}, "-version"},
		{[]string{"-version", "0.1.0+build", "-revision", "abc", "-repository", "r"}, "-version"},
		{[]string{"-version", "0.1.0", "-repository", "r"}, "-revision"},
		{[]string{"-version", "0.1.0", "-revision", "abc", "-repository", "Not/Valid:tag"}, "-repository"},
		{slices.Concat(ok, []string{"-platforms", "linux"}), "-platforms"},
		{slices.Concat(ok, []string{"-source-date-epoch", "now"}), "SOURCE_DATE_EPOCH"},
		{slices.Concat(ok, []string{"-binaries", "watchprobe,agent"}), `-binaries: "agent" is none of the image's binaries (watchprobe, watchprobe-agent)`},
		{slices.Concat(ok, []string{"-binaries", "watchprobe-agent"}), "the image needs watchprobe, its entrypoint"},
	} {
		// Each fails before anything is built.
		if err := run(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("image %s: %v, want an error naming %s", strings.Join(c.args, " "), err, c.want)
		}
	}
}
