package main

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden reports in testdata")

// reportFixture is what a check's probes would have heard, told by hand,
// so that a report can be built without a cluster.
type reportFixture struct {
	tallies map[string]*tally
	board   *board
}

func newReportFixture() *reportFixture {
	return &reportFixture{tallies: map[string]*tally{}, board: newBoard(1)}
}

// probe starts the tally of a probe.
func (f *reportFixture) probe(cfg probe.Config) *tally {
	f.tallies[cfg.Name] = newTally(cfg)
	return f.tallies[cfg.Name]
}

// path names a path, pinned to apiserver unless it is empty.
func path(name, apiserver string) *probe.PathInfo {
	return &probe.PathInfo{Name: name, APIServer: apiserver}
}

// deliver tells n events of each kind arriving on the path, 10ms, 20ms, ...
// after their writes, its initial relist and its stream's end at the
// check's stop.
func deliver(t *tally, p *probe.PathInfo, n int) {
	t.Outcome(probe.Outcome{Kind: probe.Relisted, Path: p, Reason: metrics.RelistInitial, Mode: metrics.ModeList})
	for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		for i := range n {
			t.Outcome(probe.Outcome{Kind: probe.Arrived, Path: p, Event: ev, Latency: time.Duration(i+1) * 10 * time.Millisecond})
		}
	}
	t.Outcome(probe.Outcome{Kind: probe.StreamEnded, Path: p, Reason: metrics.EndClient})
}

// cycles tells the verdicts of a probe's cycles, 1, 2, ... in order, and a
// write of each verb per cycle.
func (f *reportFixture) cycles(t *tally, name string, oks ...bool) {
	s := f.board.track(name)
	for i, ok := range oks {
		for _, verb := range []string{metrics.VerbCreate, metrics.VerbUpdate, metrics.VerbDelete} {
			t.Outcome(probe.Outcome{Kind: probe.Answered, Verb: verb})
		}
		s.Outcome(probe.Outcome{Kind: probe.CycleJudged, Cycle: uint64(i + 1), OK: ok})
	}
}

func (f *reportFixture) report(t *testing.T, cfgs []probe.Config) *checkReport {
	t.Helper()
	kf := &checkFlags{latency: time.Second, target: 0.99, cycles: 3}
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r, err := buildReport(f.tallies, f.board, cfgs, kf, "https://127.0.0.1:6443", "check-abc123", started, 12345*time.Millisecond, false)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func reportConfig(paths ...string) probe.Config {
	cfg := probe.DefaultConfig()
	cfg.Name, cfg.Namespace, cfg.Paths = "configmaps", "check", paths
	cfg.Interval = model.Duration(time.Second)
	return cfg
}

// The JSON and text reports of a fixed set of counts are exactly the
// golden ones, so that a change to the report's shape is seen in review;
// the JSON one matches the schema. `go test -run TestCheckReportGolden
// -update` rewrites them.
func TestCheckReportGolden(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathInformer, metrics.PathWatch)
	cfg.APIServers.Endpoints = []string{"10.0.0.1:6443", "10.0.0.2:6443"}
	t1 := f.probe(cfg)
	deliver(t1, path(metrics.PathInformer, ""), 3)
	for range 2 {
		t1.Outcome(probe.Outcome{Kind: probe.Bookmark, Path: path(metrics.PathInformer, "")})
	}
	deliver(t1, path(metrics.PathWatch, ""), 3)
	t1.Outcome(probe.Outcome{Kind: probe.Missed, Path: path(metrics.PathWatch, ""), Reason: metrics.MissedSilent})
	deliver(t1, path(metrics.PathAPIServer, "10.0.0.1:6443"), 3)
	// Joined as the check ended: live, owed nothing.
	t1.Outcome(probe.Outcome{Kind: probe.Up, Path: path(metrics.PathAPIServer, "10.0.0.2:6443")})
	f.cycles(t1, cfg.Name, true, false, true)
	// Resume checks at 10s and 1m: through the load balancer 10s replays
	// and 1m has expired; through the first apiserver one replay missed an
	// event.
	cfg.Resume = probe.ResumeConfig{Ages: []model.Duration{model.Duration(10 * time.Second), model.Duration(time.Minute)}, Every: model.Duration(time.Minute)}
	lb, pinned := path(metrics.PathWatch, ""), path(metrics.PathAPIServer, "10.0.0.1:6443")
	checked := func(p *probe.PathInfo, age time.Duration, outcome string) {
		t1.Outcome(probe.Outcome{Kind: probe.ResumeChecked, Path: p, Limit: age, Reason: outcome,
			Resume: &probe.ResumeVerdict{Path: p.Name, APIServer: p.APIServer, Age: age, Outcome: outcome}})
	}
	for range 2 {
		checked(lb, 10*time.Second, metrics.ResumeReplayed)
		checked(lb, time.Minute, metrics.ResumeExpired)
		checked(pinned, time.Minute, metrics.ResumeReplayed)
	}
	t1.Outcome(probe.Outcome{Kind: probe.ResumeWindow, Path: lb, Limit: 10 * time.Second})
	checked(pinned, 10*time.Second, metrics.ResumeReplayed)
	t1.Outcome(probe.Outcome{Kind: probe.ResumeChecked, Path: pinned, Limit: 10 * time.Second, Reason: metrics.ResumeIncomplete,
		Resume: &probe.ResumeVerdict{Path: metrics.PathAPIServer, APIServer: "10.0.0.1:6443", Age: 10 * time.Second, From: "1200",
			Outcome: metrics.ResumeIncomplete, Missing: []string{"1234"}}})
	t1.Outcome(probe.Outcome{Kind: probe.ResumeWindow, Path: pinned, Limit: time.Minute})
	r := f.report(t, []probe.Config{cfg})
	r.addMarkersLeft([]markerRef{{Kind: "ConfigMap", Namespace: "check", Name: "watchprobe-configmaps-check-abc123-t1-3"}}, nil, "check-abc123")

	var js, text bytes.Buffer
	if err := r.writeJSON(&js); err != nil {
		t.Fatal(err)
	}
	validateReport(t, js.String())
	if err := r.writeText(&text); err != nil {
		t.Fatal(err)
	}
	for file, got := range map[string][]byte{"testdata/check-report.golden.json": js.Bytes(), "testdata/check-report.golden.txt": text.Bytes()} {
		if *updateGolden {
			if err := os.WriteFile(file, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%v (run with -update to write it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("the report differs from %s (rerun with -update if the change is meant):\n%s", file, got)
		}
	}
}

// A path that never started fails the check, rather than being left out
// of the report: a configured path without series, or, with apiservers
// set, no apiserver path at all (discovery refused or finding none).
func TestCheckReportPathsThatNeverRan(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathInformer, metrics.PathWatch)
	cfg.APIServers.Discover = true
	t1 := f.probe(cfg) // the informer never tells anything
	deliver(t1, path(metrics.PathWatch, ""), 3)
	f.cycles(t1, cfg.Name, true, true, true)
	r := f.report(t, []probe.Config{cfg})
	want := []string{
		"probe configmaps: path informer reported nothing: it never started",
		"probe configmaps: apiservers: no apiserver path ran (discovery found none, or list or watch on endpointslices in default is refused)",
	}
	if r.OK || !slices.Equal(r.Problems, want) {
		t.Errorf("ok=%v, problems:\n%s\nwant:\n%s", r.OK, strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
	}
}

// A path pinned to an apiserver that joined too late to be owed any write
// has nothing to judge: it does not fail the check, and says why it is
// empty.
func TestCheckReportPinnedPathOwedNothing(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathWatch)
	cfg.APIServers.Endpoints = []string{"10.0.0.1:6443", "10.0.0.2:6443"}
	t1 := f.probe(cfg)
	deliver(t1, path(metrics.PathWatch, ""), 3)
	deliver(t1, path(metrics.PathAPIServer, "10.0.0.1:6443"), 3)
	t1.Outcome(probe.Outcome{Kind: probe.Up, Path: path(metrics.PathAPIServer, "10.0.0.2:6443")})
	f.cycles(t1, cfg.Name, true, true, true)
	r := f.report(t, []probe.Config{cfg})
	if !r.OK || len(r.Problems) != 0 {
		t.Fatalf("ok=%v, problems %q: want the late apiserver's empty path not to fail the check", r.OK, r.Problems)
	}
	late := r.Probes[0].Paths[2]
	if late.APIServer != "10.0.0.2:6443" || !late.OK || late.Expected != 0 || late.Ratio != nil {
		t.Errorf("the late apiserver's path: %+v", late)
	}
	var text bytes.Buffer
	if err := r.writeText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "owed nothing yet") {
		t.Errorf("the text report does not say why the path is empty:\n%s", &text)
	}
}
