package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/repotest"
)

// TestRelease runs `make release` twice into a registry in this process,
// as a user would into theirs, then the install command it printed against
// the real local kube-apiserver (no node: the pod is not run, but helm
// pulls the chart from the registry, renders and installs it). The two
// builds must push the same image, SBOM and chart, and print the same
// digests; the SBOM must be found from the image's digest alone. Each
// build links the exporter for two platforms and compresses both: about a
// minute each on 2 cores once Go's build cache is warm.
func TestRelease(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	version := repotest.Version(t, root)
	helm := localcluster.ToolForTest(t, "helm")
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true)))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	push := host + "/watchprobe/watchprobe"
	env := isolatedEnv(t)

	first := makeRelease(t, root, helm, env, push)
	second := makeRelease(t, root, helm, env, push)
	if first.stdout != second.stdout {
		t.Errorf("building again printed other digests:\n%s\nthen\n%s", first.stdout, second.stdout)
	}
	for _, f := range []string{"watchprobe-" + version + ".tgz", "watchprobe-" + version + ".cdx.json"} {
		a, errA := os.ReadFile(filepath.Join(first.out, "release", f))
		b, errB := os.ReadFile(filepath.Join(second.out, "release", f))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds (%v, %v)", f, errA, errB)
		}
	}
	p := parseRelease(t, first.stdout)
	t.Logf("make release printed:\n%s", first.stdout)
	if p.image.Context().String() != push || p.imageTag != version {
		t.Errorf("image %s:%s, want %s:%s", p.image.Context(), p.imageTag, push, version)
	}
	wantCharts := host + "/watchprobe/charts/watchprobe"
	if p.chart.Context().String() != wantCharts || p.chartTag != version {
		t.Errorf("chart %s:%s, want %s:%s", p.chart.Context(), p.chartTag, wantCharts, version)
	}
	tagged, err := remote.Head(p.image.Context().Tag(version))
	if err != nil || tagged.Digest.String() != p.image.DigestStr() {
		t.Errorf("%s:%s is %v (%v), want the printed %s", push, version, tagged, err, p.image.DigestStr())
	}

	t.Run("sbom", func(t *testing.T) { checkSBOM(t, p.image, p.sbom, version) })
	t.Run("install", func(t *testing.T) { checkInstall(t, helm, env, p, version) })
}

type build struct{ out, stdout string }

// makeRelease runs `make release PUSH=... PLAIN_HTTP=1` with its outputs
// in a directory of the test's, and the helm `make test` has built.
func makeRelease(t *testing.T, root, helm string, env []string, push string) build {
	t.Helper()
	out := t.TempDir()
	bin := filepath.Dir(helm)
	// -o: helm is up to date (make test built it); this make must not
	// rebuild it. MAKEFLAGS and MAKELEVEL of an enclosing `make test`
	// would hand this make a jobserver it cannot use.
	cmd := exec.Command("make", "-C", root, "-s", "--no-print-directory", "-o", helm, "release",
		"PUSH="+push, "PLAIN_HTTP=1", "OUT="+out, "BIN="+bin)
	cmd.Env = withoutMake(env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("make release: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	t.Logf("make release: %s", time.Since(start).Round(time.Second))
	return build{out: out, stdout: stdout.String()}
}

func withoutMake(env []string) []string {
	var kept []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL":
			continue
		}
		kept = append(kept, kv)
	}
	return kept
}

// isolatedEnv gives helm and the registry clients homes of their own: no
// credentials or chart cache of this machine's are read or left behind.
func isolatedEnv(t *testing.T) []string {
	dir := t.TempDir()
	env := os.Environ()
	for _, k := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME", "DOCKER_CONFIG"} {
		env = append(env, k+"="+filepath.Join(dir, strings.ToLower(k)))
	}
	return env
}

type printed struct {
	image    name.Digest
	imageTag string
	sbom     name.Digest
	chart    name.Digest
	chartTag string
	install  string
}

var (
	imageLine = regexp.MustCompile(`(?m)^image  (\S+):(\S+)@(sha256:[0-9a-f]{64})$`)
	sbomLine  = regexp.MustCompile(`(?m)^sbom   (\S+@sha256:[0-9a-f]{64})  `)
	chartLine = regexp.MustCompile(`(?m)^chart  (\S+):(\S+)@(sha256:[0-9a-f]{64})  \(package sha256:[0-9a-f]{64}\)$`)
	install   = regexp.MustCompile(`(?m)^helm install .*$`)
)

func parseRelease(t *testing.T, out string) printed {
	t.Helper()
	im, sb, ch, in := imageLine.FindStringSubmatch(out), sbomLine.FindStringSubmatch(out), chartLine.FindStringSubmatch(out), install.FindString(out)
	if im == nil || sb == nil || ch == nil || in == "" {
		t.Fatalf("make release printed no image, sbom, chart and install lines:\n%s", out)
	}
	var p printed
	var err error
	if p.image, err = name.NewDigest(im[1]+"@"+im[3], name.Insecure); err != nil {
		t.Fatal(err)
	}
	if p.sbom, err = name.NewDigest(sb[1], name.Insecure); err != nil {
		t.Fatal(err)
	}
	if p.chart, err = name.NewDigest(ch[1]+"@"+ch[3], name.Insecure); err != nil {
		t.Fatal(err)
	}
	p.imageTag, p.chartTag, p.install = im[2], ch[2], in
	return p
}

// checkSBOM finds the SBOM from the image's digest, as a scanner would,
// and reads the modules and the Go version from it.
func checkSBOM(t *testing.T, image, printedSBOM name.Digest, version string) {
	found := findSBOM(t, image)
	if found.DigestStr() != printedSBOM.DigestStr() {
		t.Fatalf("the SBOM found from %s is %s, want the printed %s", image, found, printedSBOM)
	}
	bom := fetchSBOM(t, found)

	if got, want := bom.Metadata.Component.PackageURL, "pkg:oci/watchprobe@"+image.DigestStr(); got != want {
		t.Errorf("the SBOM describes %s, want %s", got, want)
	}
	versions := map[string]string{}
	for _, c := range *bom.Components {
		versions[c.Name] = c.Version
	}
	for _, mod := range []string{"k8s.io/client-go", "github.com/prometheus/client_golang"} {
		if want := goList(t, mod); versions[mod] != want {
			t.Errorf("the SBOM lists %s %q, want %q (go.mod's)", mod, versions[mod], want)
		}
	}
	if want := goEnv(t, "GOVERSION"); versions["stdlib"] != want {
		t.Errorf("the SBOM lists the Go standard library %q, want %q, the toolchain's", versions["stdlib"], want)
	}
	if versions["github.com/watchprobe/watchprobe"] != "v"+version {
		t.Errorf("the SBOM lists the exporter as %q, want v%s", versions["github.com/watchprobe/watchprobe"], version)
	}
}

// findSBOM lists the referrers of image, through the referrers API or the
// referrers tag, and returns the one CycloneDX artifact among them. It
// reads each referrer's own artifactType: go-containerregistry's registry
// lists every referrer under its config's media type (the empty one here),
// where the OCI distribution spec, and the registries that implement it,
// list the manifest's artifactType.
func findSBOM(t *testing.T, image name.Digest) name.Digest {
	t.Helper()
	refs, err := remote.Referrers(image)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var found []name.Digest
	for _, d := range rm.Manifests {
		ref := image.Context().Digest(d.Digest.String())
		img, err := remote.Image(ref)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.ArtifactType == sbomMediaType {
			found = append(found, ref)
		}
	}
	if len(found) != 1 {
		t.Fatalf("the referrers of %s are %+v: want one %s artifact", image, rm.Manifests, sbomMediaType)
	}
	return found[0]
}

func fetchSBOM(t *testing.T, ref name.Digest) *cdx.BOM {
	t.Helper()
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("the SBOM artifact has layers %v (%v), want one", layers, err)
	}
	if mt, _ := layers[0].MediaType(); mt != sbomMediaType {
		t.Errorf("the SBOM layer is %s, want %s", mt, sbomMediaType)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(rc, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatalf("the SBOM is no CycloneDX JSON: %v", err)
	}
	if bom.SpecVersion != cdx.SpecVersion1_6 || bom.Components == nil || bom.Metadata == nil || bom.Metadata.Component == nil {
		t.Fatalf("the SBOM is spec %s with components %v and metadata %+v", bom.SpecVersion, bom.Components, bom.Metadata)
	}
	return &bom
}

// checkInstall runs the printed install command against the real
// apiserver and reads back what helm installed.
func checkInstall(t *testing.T, helm string, env []string, p printed, version string) {
	c := localcluster.StartForTest(t, localcluster.Options{})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	env = append(env, "KUBECONFIG="+kubeconfig)
	args := strings.Fields(p.install)
	if args[0] != "helm" {
		t.Fatalf("install command %q", p.install)
	}
	runHelm(t, helm, env, args[1:]...)

	var releases []struct {
		Chart, Status string
		AppVersion    string `json:"app_version"`
	}
	if err := json.Unmarshal([]byte(runHelm(t, helm, env, "list", "--namespace", "monitoring", "-o", "json")), &releases); err != nil {
		t.Fatal(err)
	}
	if len(releases) != 1 || releases[0].Chart != "watchprobe-"+version || releases[0].AppVersion != version || releases[0].Status != "deployed" {
		t.Errorf("helm list: %+v, want watchprobe-%s deployed, app version %s", releases, version, version)
	}

	client := kubernetes.NewForConfigOrDie(c.AdminConfig())
	deps, err := client.AppsV1().Deployments("monitoring").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("Deployments in monitoring: %v, %v", deps, err)
	}
	d := deps.Items[0]
	if got := d.Labels["helm.sh/chart"]; got != "watchprobe-"+version {
		t.Errorf("the Deployment's chart label is %q, want watchprobe-%s", got, version)
	}
	want := p.image.Context().String() + "@" + p.image.DigestStr()
	if got := d.Spec.Template.Spec.Containers[0].Image; got != want {
		t.Errorf("the chart installed the image %s, want the released %s", got, want)
	}
}

func runHelm(t *testing.T, helm string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(helm, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func goList(t *testing.T, module string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	return strings.TrimSpace(string(out))
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", key, err)
	}
	return strings.TrimSpace(string(out))
}
