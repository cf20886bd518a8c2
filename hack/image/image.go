package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// What the image runs and as whom: the same as the Dockerfile's
// (hack/build_test.go holds the Dockerfile to these values).
const (
	source     = "https://github.com/watchprobe/watchprobe"
	license    = "Apache-2.0"
	entrypoint = "/bin/watchprobe"
	user       = "65532:65532"
	port       = "9917/tcp"
	caFile     = "/etc/ssl/certs/ca-certificates.crt"
)

type options struct {
	Root      string // repository root: where hack/build.sh runs
	Version   string // tag, version label, and what the binaries' --version says
	Revision  string
	Created   time.Time // the commit's time, never now, so a rebuild is identical
	Platforms []v1.Platform
	Programs  []program // what the image holds, the entrypoint's first
}

// program is one binary of the image: where it lies in the image and the
// package hack/build.sh builds it from.
type program struct {
	Path    string // /bin/<name>
	Package string
}

// programs are the image's binaries by name, in their order in the image:
// the exporter (the entrypoint) and the node agent, which the chart's
// DaemonSet runs from the same image by its path. One image for both, so
// that one signature and one SBOM cover what a cluster runs.
var programs = []program{
	{Path: entrypoint, Package: "./cmd/exporter"},
	{Path: "/bin/watchprobe-agent", Package: "./cmd/agent"},
}

// binary is the image's programs built for one platform, in the order of
// options.Programs.
type binary struct {
	platform v1.Platform
	data     [][]byte
}

// build compiles the programs for each platform and assembles the index.
func build(ctx context.Context, o options, logf func(string, ...any)) (v1.ImageIndex, error) {
	bins, err := compile(ctx, o, logf)
	if err != nil {
		return nil, err
	}
	return assemble(o, bins)
}

// compile runs hack/build.sh, the build line of `make build` and the
// Dockerfile, once per platform and program: the image's binaries are
// built no other way.
func compile(ctx context.Context, o options, logf func(string, ...any)) ([]binary, error) {
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "watchprobe-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var bins []binary
	for _, p := range o.Platforms {
		b := binary{platform: p}
		for _, prog := range o.Programs {
			out := filepath.Join(dir, p.OS+"_"+p.Architecture, path.Base(prog.Path))
			logf("hack/build.sh %s for %s", prog.Package, p)
			cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build.sh"), out, o.Version, o.Revision, prog.Package)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOOS="+p.OS, "GOARCH="+p.Architecture)
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("hack/build.sh %s for %s: %w", prog.Package, p, err)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				return nil, err
			}
			b.data = append(b.data, data)
		}
		bins = append(bins, b)
	}
	return bins, nil
}

// assemble lays out one image per platform, all on the same base layer,
// and indexes them. Everything in it is a function of its inputs: the same
// binaries, version, revision and time give the same digest.
func assemble(o options, bins []binary) (v1.ImageIndex, error) {
	if len(bins) == 0 {
		return nil, errors.New("no platforms to build")
	}
	if len(o.Programs) == 0 || o.Programs[0].Path != entrypoint {
		return nil, fmt.Errorf("the image's first program must be its entrypoint %s", entrypoint)
	}
	for _, b := range bins {
		if len(b.data) != len(o.Programs) {
			return nil, fmt.Errorf("%s: %d binaries for %d programs", b.platform, len(b.data), len(o.Programs))
		}
	}
	base, err := baseLayer(o.Created)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "watchprobe",
		"org.opencontainers.image.description": "Measures Kubernetes List-Watch health end to end with marker objects, as Prometheus metrics.",
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.licenses":    license,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
	var adds []mutate.IndexAddendum
	for _, b := range bins {
		img, err := platformImage(o, base, b, labels)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.platform, err)
		}
		p := b.platform
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

func platformImage(o options, base v1.Layer, b binary, labels map[string]string) (v1.Image, error) {
	created := v1.Time{Time: o.Created.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: b.platform.Architecture,
		OS:           b.platform.OS,
		Variant:      b.platform.Variant,
		Created:      created,
		Config: v1.Config{
			User:         user,
			Entrypoint:   []string{entrypoint},
			WorkingDir:   "/home/nonroot",
			Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + caFile},
			ExposedPorts: map[string]struct{}{port: {}},
			Labels:       labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	files := []file{{name: "bin/", mode: 0o755}}
	var builds []string
	for i, prog := range o.Programs {
		files = append(files, file{name: prog.Path[1:], mode: 0o755, data: b.data[i]})
		builds = append(builds, fmt.Sprintf("GOOS=%s GOARCH=%s hack/build.sh %s %s %s %s", b.platform.OS, b.platform.Architecture, prog.Path, o.Version, o.Revision, prog.Package))
	}
	app, err := tarLayer(o.Created, files)
	if err != nil {
		return nil, err
	}
	return mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "hack/image: /etc/passwd, /etc/group, /etc/nsswitch.conf, " + caFile + ", /home/nonroot, /tmp"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: strings.Join(builds, "; ")}},
	)
}

// baseLayer holds what distroless's static nonroot image gives the binary
// and the binary uses: the nonroot user, a CA bundle for OTLP and etcd over
// TLS, a writable /tmp, and the hosts lookup order Go's resolver reads.
func baseLayer(created time.Time) (v1.Layer, error) {
	cas, err := caBundle()
	if err != nil {
		return nil, err
	}
	return tarLayer(created, []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n")},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "etc/passwd", mode: 0o644, data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: caFile[1:], mode: 0o644, data: cas},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, owner: 65532},
		{name: "tmp/", mode: 0o1777},
	})
}

// caBundle is Mozilla's root store as PEM, from the x509roots/fallback
// module pinned in go.mod, so the image's roots change only with that pin.
// Roots NSS distrusts after a date are left out: a PEM file cannot carry
// that constraint, and trusting them without it would accept what NSS
// (and the fallback package) refuse.
func caBundle() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Mozilla's trusted roots (NSS), from " + fallbackModule() + ".\n")
	n := 0
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("the x509roots/fallback bundle holds no roots")
	}
	return b.Bytes(), nil
}

func fallbackModule() string {
	const path = "golang.org/x/crypto/x509roots/fallback"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return path + " " + m.Version
			}
		}
	}
	return path
}

type file struct {
	name  string // a trailing slash makes it a directory
	mode  int64
	owner int // uid and gid
	data  []byte
}

func tarLayer(modTime time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.owner, Gid: f.owner, ModTime: modTime.UTC(), Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		if f.name[len(f.name)-1] == '/' {
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// writeLayout replaces dir with an OCI image layout holding the index,
// named by its tag (skopeo's oci:DIR:TAG).
func writeLayout(dir string, idx v1.ImageIndex, tag string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		// Never delete a directory that is not an earlier layout: -o could
		// name anything.
		if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
			return fmt.Errorf("-o %s: the directory is neither empty nor an OCI layout; name another or empty it", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag}))
}

// push writes the index and its images to repo, tagged tag, with the
// credentials docker login or a credential helper left in
// ~/.docker/config.json (or $DOCKER_CONFIG).
func push(ctx context.Context, idx v1.ImageIndex, repo, tag string) (name.Digest, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return name.Digest{}, fmt.Errorf("-push %q: want a repository such as ghcr.io/you/watchprobe, without tag or digest (the tag is the version, %s): %w", repo, tag, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	if err := remote.WriteIndex(r.Tag(tag), idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", r.Tag(tag), err)
	}
	return r.Digest(d.String()), nil
}
