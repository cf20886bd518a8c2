// Package hack holds the repository's scripts and tools; this test keeps
// the ways the exporter is built in agreement.
package hack

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// No Docker engine runs here, so the image is never built in CI. What keeps
// it honest: the image builds the binary with the same script as
// `make build`, from a pinned Go, onto distroless as nonroot.
func TestDockerfileBuildsLikeMake(t *testing.T) {
	dockerfile := read(t, "../Dockerfile")
	makefile := read(t, "../Makefile")

	build := regexp.MustCompile(`(?m)^build:\n\thack/build\.sh \$\(BIN\)/watchprobe \$\(VERSION\) \$\(REVISION\)$`)
	if !build.MatchString(makefile) {
		t.Error("make build does not run hack/build.sh")
	}
	if !regexp.MustCompile(`(?m)^RUN hack/build\.sh /out/watchprobe "\$VERSION" "\$REVISION"$`).MatchString(dockerfile) {
		t.Error("the Dockerfile does not build with hack/build.sh")
	}
	for _, f := range []struct{ name, text string }{{"Dockerfile", dockerfile}, {"Makefile", makefile}} {
		if strings.Contains(f.text, "go build -trimpath") || strings.Contains(f.text, "./cmd/exporter") {
			t.Errorf("%s builds the exporter itself instead of through hack/build.sh", f.name)
		}
	}
	script := read(t, "build.sh")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "github.com/prometheus/common/version.Version=", "./cmd/exporter"} {
		if !strings.Contains(script, want) {
			t.Errorf("hack/build.sh lacks %s", want)
		}
	}

	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(dockerfile, -1)
	if len(froms) != 2 {
		t.Fatalf("want a build stage and a final stage, got %d FROM lines", len(froms))
	}
	goMod := read(t, "../go.mod")
	goVersion := regexp.MustCompile(`(?m)^go (\S+)`).FindStringSubmatch(goMod)[1]
	if builder := froms[0][1]; !regexp.MustCompile(`^golang:1\.\d+\.\d+-`).MatchString(builder) {
		t.Errorf("builder %s is not pinned to a Go patch release", builder)
	} else if !strings.HasPrefix(builder, "golang:"+strings.Join(strings.Split(goVersion, ".")[:2], ".")) {
		t.Errorf("builder %s does not match go.mod's go %s", builder, goVersion)
	}
	if final := froms[1][1]; final != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final image %s, want distroless static nonroot", final)
	}
	if !strings.Contains(dockerfile, "USER 65532:65532") || !strings.Contains(dockerfile, `ENTRYPOINT ["/bin/watchprobe"]`) {
		t.Error("the image must run /bin/watchprobe as the nonroot user")
	}
}
