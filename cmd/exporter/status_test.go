package main

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	promconfig "github.com/prometheus/common/config"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// Each verdict lists the probe's anomalies since its previous verdict, by
// how many: none when nothing went wrong, and nothing that is routine (a
// watch that ended at its timeout, the initial relist, a replay).
func TestBoardListsAnomaliesByCycle(t *testing.T) {
	b := newBoard(10)
	s := b.track("p")
	watch := &judge.PathInfo{Name: metrics.PathWatch}
	pinned := &judge.PathInfo{Name: metrics.PathAPIServer, APIServer: "10.0.0.1:6443"}
	steps := [][]judge.Outcome{
		{},
		{{Kind: judge.Missed, Path: watch, Reason: metrics.MissedSilent}, {Kind: judge.Missed, Path: watch, Reason: metrics.MissedSilent}},
		{{Kind: judge.StreamEnded, Path: watch, Reason: metrics.EndTimeout}, {Kind: judge.Relisted, Path: watch, Reason: metrics.RelistInitial}, {Kind: judge.Replayed, Path: watch}},
		{{Kind: judge.Arrived, Path: watch, Late: true}, {Kind: judge.StreamEnded, Path: pinned, Reason: metrics.EndEOF}},
		{{Kind: judge.Answered, Verb: metrics.VerbCreate, Err: errors.New("no"), Code: 500}, {Kind: judge.Throttled, Request: metrics.RequestCreate}},
	}
	for i, step := range steps {
		for _, o := range step {
			s.Outcome(o)
		}
		s.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: uint64(i + 1), OK: true})
	}
	var got [][]string
	for _, c := range slices.Backward(b.recent("p")) {
		got = append(got, c.Anomalies)
	}
	want := [][]string{nil,
		{`events_missed_total{path="watch",reason="silent"} +2`},
		nil,
		{`events_late_total{path="watch"} +1`, `watch_restarts_total{apiserver="10.0.0.1:6443",path="apiserver",reason="eof"} +1`},
		{`requests_throttled_total{path="write",request="create"} +1`, `write_errors_total{code="500",verb="create"} +1`},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("anomalies by cycle: %q, want %q", got, want)
	}
}

// The refused writes are counted by cause and what refused them, each
// with its fix, and listed as the anomalies of their cycle.
func TestBoardCountsRefusals(t *testing.T) {
	b := newBoard(10)
	s := b.track("p")
	policy := "ValidatingAdmissionPolicy 'deny' with binding 'here'"
	for range 2 {
		s.Outcome(judge.Outcome{Kind: judge.Answered, Verb: metrics.VerbCreate, Err: errors.New("denied"), Code: 422, Reason: metrics.RefusedAdmission, RefusedBy: policy})
	}
	s.Outcome(judge.Outcome{Kind: judge.Answered, Verb: metrics.VerbDelete, Err: errors.New("forbidden"), Code: 403, Reason: metrics.RefusedForbidden})
	s.Outcome(judge.Outcome{Kind: judge.Answered, Verb: metrics.VerbCreate, Err: errors.New("no"), Code: 503})
	s.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 1})
	want := "admission_denied by " + policy + ": 2 (" + judge.RefusalFix(metrics.RefusedAdmission) + "); forbidden: 1 (" + judge.RefusalFix(metrics.RefusedForbidden) + ")"
	if got := b.refusedLine("p"); got != want {
		t.Errorf("refused writes %q, want %q", got, want)
	}
	if got, want := b.recent("p")[0].Anomalies, []string{
		`write_errors_total{code="503",verb="create"} +1`,
		`writes_refused_total{cause="admission_denied",verb="create"} +2`,
		`writes_refused_total{cause="forbidden",verb="delete"} +1`,
	}; !slices.Equal(got, want) {
		t.Errorf("anomalies %q, want %q", got, want)
	}
}

// A cycle that settled without a verdict (a write of it unmeasurable, the
// exporter starved) is listed with its anomalies, and counted neither
// judged nor successful.
func TestBoardUnjudgedCycle(t *testing.T) {
	b := newBoard(10)
	s := b.track("p")
	s.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 1, OK: true})
	s.Outcome(judge.Outcome{Kind: judge.Unmeasurable, Path: &judge.PathInfo{Name: metrics.PathWatch}, Reason: metrics.UnmeasurableStarved})
	s.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 2, Reason: metrics.UnmeasurableStarved})
	if c := b.counts("p"); c.judged != 1 || c.ok != 1 {
		t.Errorf("counts %+v, want 1 judged, 1 ok: the unjudged cycle has no verdict", c)
	}
	recent := b.recent("p")
	if len(recent) != 2 || !recent[0].Unmeasurable || recent[0].OK || !slices.Equal(recent[0].Anomalies, []string{`events_unmeasurable_total{path="watch",reason="exporter_starved"} +1`}) {
		t.Errorf("recent cycles %+v, want cycle 2 unmeasurable with its anomaly first", recent)
	}
}

// A probe started again under the same name starts a new record: what the
// old run's sink still says goes nowhere.
func TestBoardForgetsAnEarlierRun(t *testing.T) {
	b := newBoard(10)
	old := b.track("p")
	fresh := b.track("p")
	old.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 7, OK: false})
	fresh.Outcome(judge.Outcome{Kind: judge.CycleJudged, Cycle: 1, OK: true})
	if c := b.counts("p"); c.judged != 1 || c.ok != 1 {
		t.Errorf("counts %+v, want the new run's one good cycle", c)
	}
}

// No probe setting may hold a secret in plain text, since /config shows
// them all: a password, token or key must be a config.Secret (which
// marshals as <secret>), and a setting that names a file holding one ends
// in _file.
func TestConfigFieldsHoldNoPlainSecret(t *testing.T) {
	secret := reflect.TypeFor[promconfig.Secret]()
	var walk func(reflect.Type, string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := prefix + strings.Split(f.Tag.Get("yaml"), ",")[0]
			ft := f.Type
			for ft.Kind() == reflect.Slice || ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, name+".")
				continue
			}
			sensitive := false
			for _, word := range []string{"password", "token", "secret", "key", "credential"} {
				sensitive = sensitive || strings.Contains(strings.ToLower(name), word)
			}
			if sensitive && !strings.HasSuffix(name, "_file") && ft != secret {
				t.Errorf("%s looks like a secret but is a %s: make it a config.Secret so that /config redacts it", name, ft)
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
}

// The status page names the markers other clients' finalizers hold, the
// oldest first, with their finalizers, who set them and for how long, and
// how many more there are.
func TestStatusHeldMarkers(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	var held []probe.HeldMarker
	for i := range heldShown + 2 {
		held = append(held, probe.HeldMarker{Name: fmt.Sprintf("m-%d", i), Finalizers: []string{"example.com/backup"}, Managers: []string{"backup-operator"},
			Since: now.Add(-time.Duration(10-i) * time.Minute)})
	}
	held[1].Managers = nil
	line := heldLine(held, now)
	want := "7: m-0 (example.com/backup of backup-operator, for 10m0s); m-1 (example.com/backup, for 9m0s); m-2 (example.com/backup of backup-operator, for 8m0s); " +
		"m-3 (example.com/backup of backup-operator, for 7m0s); m-4 (example.com/backup of backup-operator, for 6m0s); and 2 more"
	if line != want {
		t.Errorf("line %q, want %q", line, want)
	}
	if got := heldLine(nil, now); got != "" {
		t.Errorf("no marker held: line %q, want none", got)
	}
	var page bytes.Buffer
	if err := statusTemplate.Execute(&page, []probeView{{Name: "p", Held: line}, {Name: "q"}}); err != nil {
		t.Fatal(err)
	}
	if got := html.UnescapeString(page.String()); strings.Count(got, "<b>Markers held by other clients' finalizers:</b> "+want) != 1 {
		t.Errorf("the page does not name the held markers once:\n%s", got)
	}
}
