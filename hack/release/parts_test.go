package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// The SBOM is found from the image's digest on a registry with the OCI
// referrers API and on one without it (through the referrers tag), with
// go-containerregistry's client, as with oras or cosign.
func TestSBOMIsAReferrer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		referrers bool
	}{{"referrers API", true}, {"referrers tag", false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(tc.referrers)))
			defer srv.Close()
			idx, err := random.Index(64, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			d, _ := idx.Digest()
			created := time.Unix(1796025518, 0)
			b := &built{index: idx, digest: d, version: "0.1.0"}
			doc := []byte(`{"bomFormat":"CycloneDX"}`)
			subject, err := partial.Descriptor(idx)
			if err != nil {
				t.Fatal(err)
			}
			art, err := sbomArtifact(doc, *subject, b.version, created)
			if err != nil {
				t.Fatal(err)
			}
			tg, err := newTarget(strings.TrimPrefix(srv.URL, "http://")+"/you/watchprobe", "", true)
			if err != nil {
				t.Fatal(err)
			}
			image, sbomAt, err := tg.pushImage(context.Background(), b, art)
			if err != nil {
				t.Fatal(err)
			}
			if image.DigestStr() != d.String() {
				t.Errorf("pushed %s, want the index %s", image, d)
			}
			if found := findSBOM(t, image); found.DigestStr() != sbomAt.DigestStr() {
				t.Fatalf("the SBOM found from the index is %s, want %s", found, sbomAt)
			}
			got, err := remote.Image(sbomAt)
			if err != nil {
				t.Fatal(err)
			}
			mf, _ := got.Manifest()
			if mf.Subject == nil || mf.Subject.Digest != d || mf.Config.MediaType != "application/vnd.oci.empty.v1+json" || mf.Annotations["org.opencontainers.image.created"] != "2026-11-30T07:58:38Z" {
				t.Errorf("SBOM manifest %+v", mf)
			}
			layers, _ := got.Layers()
			rc, err := layers[0].Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(body, doc) {
				t.Errorf("the SBOM layer holds %q", body)
			}
		})
	}
}

// The SBOM is a function of the binaries' build information and the
// image: the same inputs give the same bytes.
func TestSBOMIsReproducible(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	b := fakeBuilt(t, bi, bi)
	one, err := makeSBOM(b)
	if err != nil {
		t.Fatal(err)
	}
	two, err := makeSBOM(fakeBuilt(t, bi, bi))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one, two) {
		t.Error("two SBOMs of the same image differ")
	}
	for _, want := range []string{`"serialNumber": "urn:uuid:`, `"timestamp": "2026-11-30T07:58:38Z"`, `"name": "github.com/google/go-containerregistry"`, `"name": "stdlib"`} {
		if !bytes.Contains(one, []byte(want)) {
			t.Errorf("the SBOM lacks %s", want)
		}
	}

	// Binaries that link different modules cannot share one SBOM.
	other := *bi
	other.Deps = bi.Deps[1:]
	if _, err := makeSBOM(fakeBuilt(t, bi, &other)); err == nil || !strings.Contains(err.Error(), "different modules") {
		t.Errorf("an SBOM for binaries of different modules: %v", err)
	}
}

func fakeBuilt(t *testing.T, amd64, arm64 *debug.BuildInfo) *built {
	t.Helper()
	d, err := v1.NewHash("sha256:9e604a7a8a3bcd5fbdb70f5cba4e2192ff387cc9397674887366b1a19d27ddaa")
	if err != nil {
		t.Fatal(err)
	}
	return &built{
		digest: d, version: "0.1.0", revision: "0123456789abcdef0123456789abcdef01234567", created: time.Unix(1796025518, 0),
		binaries: []binaryInfo{
			{platform: v1.Platform{OS: "linux", Architecture: "amd64"}, info: amd64},
			{platform: v1.Platform{OS: "linux", Architecture: "arm64"}, info: arm64},
		},
	}
}

func TestSerialNumberIsAUUID(t *testing.T) {
	got := serialNumber("9e604a7a8a3bcd5fbdb70f5cba4e2192ff387cc9397674887366b1a19d27ddaa")
	if got != "urn:uuid:9e604a7a-8a3b-8d5f-bdb7-0f5cba4e2192" {
		t.Errorf("serialNumber = %s", got)
	}
}

func TestPURLs(t *testing.T) {
	for path, want := range map[string]string{
		"k8s.io/client-go":                    "pkg:golang/k8s.io/client-go@v0.37.2",
		"github.com/prometheus/client_golang": "pkg:golang/github.com/prometheus/client_golang@v0.37.2",
	} {
		if got := golangPURL(path, "v0.37.2"); got != want {
			t.Errorf("golangPURL(%s) = %s, want %s", path, got, want)
		}
	}
	// A version's + is escaped, as the purl spec has it.
	if got := golangPURL("github.com/docker/cli", "v29.7.2+incompatible"); got != "pkg:golang/github.com/docker/cli@v29.7.2%2Bincompatible" {
		t.Errorf("golangPURL(docker/cli) = %s", got)
	}
}

const values = `# top
image:
  # -- Image registry.
  registry: ghcr.io
  # -- Image repository.
  repository: watchprobe/watchprobe
  tag: ""
  # -- Image digest.
  digest: ""
  pullPolicy: IfNotPresent
other:
  registry: keep.me
`

func TestSetImageChangesOnlyTheImage(t *testing.T) {
	got, err := setImage([]byte(values), "127.0.0.1:5000", "you/watchprobe", "sha256:abc")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.NewReplacer(
		"registry: ghcr.io", `registry: "127.0.0.1:5000"`,
		"repository: watchprobe/watchprobe", `repository: "you/watchprobe"`,
		`digest: ""`, `digest: "sha256:abc"`,
	).Replace(values)
	if string(got) != want {
		t.Errorf("setImage gave\n%s\nwant\n%s", got, want)
	}

	for _, bad := range []string{
		strings.Replace(values, "registry: ghcr.io", "registry: ghcr.io # the default", 1),
		"image: {}\n",
		"other: 1\n",
	} {
		if _, err := setImage([]byte(bad), "r", "p", "sha256:abc"); err == nil {
			t.Errorf("setImage on\n%s\nsucceeded", bad)
		}
	}
}

// Two packages of the same chart made at different times are the same
// bytes once normalized, and hold what helm wrote.
func TestNormalizeArchive(t *testing.T) {
	dir := t.TempDir()
	created := time.Unix(1796025518, 0)
	var outs [][]byte
	for i, when := range []time.Time{time.Unix(1800000000, 0), time.Unix(1900000000, 0)} {
		src := filepath.Join(dir, "helm.tgz")
		writeArchive(t, src, when)
		dst := filepath.Join(dir, "out", "watchprobe.tgz")
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := normalizeArchive(src, dst, created); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(dst)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, data)
		st, _ := os.Stat(dst)
		if !st.ModTime().Equal(created) {
			t.Errorf("package %d: modified %s, want the commit's time %s (helm push records it)", i, st.ModTime(), created)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two normalized packages of the same chart differ")
	}
	zr, err := gzip.NewReader(bytes.NewReader(outs[0]))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Comment != "Helm" {
		t.Errorf("gzip comment %q, want helm's", zr.Comment)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		names = append(names, h.Name+"="+string(body))
		if !h.ModTime.Equal(created) {
			t.Errorf("%s: time %s, want %s", h.Name, h.ModTime, created)
		}
	}
	if got := strings.Join(names, ","); got != "watchprobe/Chart.yaml=name: watchprobe\n,watchprobe/values.yaml=a: 1\n" {
		t.Errorf("entries %s", got)
	}
}

// writeArchive writes what helm package would, stamped with when.
func writeArchive(t *testing.T, path string, when time.Time) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Comment = "Helm"
	tw := tar.NewWriter(zw)
	for _, f := range [][2]string{{"watchprobe/Chart.yaml", "name: watchprobe\n"}, {"watchprobe/values.yaml", "a: 1\n"}} {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), ModTime: when}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestChartsBesideTheImage(t *testing.T) {
	for repo, want := range map[string]string{
		"registry.example.com/you/watchprobe":       "oci://registry.example.com/you/charts",
		"registry.example.com/watchprobe":           "oci://registry.example.com/charts",
		"127.0.0.1:5000/a/b/watchprobe":             "oci://127.0.0.1:5000/a/b/charts",
		"registry.example.com:8443/mirror/exporter": "oci://registry.example.com:8443/mirror/charts",
	} {
		tg, err := newTarget(repo, "", false)
		if err != nil {
			t.Fatal(err)
		}
		if tg.charts != want {
			t.Errorf("charts for %s: %s, want %s", repo, tg.charts, want)
		}
	}
	tg, err := newTarget("127.0.0.1:5000/you/watchprobe", "oci://127.0.0.1:5000/helm", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := tg.installCommand("0.1.0"); got != "helm install watchprobe oci://127.0.0.1:5000/helm/watchprobe --version 0.1.0 --namespace monitoring --create-namespace --plain-http" {
		t.Errorf("install command %q", got)
	}
	if r := tg.chartRepo(); r.String() != "127.0.0.1:5000/helm/watchprobe" || r.Scheme() != "http" {
		t.Errorf("chart repository %s (%s)", r, r.Scheme())
	}
}

func TestFlagsNameTheProblem(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "-version"},
		{[]string{"-version", "0.1.0", "-push", "127.0.0.1:5000/you/watchprobe:0.1.0"}, "-push"},
		{[]string{"-version", "0.1.0", "-push", "127.0.0.1:5000/you/watchprobe", "-charts", "127.0.0.1:5000/charts"}, "-charts"},
		{[]string{"-version", "0.1.0", "-plain-http"}, "-push"},
		{[]string{"-version", "0.1.0", "-layout", "/nonexistent"}, "-layout"},
	} {
		// Each fails before anything is read or pushed.
		if err := run(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("release %s: %v, want an error naming %s", strings.Join(c.args, " "), err, c.want)
		}
	}
}
