package check

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/santhosh-tekuri/jsonschema/v6"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/golden"
	"github.com/watchprobe/watchprobe/pkg/agent"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

const schemaFile = "../../docs/check-report.schema.json"

// reportFixture is what a check's probes would have heard, told by hand,
// so that a report can be built without a cluster: a check of 3 cycles
// with the default objective.
type reportFixture struct {
	c *Check
}

func newReportFixture() *reportFixture {
	return &reportFixture{c: New(Options{
		Config: &rest.Config{Host: "https://127.0.0.1:6443"}, Replica: "check-abc123",
		Objective: Objective{Latency: time.Second, Target: 0.99}, Cycles: 3,
	})}
}

// probe starts the tally of a probe.
func (f *reportFixture) probe(cfg config.Config) *tally {
	f.c.opts.Probes = append(f.c.opts.Probes, cfg)
	f.c.tallies[cfg.Name] = newTally(cfg)
	return f.c.tallies[cfg.Name]
}

// path names a path, pinned to apiserver unless it is empty.
func path(name, apiserver string) *judge.PathInfo {
	return &judge.PathInfo{Name: name, APIServer: apiserver}
}

// deliver tells n events of each kind arriving on the path, 10ms, 20ms, ...
// after their writes, its initial relist and its stream's end at the
// check's stop.
func deliver(t *tally, p *judge.PathInfo, n int) {
	t.Outcome(judge.Outcome{Kind: judge.Relisted, Path: p, Reason: metrics.RelistInitial, Mode: metrics.ModeList})
	for _, ev := range []string{metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		for i := range n {
			t.Outcome(judge.Outcome{Kind: judge.Arrived, Path: p, Event: ev, Latency: time.Duration(i+1) * 10 * time.Millisecond})
		}
	}
	t.Outcome(judge.Outcome{Kind: judge.StreamEnded, Path: p, Reason: metrics.EndClient})
}

// cycles tells the verdicts of a probe's cycles, 1, 2, ... in order, and a
// write of each verb per cycle.
func cycles(t *tally, oks ...bool) {
	for i, ok := range oks {
		for _, verb := range []string{metrics.VerbCreate, metrics.VerbUpdate, metrics.VerbDelete} {
			t.Outcome(judge.Outcome{Kind: judge.Answered, Verb: verb})
		}
		t.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: uint64(i + 1), OK: ok})
	}
}

func (f *reportFixture) report() *Report {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return f.c.report(started, 12345*time.Millisecond, false)
}

func reportConfig(paths ...string) config.Config {
	cfg := config.DefaultConfig()
	cfg.Name, cfg.Namespace, cfg.Paths = "configmaps", "check", paths
	cfg.Interval = model.Duration(time.Second)
	return cfg
}

// validateReport checks a JSON report against the schema, strictly, and
// decodes it.
func validateReport(t *testing.T, out string) Report {
	t.Helper()
	var r Report
	if err := exportertest.ValidateJSON(schemaFile, out, &r); err != nil {
		t.Fatalf("the report: %v\n%s", err, out)
	}
	return r
}

// asJSON is r as the exporter writes it, validated against the schema
// and read back.
func asJSON(t *testing.T, r *Report) Report {
	t.Helper()
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return validateReport(t, string(out))
}

// The JSON report of a fixed set of counts is exactly the golden one, so
// that a change to the report's shape is seen in review; it matches the
// schema. `go test -run TestReportGolden -update` rewrites it; the text
// report of the same (cmd/exporter) reads it.
func TestReportGolden(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathInformer, metrics.PathWatch)
	cfg.APIServers.Endpoints = []string{"10.0.0.1:6443", "10.0.0.2:6443"}
	cfg.Controllers = []string{metrics.ControllerDeployment}
	t1 := f.probe(cfg)
	deliver(t1, path(metrics.PathInformer, ""), 3)
	for range 2 {
		t1.Outcome(judge.Outcome{Kind: judge.Bookmark, Path: path(metrics.PathInformer, "")})
	}
	deliver(t1, path(metrics.PathWatch, ""), 3)
	t1.Outcome(judge.Outcome{Kind: judge.Missed, Path: path(metrics.PathWatch, ""), Reason: metrics.MissedSilent})
	// Another client annotated a marker: counted, not an anomaly; and the
	// watch path's other counts, each once.
	t1.Outcome(judge.Outcome{Kind: judge.ForeignChange, Path: path(metrics.PathWatch, ""), Manager: "labeller"})
	t1.Outcome(judge.Outcome{Kind: judge.Unmeasurable, Path: path(metrics.PathWatch, ""), Reason: metrics.UnmeasurableStarved})
	for _, k := range []judge.Kind{judge.Duplicate, judge.OutOfOrder, judge.Replayed} {
		t1.Outcome(judge.Outcome{Kind: k, Path: path(metrics.PathWatch, "")})
	}
	t1.Outcome(judge.Outcome{Kind: judge.RequestFailed, Path: path(metrics.PathWatch, ""), Request: metrics.RequestWatch, Code: 503})
	// Its last request refused: the exporter's RBAC.
	t1.Outcome(judge.Outcome{Kind: judge.RequestFailed, Path: path(metrics.PathWatch, ""), Request: metrics.RequestWatch, Code: 403})
	t1.Outcome(judge.Outcome{Kind: judge.Refused, Path: path(metrics.PathWatch, ""), Reason: metrics.PathForbidden})
	deliver(t1, path(metrics.PathAPIServer, "10.0.0.1:6443"), 3)
	// Joined as the check ended: live, owed nothing.
	t1.Outcome(judge.Outcome{Kind: judge.Up, Path: path(metrics.PathAPIServer, "10.0.0.2:6443")})
	cycles(t1, true, false, true)
	// A fourth cycle's create denied by an admission policy.
	t1.Outcome(judge.Outcome{Kind: judge.Answered, Verb: metrics.VerbCreate, Err: errors.New("denied"), Code: 422,
		Reason: metrics.RefusedAdmission, RefusedBy: "ValidatingAdmissionPolicy 'no-markers' with binding 'here'"})
	t1.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 4})
	// Resume checks at 10s and 1m: through the load balancer 10s replays
	// and 1m has expired; through the first apiserver one replay missed an
	// event.
	cfg.Resume = config.ResumeConfig{Ages: []model.Duration{model.Duration(10 * time.Second), model.Duration(time.Minute)}, Every: model.Duration(time.Minute)}
	lb, pinned := path(metrics.PathWatch, ""), path(metrics.PathAPIServer, "10.0.0.1:6443")
	checked := func(p *judge.PathInfo, age time.Duration, outcome string) {
		t1.Outcome(judge.Outcome{Kind: judge.ResumeChecked, Path: p, Limit: age, Reason: outcome,
			Resume: &judge.ResumeVerdict{Path: p.Name, APIServer: p.APIServer, Age: age, Outcome: outcome}})
	}
	for range 2 {
		checked(lb, 10*time.Second, metrics.ResumeReplayed)
		checked(lb, time.Minute, metrics.ResumeExpired)
		checked(pinned, time.Minute, metrics.ResumeReplayed)
	}
	t1.Outcome(judge.Outcome{Kind: judge.ResumeWindow, Path: lb, Limit: 10 * time.Second})
	checked(pinned, 10*time.Second, metrics.ResumeReplayed)
	t1.Outcome(judge.Outcome{Kind: judge.ResumeChecked, Path: pinned, Limit: 10 * time.Second, Reason: metrics.ResumeIncomplete,
		Resume: &judge.ResumeVerdict{Path: metrics.PathAPIServer, APIServer: "10.0.0.1:6443", Age: 10 * time.Second, From: "1200",
			Outcome: metrics.ResumeIncomplete, Missing: []string{"1234"}}})
	t1.Outcome(judge.Outcome{Kind: judge.ResumeWindow, Path: pinned, Limit: time.Minute})
	// The deployment controller answered two of three changes, and lost
	// the third.
	ctl := metrics.ControllerDeployment
	for range 3 {
		t1.Outcome(judge.Outcome{Kind: judge.ControllerChanged, Controller: ctl, Verb: metrics.VerbUpdate})
	}
	t1.Outcome(judge.Outcome{Kind: judge.Reacted, Controller: ctl, Latency: 40 * time.Millisecond, Share: 30 * time.Millisecond})
	t1.Outcome(judge.Outcome{Kind: judge.Reacted, Controller: ctl, Latency: 60 * time.Millisecond, Share: -1})
	t1.Outcome(judge.Outcome{Kind: judge.ReactionMissed, Controller: ctl})
	t1.Outcome(judge.Outcome{Kind: judge.ReactionLost, Controller: ctl})
	// Three nodes' agents: one degraded by a stall and a missed event, one
	// not writing for a minute, one healthy.
	written := time.Date(2026, 1, 2, 3, 4, 10, 0, time.UTC)
	degraded := healthyAgent
	degraded.Zone, degraded.Missed, degraded.Stalls = "z2", 1, 1
	degraded.WatchConn = "10.0.1.7:41234 -> 10.0.0.1:6443"
	f.c.agents = judgeAgents("watchprobe-agents", []coordinationv1.Lease{
		agentLease("node-a", statusOf(healthyAgent), written),
		agentLease("node-b", statusOf(degraded), written.Add(-2*time.Second)),
		agentLease("node-c", statusOf(agent.Status{Healthy: true, Zone: "z1", Interval: agent.Duration(10 * time.Second), Writes: 7}), written.Add(-time.Minute)),
	})
	r := f.report()
	r.addMarkersLeft([]Marker{
		{Kind: "ConfigMap", Namespace: "check", Name: "watchprobe-configmaps-check-abc123-t1-3"},
		{Kind: "ConfigMap", Namespace: "check", Name: "watchprobe-configmaps-check-abc123-t1-4", Finalizers: []string{"example.com/backup"}, HeldBy: []string{"backup-operator"}},
	}, nil)

	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	js = append(js, '\n')
	validateReport(t, string(js))
	const file = "testdata/report.golden.json"
	if _, same := golden.Check(t, file, js); !same {
		t.Errorf("the report differs from %s (rerun with -update if the change is meant):\n%s", file, js)
	}
}

// A path that never started fails the check, rather than being left out
// of the report: a configured path without series, or, with apiservers
// set, no apiserver path at all (discovery refused or finding none).
func TestReportPathsThatNeverRan(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathInformer, metrics.PathWatch)
	cfg.APIServers.Discover = true
	t1 := f.probe(cfg) // the informer never tells anything
	deliver(t1, path(metrics.PathWatch, ""), 3)
	cycles(t1, true, true, true)
	r := f.report()
	want := []string{
		"probe configmaps: path informer reported nothing: it never started",
		"probe configmaps: apiservers: no apiserver path ran (discovery found none, or list or watch on endpointslices in default is refused)",
	}
	if r.OK || !slices.Equal(r.Problems, want) {
		t.Errorf("ok=%v, problems:\n%s\nwant:\n%s", r.OK, strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
	}
}

// Writes refused by the probe's own environment, and a path refused, fail
// the check with the cause and the fix, and are not write errors; a path
// refused since before any write is not "no write succeeded", and one live
// again by the end is no longer refused.
func TestReportRefusals(t *testing.T) {
	f := newReportFixture()
	t1 := f.probe(reportConfig(metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd))
	deliver(t1, path(metrics.PathInformer, ""), 1)
	watch, etcd := path(metrics.PathWatch, ""), path(metrics.PathEtcd, "")
	t1.Outcome(judge.Outcome{Kind: judge.Refused, Path: watch, Reason: metrics.PathForbidden})
	t1.Outcome(judge.Outcome{Kind: judge.Refused, Path: etcd, Reason: metrics.PathNotFound})
	t1.Outcome(judge.Outcome{Kind: judge.Refused, Path: etcd})
	deliver(t1, etcd, 1)
	cycles(t1, true)
	for range 2 {
		t1.Outcome(judge.Outcome{Kind: judge.Answered, Verb: metrics.VerbCreate, Err: errors.New("exceeded quota"), Code: 403, Reason: metrics.RefusedQuota})
	}
	t1.Outcome(judge.Outcome{Kind: judge.Answered, Verb: metrics.VerbCreate, Err: errors.New("denied"), Code: 422,
		Reason: metrics.RefusedAdmission, RefusedBy: "ValidatingAdmissionPolicy 'p' with binding 'b'"})
	r := f.report()
	pr := r.Probes[0]
	if pr.WriteErrors != 0 || pr.WritesRefused[metrics.RefusedQuota] != 2 || pr.WritesRefused[metrics.RefusedAdmission] != 1 || len(pr.WritesRefused) != len(metrics.RefusalCauses) {
		t.Errorf("write errors %d, refused %v: want 0, and every cause with 2 quota and 1 admission", pr.WriteErrors, pr.WritesRefused)
	}
	want := []string{
		"probe configmaps: 1 writes refused as admission_denied by ValidatingAdmissionPolicy 'p' with binding 'b', the probe's own namespace, permissions or policies: " + judge.RefusalFix(metrics.RefusedAdmission),
		"probe configmaps: 2 writes refused as quota_exceeded, the probe's own namespace, permissions or policies: " + judge.RefusalFix(metrics.RefusedQuota),
		"probe configmaps, path watch: its list and watch requests are refused (forbidden), so the writes sent meanwhile are unmeasurable there: " + judge.PathRefusalFix(metrics.PathForbidden),
	}
	if r.OK || !slices.Equal(r.Problems, want) {
		t.Errorf("ok=%v, problems:\n%s\nwant:\n%s", r.OK, strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
	}
	if got := pr.Paths[2]; got.Refused != "" || !got.OK {
		t.Errorf("the etcd path, live again: refused %q, ok %v", got.Refused, got.OK)
	}
}

// A path pinned to an apiserver that joined too late to be owed any write
// has nothing to judge: it does not fail the check.
func TestReportPinnedPathOwedNothing(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathWatch)
	cfg.APIServers.Endpoints = []string{"10.0.0.1:6443", "10.0.0.2:6443"}
	t1 := f.probe(cfg)
	deliver(t1, path(metrics.PathWatch, ""), 3)
	deliver(t1, path(metrics.PathAPIServer, "10.0.0.1:6443"), 3)
	t1.Outcome(judge.Outcome{Kind: judge.Up, Path: path(metrics.PathAPIServer, "10.0.0.2:6443")})
	cycles(t1, true, true, true)
	r := f.report()
	if !r.OK || len(r.Problems) != 0 {
		t.Fatalf("ok=%v, problems %q: want the late apiserver's empty path not to fail the check", r.OK, r.Problems)
	}
	late := r.Probes[0].Paths[2]
	if late.APIServer != "10.0.0.2:6443" || !late.OK || late.Expected != 0 || late.Ratio != nil {
		t.Errorf("the late apiserver's path: %+v", late)
	}
}

// A controller that answered none of the probe's changes fails the check,
// naming the controller; one whose changes all failed says so.
func TestReportControllerNotAnswering(t *testing.T) {
	f := newReportFixture()
	cfg := reportConfig(metrics.PathWatch)
	cfg.Controllers = []string{metrics.ControllerDeployment, metrics.ControllerReplicaSet}
	t1 := f.probe(cfg)
	deliver(t1, path(metrics.PathWatch, ""), 3)
	cycles(t1, true, true, true)
	for range 2 {
		t1.Outcome(judge.Outcome{Kind: judge.ControllerChanged, Controller: metrics.ControllerDeployment, Verb: metrics.VerbUpdate})
		t1.Outcome(judge.Outcome{Kind: judge.ReactionMissed, Controller: metrics.ControllerDeployment})
		t1.Outcome(judge.Outcome{Kind: judge.ControllerChanged, Controller: metrics.ControllerReplicaSet, Verb: metrics.VerbUpdate, Err: errors.New("forbidden")})
	}
	r := f.report()
	want := []string{
		"probe configmaps, controller deployment: answered none of 2 changes: is kube-controller-manager running, and leading?",
		"probe configmaps, controller deployment: 2 of 2 changes got no answer within the deadline (0 late, 0 lost), more than the 0 allowed",
		"probe configmaps, controller replicaset: no change of its marker object succeeded (2 failed)",
	}
	if r.OK || !slices.Equal(r.Problems, want) {
		t.Errorf("ok=%v, problems:\n%s\nwant:\n%s", r.OK, strings.Join(r.Problems, "\n"), strings.Join(want, "\n"))
	}
}

// The schema rejects what it must: it is not a schema that accepts
// anything.
func TestSchemaRejects(t *testing.T) {
	s, err := exportertest.Schema(schemaFile, true)
	if err != nil {
		t.Fatal(err)
	}
	good := `{"schema_version":1,"version":"","server":"https://x","replica":"r","started":"2026-01-02T03:04:05Z","duration_seconds":1,"interrupted":false,
		"objective":{"latency_seconds":1,"target":0.99,"allowed_anomalies":0},"ok":true,"problems":[],"probes":[]}`
	for name, doc := range map[string]string{
		"good":            good,
		"no ok":           strings.Replace(good, `"ok":true,`, "", 1),
		"schema 2":        strings.Replace(good, `"schema_version":1`, `"schema_version":2`, 1),
		"target above 1":  strings.Replace(good, `"target":0.99`, `"target":1.5`, 1),
		"undocumented":    strings.Replace(good, `"ok":true,`, `"ok":true,"extra":1,`, 1),
		"negative counts": strings.Replace(good, `"allowed_anomalies":0`, `"allowed_anomalies":-1`, 1),
		"unknown agent verdict": strings.Replace(good, `"probes":[]`, `"probes":[],"agents":{"namespace":"a","totals":{"nodes":1,"ok":0,"degraded":0,"stale":0,"unreadable":0},
			"nodes":[{"node":"n","zone":"","verdict":"late","healthy":true,"interval_seconds":10,"writes":1,"write_errors":0,"missed":0,"lost":0,"stalls":0,
			"stream_ends":0,"relists":0,"unmeasurable":0,"latency_seconds":null}]}`, 1),
	} {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(inst); (err == nil) != (name == "good") {
			t.Errorf("%s: validation error %v", name, err)
		}
	}
}

// A check whose every cycle settled without a verdict, the exporter
// starved, says so and what to do, not "run longer".
func TestReportEveryCycleStarved(t *testing.T) {
	f := newReportFixture()
	t1 := f.probe(reportConfig(metrics.PathInformer))
	deliver(t1, path(metrics.PathInformer, ""), 1)
	for n := uint64(1); n <= 3; n++ {
		t1.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: n, Reason: metrics.UnmeasurableStarved})
	}
	r := f.report()
	if pr := r.Probes[0]; pr.Cycles != 0 || pr.UnjudgedCycles != 3 {
		t.Errorf("cycles %d, unjudged %d: want 0 and 3", pr.Cycles, pr.UnjudgedCycles)
	}
	want := "probe configmaps: no cycle was judged: the exporter was starved of CPU in each of the 3 cycles that settled"
	if r.OK || len(r.Problems) == 0 || !strings.HasPrefix(r.Problems[0], want) {
		t.Errorf("ok=%v, problems:\n%s\nwant first: %s...", r.OK, strings.Join(r.Problems, "\n"), want)
	}
}
