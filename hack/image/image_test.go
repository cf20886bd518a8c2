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
// binary in it. The builder runs as `go run`, outside this test's race
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
	args := []string{"-root", "../..", "-version", version, "-revision", revision, "-source-date-epoch", "1796025518", "-repository", "ghcr.io/watchprobe/watchprobe"}
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
		bin := checkImage(t, img, *p, version, revision, created)
		if p.OS == runtime.GOOS && p.Architecture == runtime.GOARCH {
			checkVersion(t, bin, version, revision)
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

func checkImage(t *testing.T, img v1.Image, p v1.Platform, version, revision string, created time.Time) []byte {
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

	bin := files["bin/watchprobe"].data
	e, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: /bin/watchprobe is not an ELF binary: %v", p, err)
	}
	if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]; e.Machine != want {
		t.Errorf("%s: /bin/watchprobe is built for %s, want %s", p, e.Machine, want)
	}
	// Static: nothing else in the image could satisfy a dynamic loader.
	for _, prog := range e.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Errorf("%s: /bin/watchprobe is dynamically linked", p)
		}
	}
	return bin
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

// checkVersion runs the binary pulled from the registry.
func checkVersion(t *testing.T, bin []byte, version, revision string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "watchprobe")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("watchprobe --version: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`^watchprobe, version (\S+) \(branch: \S+, revision: (\S+)\)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("watchprobe --version printed:\n%s", out)
	}
	if string(m[1]) != version || string(m[2]) != revision {
		t.Errorf("the image's binary reports version %s revision %s, want %s %s (VERSION and the revision given)", m[1], m[2], version, revision)
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
	} {
		// Each fails before anything is built.
		if err := run(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("image %s: %v, want an error naming %s", strings.Join(c.args, " "), err, c.want)
		}
	}
}
