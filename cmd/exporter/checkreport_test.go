package main

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden reports in testdata")

// reportFixture is what a check's probes would have counted, filled by
// hand, so that a report can be built without a cluster.
type reportFixture struct {
	reg     *prometheus.Registry
	pm      *metrics.Probe
	lat     *latencies
	board   *board
	inexact map[string][]probe.ResumeVerdict
}

func newReportFixture() *reportFixture {
	reg := prometheus.NewRegistry()
	return &reportFixture{
		reg:   reg,
		pm:    metrics.NewProbe(reg),
		lat:   &latencies{keys: map[prometheus.Observer]pathKey{}, by: map[pathKey][]time.Duration{}},
		board: newBoard(reg, nil, 1, checkFlushEvery, slog.New(slog.NewTextHandler(io.Discard, nil))),
	}
}

// deliver records n events of each kind arriving on ps, 10ms, 20ms, ...
// after their writes.
func (f *reportFixture) deliver(ps *metrics.PathSeries, n int) {
	for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		for i := range n {
			d := time.Duration(i+1) * 10 * time.Millisecond
			ps.Latency[ev].Observe(d.Seconds())
			f.lat.add(ps.Latency[ev], d)
			ps.Observed[ev].Inc()
		}
	}
	ps.Relist(metrics.RelistInitial, metrics.ModeList)
	ps.Restarts[metrics.EndClient].Inc()
}

// cycles records the verdicts of a probe's cycles, 1, 2, ... in order, and
// a write of each verb per cycle.
func (f *reportFixture) cycles(s *metrics.ProbeSeries, name string, oks ...bool) {
	rec := f.board.track(name)
	for i, ok := range oks {
		for _, w := range s.Writes {
			w.Total.Inc()
		}
		rec.Verdict(uint64(i+1), ok)
	}
}

func (f *reportFixture) report(t *testing.T, cfgs []probe.Config) *checkReport {
	t.Helper()
	kf := &checkFlags{latency: time.Second, target: 0.99, cycles: 3}
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r, err := buildReport(f.reg, f.lat, f.board, cfgs, f.inexact, kf, "https://127.0.0.1:6443", "check-abc123", started, 12345*time.Millisecond, false)
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
	s := f.pm.ForProbe(cfg.Name, cfg.Paths)
	f.deliver(s.Paths[metrics.PathInformer], 3)
	s.Paths[metrics.PathInformer].Bookmarks.Add(2)
	f.deliver(s.Paths[metrics.PathWatch], 3)
	s.Paths[metrics.PathWatch].Missed[metrics.MissedSilent].Inc()
	f.deliver(f.pm.ForPath(cfg.Name, metrics.PathAPIServer, "10.0.0.1:6443", false), 3)
	f.pm.ForPath(cfg.Name, metrics.PathAPIServer, "10.0.0.2:6443", false) // joined as the check ended
	f.cycles(s, cfg.Name, true, false, true)
	// Resume checks at 10s and 1m: through the load balancer 10s replays
	// and 1m has expired; through the first apiserver one replay missed an
	// event.
	cfg.Resume = probe.ResumeConfig{Ages: []model.Duration{model.Duration(10 * time.Second), model.Duration(time.Minute)}, Every: model.Duration(time.Minute)}
	ages := []string{"10s", "1m"}
	lb := f.pm.ForResume(cfg.Name, metrics.PathWatch, "", ages)
	pinned := f.pm.ForResume(cfg.Name, metrics.PathAPIServer, "10.0.0.1:6443", ages)
	for range 2 {
		lb.Checked("10s", metrics.ResumeReplayed)
		lb.Checked("1m", metrics.ResumeExpired)
		pinned.Checked("1m", metrics.ResumeReplayed)
	}
	lb.SetWindow(10 * time.Second)
	pinned.Checked("10s", metrics.ResumeReplayed)
	pinned.Checked("10s", metrics.ResumeIncomplete)
	pinned.SetWindow(time.Minute)
	f.inexact = map[string][]probe.ResumeVerdict{cfg.Name: {{
		Path: metrics.PathAPIServer, APIServer: "10.0.0.1:6443", Age: 10 * time.Second, From: "1200",
		Outcome: metrics.ResumeIncomplete, Missing: []string{"1234"},
	}}}
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
	s := f.pm.ForProbe(cfg.Name, []string{metrics.PathWatch}) // the informer never made its series
	f.deliver(s.Paths[metrics.PathWatch], 3)
	f.cycles(s, cfg.Name, true, true, true)
	r := f.report(t, []probe.Config{cfg})
	want := []string{
		"probe configmaps: path informer reported nothing: it never started",
		"probe configmaps: apiservers: no apiserver path ran (discovery found none, or get, list or watch on endpointslices in default is refused)",
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
	s := f.pm.ForProbe(cfg.Name, cfg.Paths)
	f.deliver(s.Paths[metrics.PathWatch], 3)
	f.deliver(f.pm.ForPath(cfg.Name, metrics.PathAPIServer, "10.0.0.1:6443", false), 3)
	f.pm.ForPath(cfg.Name, metrics.PathAPIServer, "10.0.0.2:6443", false)
	f.cycles(s, cfg.Name, true, true, true)
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
