// Package repotest holds what the tests of the repository's own files
// share (the build, the image, the release, the rules, the dashboards):
// reading a file, the version, and the chart as helm renders it.
package repotest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Read is the file at path, relative to the test's package directory; a
// file that cannot be read fails the test.
func Read(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Version is the VERSION file in the repository root, without the white
// space around it.
func Version(t testing.TB, root string) string {
	t.Helper()
	return strings.TrimSpace(Read(t, filepath.Join(root, "VERSION")))
}

// HelmTemplate runs `helm template args...` with the helm binary at helm
// and returns what it rendered; a failure fails the test with helm's
// stderr. The caller finds helm (localcluster.ToolForTest), so that this
// package, which the image's tests import too, links no cluster clients.
func HelmTemplate(t testing.TB, helm string, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(helm, append([]string{"template"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}
