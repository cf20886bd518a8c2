// Package hack holds the repository's scripts and tools; this test keeps
// the ways the exporter is built, and the version they stamp, in agreement.
package hack

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/repotest"
)

// version is the one version source, checked for shape.
func version(t *testing.T) string {
	t.Helper()
	raw := repotest.Read(t, "../VERSION")
	v := strings.TrimSuffix(raw, "\n")
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION holds %q: want one line of semantic version without a v, such as 0.1.0", raw)
	}
	return v
}

// No Docker engine runs here, so the Dockerfile is never built in CI. What
// keeps it honest: it builds the binary with the same script as `make build`
// and `make image` (whose own test builds and runs the image), from a pinned
// Go, onto distroless, with the user, entrypoint and labels of `make image`.
func TestDockerfileBuildsLikeMake(t *testing.T) {
	dockerfile := repotest.Read(t, "../Dockerfile")
	makefile := repotest.Read(t, "../Makefile")

	build := regexp.MustCompile(`(?m)^build:\n\thack/build\.sh \$\(BIN\)/watchprobe \$\(VERSION\) \$\(REVISION\)\n\thack/build\.sh \$\(BIN\)/watchprobe-agent \$\(VERSION\) \$\(REVISION\) \./cmd/agent$`)
	if !build.MatchString(makefile) {
		t.Error("make build does not run hack/build.sh for the exporter and the agent")
	}
	if !regexp.MustCompile(`(?m)^RUN hack/build\.sh /out/watchprobe "\$VERSION" "\$REVISION"\nRUN hack/build\.sh /out/watchprobe-agent "\$VERSION" "\$REVISION" \./cmd/agent$`).MatchString(dockerfile) {
		t.Error("the Dockerfile does not build the exporter and the agent with hack/build.sh")
	}
	// The image's two programs, where hack/image puts them.
	if !strings.Contains(dockerfile, "\nCOPY --from=build /out/watchprobe /bin/watchprobe\nCOPY --from=build /out/watchprobe-agent /bin/watchprobe-agent\n") {
		t.Error("the Dockerfile does not copy /bin/watchprobe and /bin/watchprobe-agent")
	}
	if !strings.Contains(dockerfile, `[ "$VERSION" = "$(cat VERSION)" ]`) {
		t.Error("the Dockerfile does not refuse a VERSION build-arg that differs from the VERSION file")
	}
	image := regexp.MustCompile(`(?m)^image:\n\t\$\(GO\) run \./hack/image -version \$\(VERSION\) -revision \$\(REVISION\) -repository \$\(IMAGE\) `)
	if !image.MatchString(makefile) {
		t.Error("make image does not run ./hack/image with $(VERSION), $(REVISION) and $(IMAGE)")
	}
	builder := repotest.Read(t, "image/image.go")
	if !strings.Contains(builder, `filepath.Join(root, "hack", "build.sh")`) {
		t.Error("hack/image does not build the binaries with hack/build.sh")
	}
	if !strings.Contains(builder, `{Path: "/bin/watchprobe-agent", Package: "./cmd/agent"}`) {
		t.Error("hack/image's programs lack /bin/watchprobe-agent from ./cmd/agent")
	}
	for _, f := range []struct{ name, text string }{{"Dockerfile", dockerfile}, {"Makefile", makefile}, {"hack/image/image.go", builder}} {
		if strings.Contains(f.text, "go build -trimpath") || strings.Contains(f.text, `"go", "build"`) || buildsProgram(f.text) {
			t.Errorf("%s builds the exporter or the agent itself instead of through hack/build.sh", f.name)
		}
	}
	script := repotest.Read(t, "build.sh")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "github.com/prometheus/common/version.Version=", "package=${4:-./cmd/exporter}", `-o "$out" "$package"`} {
		if !strings.Contains(script, want) {
			t.Errorf("hack/build.sh lacks %s", want)
		}
	}

	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(dockerfile, -1)
	if len(froms) != 2 {
		t.Fatalf("want a build stage and a final stage, got %d FROM lines", len(froms))
	}
	goMod := repotest.Read(t, "../go.mod")
	goVersion := regexp.MustCompile(`(?m)^go (\S+)`).FindStringSubmatch(goMod)[1]
	if builder := froms[0][1]; !regexp.MustCompile(`^golang:1\.\d+\.\d+-`).MatchString(builder) {
		t.Errorf("builder %s is not pinned to a Go patch release", builder)
	} else if !strings.HasPrefix(builder, "golang:"+strings.Join(strings.Split(goVersion, ".")[:2], ".")) {
		t.Errorf("builder %s does not match go.mod's go %s", builder, goVersion)
	}
	if final := froms[1][1]; final != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final image %s, want distroless static nonroot", final)
	}

	// The two images run the same thing as the same user.
	constant := func(name string) string {
		m := regexp.MustCompile(`(?m)^\t` + name + `\s+= "([^"]*)"$`).FindStringSubmatch(builder)
		if m == nil {
			t.Fatalf("hack/image/image.go has no constant %s", name)
		}
		return m[1]
	}
	if user := constant("user"); !strings.Contains(dockerfile, "\nUSER "+user+"\n") {
		t.Errorf("the Dockerfile's USER is not hack/image's %s", user)
	}
	if ep := constant("entrypoint"); !strings.Contains(dockerfile, `ENTRYPOINT ["`+ep+`"]`) {
		t.Errorf("the Dockerfile's ENTRYPOINT is not hack/image's %s", ep)
	}
	if port := constant("port"); !strings.Contains(dockerfile, "\nEXPOSE "+strings.TrimSuffix(port, "/tcp")+"\n") {
		t.Errorf("the Dockerfile does not EXPOSE hack/image's %s", port)
	}
	for _, label := range []string{
		`org.opencontainers.image.source="` + constant("source") + `"`,
		`org.opencontainers.image.version="$VERSION"`,
		`org.opencontainers.image.revision="$REVISION"`,
		`org.opencontainers.image.licenses="` + constant("license") + `"`,
	} {
		if !strings.Contains(dockerfile, label) {
			t.Errorf("the Dockerfile lacks the label %s", label)
		}
	}
}

// TestVersionAgrees: VERSION is the one version. The chart, its default
// image and the changelog follow it.
func TestVersionAgrees(t *testing.T) {
	v := version(t)
	makefile := repotest.Read(t, "../Makefile")
	if !regexp.MustCompile(`(?m)^VERSION := \$\(shell cat \$\(CURDIR\)/VERSION\)$`).MatchString(makefile) {
		t.Error("the Makefile's VERSION is not read from the VERSION file")
	}

	var chart struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(repotest.Read(t, "../charts/watchprobe/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != v || chart.Version != v {
		t.Errorf("charts/watchprobe/Chart.yaml has version %q and appVersion %q; set both to VERSION's %s", chart.Version, chart.AppVersion, v)
	}

	// The chart's default image is the one `make image` names and pushes,
	// as the chart renders it, whatever its values and helpers look like.
	m := regexp.MustCompile(`(?m)^IMAGE \?= (\S+)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no default IMAGE")
	}
	rendered := repotest.HelmTemplate(t, localcluster.ToolForTest(t, "helm"), "wp", "../charts/watchprobe")
	want := m[1] + ":" + v
	if !regexp.MustCompile(`(?m)^\s+image: "?` + regexp.QuoteMeta(want) + `"?$`).Match(rendered) {
		t.Errorf("the chart's default image is not %s, what make image names; its images: %q", want,
			regexp.MustCompile(`(?m)^\s+image: .*$`).FindAll(rendered, -1))
	}

	// Newest first: the first section is this version's.
	first := "none"
	if m := regexp.MustCompile(`(?m)^## .*$`).FindString(repotest.Read(t, "../CHANGELOG.md")); m != "" {
		first = m
	}
	if !regexp.MustCompile(`^## ` + regexp.QuoteMeta(v) + ` / (\d{4}-\d\d-\d\d|unreleased)$`).MatchString(first) {
		t.Errorf("CHANGELOG.md's first section is %q; want \"## %s / YYYY-MM-DD\" (or \"/ unreleased\") above the others", first, v)
	}

	if !strings.Contains(repotest.Read(t, "../LICENSE"), "Apache License\n                           Version 2.0, January 2004") {
		t.Error("LICENSE is not the Apache License 2.0")
	}
}

// TestMakeBuildReportsVersion runs `make build` and asks the binaries, the
// exporter and the node agent.
func TestMakeBuildReportsVersion(t *testing.T) {
	v := version(t)
	bin := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "-C", "..", "build", "BIN="+bin)
	// Not the variables of a `make test` this may run under.
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MAKELEVEL=", "MFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, name := range []string{"watchprobe", "watchprobe-agent"} {
		out, err := exec.Command(filepath.Join(bin, name), "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", name, err, out)
		}
		m := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `, version (\S+) \(`).FindSubmatch(out)
		if m == nil || string(m[1]) != v {
			t.Errorf("make build's %s reports:\n%s\nwant version %s (VERSION)", name, out, v)
		}
	}
}

// buildsProgram reports a line that builds ./cmd/exporter or ./cmd/agent
// other than by hack/build.sh; testing one (make campaign) is no build, nor
// naming one's package (hack/image's programs).
func buildsProgram(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		if (strings.Contains(line, "./cmd/exporter") || strings.Contains(line, "./cmd/agent")) &&
			strings.Contains(line, "build") && !strings.Contains(line, "build.sh") && !strings.Contains(line, " test ") {
			return true
		}
	}
	return false
}
