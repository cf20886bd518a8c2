// Package golden compares what a test produced with a committed file, so
// that a change of an output shows in review, and rewrites the file when
// the test runs with -update.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Updating says whether the test rewrites its golden files rather than
// checking them, for a test with checks that only hold for a checked
// file.
func Updating() bool { return *update }

// Check is true if got is the content of file. With -update it writes got
// to file instead, and is true. want is the file's content, for the
// caller's message of what differs; a missing file fails the test.
func Check(t testing.TB, file string, got []byte) (want []byte, same bool) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return got, true
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	return want, string(got) == string(want)
}
