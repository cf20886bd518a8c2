package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/watchprobe/watchprobe/internal/golden"
	"github.com/watchprobe/watchprobe/pkg/check"
)

// The text report of pkg/check's golden report is exactly the golden one,
// so that a change to its shape is seen in review. `go test -run
// TestCheckReportGolden -update` rewrites it.
func TestCheckReportGolden(t *testing.T) {
	js, err := os.ReadFile("../../pkg/check/testdata/report.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var r check.Report
	if err := json.Unmarshal(js, &r); err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := writeText(&text, &r); err != nil {
		t.Fatal(err)
	}
	const file = "testdata/check-report.golden.txt"
	if _, same := golden.Check(t, file, text.Bytes()); !same {
		t.Errorf("the report differs from %s (rerun with -update if the change is meant):\n%s", file, &text)
	}
}

// A path pinned to an apiserver that joined too late to be owed any write
// says why it is empty.
func TestCheckReportPinnedPathOwedNothing(t *testing.T) {
	r := &check.Report{Probes: []check.ProbeReport{{Name: "configmaps", Paths: []check.PathReport{
		{Path: "apiserver", APIServer: "10.0.0.2:6443", OK: true},
	}}}, OK: true}
	var text bytes.Buffer
	if err := writeText(&text, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "owed nothing yet") {
		t.Errorf("the text report does not say why the path is empty:\n%s", &text)
	}
}
