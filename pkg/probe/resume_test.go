package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// writes of one marker's cycle, resourceVersions 11, 12 and (unknown, a
// delete's) the third; then the next marker's create at 14.
func replayWants() []ledgerWrite {
	return []ledgerWrite{
		{key: replayKey{"m1", metrics.EventAdded, 1}, rv: 11, sure: true},
		{key: replayKey{"m1", metrics.EventModified, 2}, rv: 12, sure: true},
		{key: replayKey{"m1", metrics.EventDeleted, 0}, sure: true},
		{key: replayKey{"m2", metrics.EventAdded, 4}, rv: 14, sure: true},
	}
}

// delivered is the event of want[i] as a watch delivers it.
func delivered(want []ledgerWrite, rvs ...string) func(i ...int) []replayEvent {
	return func(is ...int) []replayEvent {
		var out []replayEvent
		for _, i := range is {
			out = append(out, replayEvent{key: want[i].key, rv: rvs[i]})
		}
		return out
	}
}

func TestJudgeReplay(t *testing.T) {
	want := replayWants()
	got := delivered(want, "11", "12", "13", "14")
	expired := apierrors.NewResourceExpired("too old resource version: 10 (12)")
	broken := errors.New("connection reset")
	foreign := replayEvent{key: replayKey{"other-run", metrics.EventDeleted, 0}, rv: "99"}
	uncertain := append(slices.Clone(want[:2]), ledgerWrite{key: replayKey{"m1", metrics.EventModified, 3}}, want[2], want[3])
	for _, tc := range []struct {
		name       string
		want       []ledgerWrite
		got        []replayEvent
		end        replayEnd
		err        error
		outcome    string
		missing    []string
		duplicated []string
		outOfOrder []string
	}{
		{name: "every event, in order, once", want: want, got: got(0, 1, 2, 3), end: replayDone, outcome: metrics.ResumeReplayed},
		{name: "another run's markers are not the probe's", want: want, got: append([]replayEvent{foreign}, got(0, 1, 2, 3)...), end: replayDone, outcome: metrics.ResumeReplayed},
		{name: "410 before anything: the history's end", want: want, end: replayExpired, err: expired, outcome: metrics.ResumeExpired},
		{name: "410 after part of the replay", want: want, got: got(0, 1), end: replayExpired, err: expired, outcome: metrics.ResumeIncomplete, missing: []string{"deleted m1", "14"}},
		{name: "another client's change of a marker is no duplicate", want: want, got: append(append(got(0, 1), replayEvent{key: want[1].key, rv: "20"}), got(2, 3)...), end: replayDone, outcome: metrics.ResumeReplayed},
		{name: "a gap: a later event without an earlier one", want: want, got: got(0, 2, 3), end: replayDone, outcome: metrics.ResumeIncomplete, missing: []string{"12"}},
		{name: "a duplicate", want: want, got: got(0, 1, 1, 2, 3), end: replayDone, outcome: metrics.ResumeIncomplete, duplicated: []string{"12"}},
		{name: "out of order", want: want, got: got(0, 2, 1, 3), end: replayDone, outcome: metrics.ResumeIncomplete, outOfOrder: []string{"12"}},
		{name: "the tail never came on a stream that stayed up", want: want, got: got(0, 1), end: replayOpen, outcome: metrics.ResumeIncomplete, missing: []string{"deleted m1", "14"}},
		{name: "the stream ended before the tail", want: want, got: got(0, 1), end: replayClosed, err: broken, outcome: metrics.ResumeError, missing: []string{"deleted m1", "14"}},
		{name: "the stream ended with nothing", want: want, end: replayClosed, outcome: metrics.ResumeError, missing: []string{"11", "12", "deleted m1", "14"}},
		{name: "the request failed", want: want, end: replayFailed, err: broken, outcome: metrics.ResumeError, missing: []string{"11", "12", "deleted m1", "14"}},
		{name: "a failed write that was not committed is not owed", want: uncertain, got: got(0, 1, 2, 3), end: replayDone, outcome: metrics.ResumeReplayed},
		{name: "a failed write that was committed may come", want: uncertain, got: append(append(got(0, 1), replayEvent{key: uncertain[2].key, rv: "13"}), got(2, 3)...), end: replayDone, outcome: metrics.ResumeReplayed},
		{name: "but not twice", want: uncertain, got: append(append(got(0, 1), replayEvent{key: uncertain[2].key, rv: "13"}, replayEvent{key: uncertain[2].key, rv: "13"}), got(2, 3)...), end: replayDone, outcome: metrics.ResumeIncomplete, duplicated: []string{"13"}},
	} {
		v := judgeReplay(tc.want, tc.got, tc.end, tc.err)
		if v.Outcome != tc.outcome {
			t.Errorf("%s: %s, want %s", tc.name, v.Outcome, tc.outcome)
		}
		for _, l := range []struct {
			what      string
			got, want []string
		}{{"missing", v.Missing, tc.missing}, {"duplicated", v.Duplicated, tc.duplicated}, {"out of order", v.OutOfOrder, tc.outOfOrder}} {
			if tc.outcome != metrics.ResumeExpired && !slices.Equal(l.got, l.want) {
				t.Errorf("%s: %s %q, want %q", tc.name, l.what, l.got, l.want)
			}
		}
		switch tc.outcome {
		case metrics.ResumeExpired, metrics.ResumeError:
			if v.Err == nil {
				t.Errorf("%s: %s without the error that says why", tc.name, v.Outcome)
			}
		}
	}
}

// The write resumed from is the newest acknowledged one with a
// resourceVersion whose response is at least the age old; what follows is
// what the replay owes. Old writes go once a younger one can stand in.
func TestResumeLedger(t *testing.T) {
	base := time.Unix(1000, 0)
	l := resumeLedger{keep: 30 * time.Second}
	write := func(sec int, seq uint64, event string, rv uint64, sure bool) {
		l.add(ledgerWrite{key: replayKey{"m", event, seq}, rv: rv, at: base.Add(time.Duration(sec) * time.Second), sure: sure})
	}
	write(0, 1, metrics.EventAdded, 100, true)
	write(10, 2, metrics.EventModified, 0, false) // failed
	write(20, 0, metrics.EventDeleted, 0, true)   // a delete: no resourceVersion
	write(30, 4, metrics.EventAdded, 130, true)

	from, after, ok := l.since(15*time.Second, base.Add(40*time.Second))
	if !ok || from.rv != 100 || len(after) != 3 {
		t.Errorf("age 15s at 40s: from %d with %d after (%v), want from 100 with 3 after", from.rv, len(after), ok)
	}
	if _, _, ok := l.since(time.Minute, base.Add(40*time.Second)); ok {
		t.Error("age 1m at 40s: no write is that old, yet one was offered")
	}
	if _, _, ok := l.since(5*time.Second, base.Add(40*time.Second)); ok {
		t.Error("age 5s at 40s: the write at 30s has nothing after it, yet it was offered")
	}

	write(75, 5, metrics.EventModified, 175, true)
	if from, _, ok := l.since(40*time.Second, base.Add(80*time.Second)); !ok || from.rv != 130 {
		t.Errorf("age 40s at 80s after pruning: from %d (%v), want 130", from.rv, ok)
	}
	if len(l.writes) != 2 {
		t.Errorf("kept %d writes, want 2: the write at 30s stands in for the older ones", len(l.writes))
	}
}

func TestResumeConfig(t *testing.T) {
	var c config.Config
	if err := yaml.Unmarshal([]byte("name: p\nresume: {}"), &c); err != nil {
		t.Fatal(err)
	}
	if !c.Resume.Enabled() || len(c.Resume.Ages) != 6 || time.Duration(c.Resume.Every) != time.Minute {
		t.Errorf("resume: {} gave %+v, want the defaults", c.Resume)
	}
	if err := yaml.Unmarshal([]byte("name: p"), &c); err != nil || c.Resume.Enabled() {
		t.Errorf("without resume: enabled %v, err %v; want off", c.Resume.Enabled(), err)
	}
	if err := yaml.Unmarshal([]byte("name: p\nresume: {ages: [2m, 10s], every: 30s}"), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Resume.Ages) != 2 || time.Duration(c.Resume.Every) != 30*time.Second {
		t.Errorf("explicit settings lost: %+v", c.Resume)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"name: p\nresume: on", "probe at line 1: resume: \"on\" is not a setting; write a mapping, e.g. `resume: {ages: [10s, 60s, 2m], every: 1m}`, or `resume: {}` for the defaults"},
		{"name: p\nresume: {age: [10s]}", "probe at line 1: resume.age: is not a setting (line 2; known: ages, every)"},
		{"name: p\nresume: {ages: []}", `probe "p" (line 1): resume.ages: is empty; list the ages to resume from, e.g. [10s, 60s, 2m], or remove resume to turn the checks off`},
		{"name: p\nresume: {ages: [10s, soon]}", `probe at line 1: resume.ages[1]: "soon" is not a duration; write a number and a unit, e.g. 10s or 1m`},
		{"name: p\nresume: {every: often}", `probe at line 1: resume.every: "often" is not a duration; write a number and a unit, e.g. 10s or 1m`},
		{"name: p\nresume: {ages: [500ms]}", `probe "p" (line 1): resume.ages[0]: 500ms is too short; use at least 1s`},
		{"name: p\nresume: {ages: [2h]}", `probe "p" (line 1): resume.ages[0]: 2h is too long; use at most 1h: the probe keeps every write that long`},
		{"name: p\nresume: {ages: [1m, 60s]}", `probe "p" (line 1): resume.ages[1]: 1m is listed twice`},
		{"name: p\nresume: {ages: [1s, 2s, 3s, 4s, 5s, 6s, 7s, 8s, 9s, 10s, 11s]}", `probe "p" (line 1): resume.ages: lists 11 ages; use at most 10: each is a label value, and a watch per path in every round`},
		{"name: p\nresume: {every: 0s}", `probe "p" (line 1): resume.every: 0s is too short; use at least 1s (1m is the default: six ages make six short watches a minute per path)`},
	} {
		var c config.Config
		err := yaml.Unmarshal([]byte(tc.yaml), &c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got: %v\nwant: %s", tc.yaml, err, tc.want)
		}
	}
}

// A configuration written out (the exporter serves its own at /config)
// loads back with the same resume checks, off or on.
func TestResumeConfigRoundTrip(t *testing.T) {
	for _, in := range []string{"name: p", "name: p\nresume: {}", "name: p\nresume: {ages: [75s, 10s], every: 30s}"} {
		var c, back config.Config
		if err := yaml.Unmarshal([]byte(in), &c); err != nil {
			t.Fatal(err)
		}
		out, err := yaml.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(out, &back); err != nil {
			t.Errorf("%q written as\n%s\ndoes not load back: %v", in, out, err)
			continue
		}
		if back.Resume.Enabled() != c.Resume.Enabled() || !slices.Equal(back.Resume.Ages, c.Resume.Ages) || back.Resume.Every != c.Resume.Every {
			t.Errorf("%q loads back as %+v, want %+v", in, back.Resume, c.Resume)
		}
	}
}

// An age's label is the configured duration as Prometheus writes it.
func TestResumeAgeLabels(t *testing.T) {
	var c config.Config
	if err := yaml.Unmarshal([]byte("name: p\nresume: {ages: [75s, 90s, 5m]}"), &c); err != nil {
		t.Fatal(err)
	}
	var labels []string
	for _, a := range c.Resume.Ages {
		labels = append(labels, a.String())
	}
	if got := strings.Join(labels, " "); got != "1m15s 1m30s 5m" {
		t.Errorf("labels %q, want 1m15s 1m30s 5m", got)
	}
}

// Resume checks against the real control plane: what kube-apiserver
// 1.37.2 keeps, measured through the probe's own writes.

// resumeOf is p's resume checker, which Run adds before the first write.
func resumeOf(t testing.TB, p *Probe) *resumeChecker {
	t.Helper()
	for _, o := range p.observers {
		if c, ok := o.(*resumeChecker); ok {
			return c
		}
	}
	t.Fatalf("probe %s has no resume checker", p.cfg.Name)
	return nil
}

// resumeVerdicts collects a probe's resume verdicts as they are judged.
type resumeVerdicts struct {
	mu  sync.Mutex
	all []judge.ResumeVerdict
}

// Outcome keeps the resume verdicts the probe's sinks hear.
func (r *resumeVerdicts) Outcome(o judge.Outcome) {
	if o.Kind != judge.ResumeChecked {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, *o.Resume)
}

// matching returns the verdicts pick accepts, in the order judged.
func (r *resumeVerdicts) matching(pick func(judge.ResumeVerdict) bool) []judge.ResumeVerdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []judge.ResumeVerdict
	for _, v := range r.all {
		if pick(v) {
			out = append(out, v)
		}
	}
	return out
}

// on picks the verdicts of one path (and apiserver).
func on(path, apiserver string) func(judge.ResumeVerdict) bool {
	return func(v judge.ResumeVerdict) bool { return v.Path == path && v.APIServer == apiserver }
}

// round waits until the path has a verdict at every age among checks that
// began at or after from, and returns the first at each age.
func (r *resumeVerdicts) round(t *testing.T, from time.Time, path, apiserver string, ages []time.Duration, within time.Duration) map[time.Duration]judge.ResumeVerdict {
	t.Helper()
	got := map[time.Duration]judge.ResumeVerdict{}
	localcluster.EventuallyShows(t, within, fmt.Sprintf("resume checks on %s %s at %v after %s", path, apiserver, ages, from.Format(time.TimeOnly)), func() bool {
		for _, v := range r.matching(on(path, apiserver)) {
			if _, ok := got[v.Age]; !ok && !v.At.Before(from) {
				got[v.Age] = v
			}
		}
		return len(got) == len(ages)
	}, func() string { return fmt.Sprintf("%d verdicts so far", len(r.matching(on(path, apiserver)))) })
	return got
}

// expectOutcomes fails unless each age's verdict has the outcome wanted.
func expectOutcomes(t *testing.T, what string, got map[time.Duration]judge.ResumeVerdict, want map[time.Duration]string) {
	t.Helper()
	for age, outcome := range want {
		if v := got[age]; v.Outcome != outcome {
			t.Errorf("%s, age %s (resumed from %s, written %s before): %s, want %s (missing %v, duplicated %v, out of order %v, err %v)",
				what, age, v.From, v.ResumedAfter.Round(time.Millisecond), v.Outcome, outcome, v.Missing, v.Duplicated, v.OutOfOrder, v.Err)
		}
	}
}

// exposedSeries gathers the probe's registry and calls each with the labels
// and sample of every series of family, without creating any.
func exposedSeries(t *testing.T, tp *testProbe, family string, each func(labels map[string]string, m *dto.Metric)) {
	t.Helper()
	families, err := tp.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			each(l, m)
		}
	}
}

// resumeWindow reads a path's window as exposed: ok is false while it is
// absent.
func resumeWindow(t *testing.T, tp *testProbe, path, apiserver string) (w float64, ok bool) {
	t.Helper()
	exposedSeries(t, tp, "watchprobe_resume_window_seconds", func(l map[string]string, m *dto.Metric) {
		if l["probe"] == tp.cfg.Name && l["path"] == path && l["apiserver"] == apiserver {
			w, ok = m.GetGauge().GetValue(), true
		}
	})
	return w, ok
}

// windowBecomes waits until the path's exposed window is want.
func windowBecomes(t *testing.T, tp *testProbe, path, apiserver string, want time.Duration, within time.Duration) {
	t.Helper()
	localcluster.EventuallyShows(t, within, fmt.Sprintf("window of %s %s at %s", path, apiserver, want), func() bool {
		w, ok := resumeWindow(t, tp, path, apiserver)
		return ok && w == want.Seconds()
	}, func() string {
		w, ok := resumeWindow(t, tp, path, apiserver)
		return fmt.Sprintf("%gs (exposed: %v)", w, ok)
	})
}

// resumeConfig is a probe writing once a second (three events a cycle)
// with resume checks at ages, every `every`.
func resumeConfig(name, namespace string, every time.Duration, ages ...time.Duration) config.Config {
	cfg := fastConfig(name, namespace)
	cfg.Interval = model.Duration(time.Second)
	cfg.Updates = 1
	cfg.Paths = []string{metrics.PathWatch}
	cfg.Resume = config.ResumeConfig{Every: model.Duration(every)}
	for _, a := range ages {
		cfg.Resume.Ages = append(cfg.Resume.Ages, model.Duration(a))
	}
	return cfg
}

// apiserverMetrics scrapes kube-apiserver's /metrics.
func apiserverMetrics(t testing.TB, c *localcluster.Cluster) map[string]*dto.MetricFamily {
	t.Helper()
	client, err := rest.HTTPClientFor(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return scrape(t, client, c.APIServerURL+"/metrics")
}

// scrape reads a /metrics endpoint's families.
func scrape(t testing.TB, client *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// configMapsMetric is the value of one of the watch cache's families for
// configmaps.
func configMapsMetric(t testing.TB, families map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f, ok := families[name]
	if !ok {
		t.Fatalf("kube-apiserver exposes no %s", name)
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" && l.GetValue() == "configmaps" {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("kube-apiserver's %s has no series for configmaps", name)
	return 0
}

// updateConfigMaps updates n ConfigMaps in namespace (created there),
// from 16 writers, through the apiserver.
func updateConfigMaps(t *testing.T, c *localcluster.Cluster, namespace string, n int) {
	t.Helper()
	config := c.AdminConfig()
	config.QPS, config.Burst = -1, 0 // as fast as the apiserver answers
	client := kubernetes.NewForConfigOrDie(config)
	ctx := context.Background()
	const writers = 16
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for g := range writers {
		wg.Go(func() {
			cm, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("busy-%d", g)}}, metav1.CreateOptions{})
			for i := g; err == nil && i < n; i += writers {
				cm.Data = map[string]string{"i": strconv.Itoa(i)}
				cm, err = client.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// With kube-apiserver's default settings, a watch resumes from any
// resourceVersion its watch cache still holds: ages under the 75 s it is
// configured to keep replay exactly, on the watch path and the etcd path.
// Once the cache's ring has wrapped (here: a burst of writes to other
// ConfigMaps larger than its capacity), an age beyond 75 s is expired on
// the watch path, while etcd, not yet compacted, still replays it; the
// window is the largest age under 75 s. Compacting etcd then expires every
// age on the etcd path, and changes nothing on the watch path, whose
// history is the cache's own.
func TestResumeWindowIsTheWatchCacheHistory(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{})
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	localcluster.CreateNamespacesForTest(t, admin, "resume")
	localcluster.CreateNamespacesForTest(t, admin, "busy")
	ages := []time.Duration{10 * time.Second, time.Minute, 2 * time.Minute}
	cfg := resumeConfig("history", "resume", 5*time.Second, ages...)
	cfg.Paths = []string{metrics.PathWatch, metrics.PathEtcd}
	cfg.Etcd.Endpoints = []string{c.EtcdURL}
	verdicts := &resumeVerdicts{}
	tp := startProbeWith(t, cfg, Options{Config: c.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{verdicts}})
	start := time.Now()

	// The first check at 2m, and every check before it.
	localcluster.Eventually(t, 4*time.Minute, "a resume check at 2m on both paths", func() bool {
		return len(verdicts.matching(func(v judge.ResumeVerdict) bool { return v.Age == 2*time.Minute && v.Path == metrics.PathEtcd })) > 0 &&
			len(verdicts.matching(func(v judge.ResumeVerdict) bool { return v.Age == 2*time.Minute && v.Path == metrics.PathWatch })) > 0
	})
	for _, v := range verdicts.matching(func(judge.ResumeVerdict) bool { return true }) {
		// An idle ring holds between 75 s and twice that: the first
		// check at 2m on the watch path may go either way.
		if (v.Path == metrics.PathEtcd || v.Age < 75*time.Second) && v.Outcome != metrics.ResumeReplayed {
			t.Errorf("%s at %s, %s after the probe started: %s, want replayed (err %v)", v.Path, v.Age, v.At.Sub(start).Round(time.Second), v.Outcome, v.Err)
		}
	}

	capacity := configMapsMetric(t, apiserverMetrics(t, c), "watch_cache_capacity")
	updateConfigMaps(t, c, "busy", int(capacity)+200)
	wrapped := time.Now()
	after := apiserverMetrics(t, c)
	t.Logf("the ConfigMaps watch cache held %g events; %g writes to other ConfigMaps later it holds %g (%g resizes up)",
		capacity, capacity+200, configMapsMetric(t, after, "watch_cache_capacity"), configMapsMetric(t, after, "watch_cache_capacity_increase_total"))
	expectOutcomes(t, "watch path after the ring wrapped", verdicts.round(t, wrapped, metrics.PathWatch, "", ages, time.Minute),
		map[time.Duration]string{10 * time.Second: metrics.ResumeReplayed, time.Minute: metrics.ResumeReplayed, 2 * time.Minute: metrics.ResumeExpired})
	windowBecomes(t, tp, metrics.PathWatch, "", time.Minute, 30*time.Second)
	expectOutcomes(t, "etcd path after the ring wrapped", verdicts.round(t, wrapped, metrics.PathEtcd, "", ages, time.Minute),
		map[time.Duration]string{10 * time.Second: metrics.ResumeReplayed, time.Minute: metrics.ResumeReplayed, 2 * time.Minute: metrics.ResumeReplayed})
	windowBecomes(t, tp, metrics.PathEtcd, "", 2*time.Minute, 30*time.Second)

	ec, err := c.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	head, err := ec.Get(context.Background(), "compact_rev_key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ec.Compact(context.Background(), head.Header.Revision); err != nil {
		t.Fatal(err)
	}
	compacted := time.Now()
	expectOutcomes(t, "etcd path after compaction", verdicts.round(t, compacted, metrics.PathEtcd, "", ages, time.Minute),
		map[time.Duration]string{10 * time.Second: metrics.ResumeExpired, time.Minute: metrics.ResumeExpired, 2 * time.Minute: metrics.ResumeExpired})
	windowBecomes(t, tp, metrics.PathEtcd, "", 0, 30*time.Second)
	expectOutcomes(t, "watch path after compaction", verdicts.round(t, compacted, metrics.PathWatch, "", ages, time.Minute),
		map[time.Duration]string{10 * time.Second: metrics.ResumeReplayed, time.Minute: metrics.ResumeReplayed})

	tp.stop()
	expectCountsMatchVerdicts(t, tp, verdicts)
}

// expectExpiredFrom fails unless every check younger than age replayed and
// every one at age or older expired.
func expectExpiredFrom(t *testing.T, verdicts *resumeVerdicts, age time.Duration) {
	t.Helper()
	for _, v := range verdicts.matching(func(judge.ResumeVerdict) bool { return true }) {
		want := metrics.ResumeReplayed
		if v.Age >= age {
			want = metrics.ResumeExpired
		}
		if v.Outcome != want {
			t.Errorf("%s at %s (resumed from %s, written %s before): %s, want %s (err %v)", v.Path, v.Age, v.From, v.ResumedAfter.Round(time.Millisecond), v.Outcome, want, v.Err)
		}
	}
}

// expectCountsMatchVerdicts fails unless watchprobe_resume_checks_total
// counts exactly the verdicts the probe judged, by path, age and outcome.
func expectCountsMatchVerdicts(t *testing.T, tp *testProbe, verdicts *resumeVerdicts) {
	t.Helper()
	want := map[[4]string]float64{}
	for _, v := range verdicts.matching(func(judge.ResumeVerdict) bool { return true }) {
		want[[4]string{v.Path, v.APIServer, model.Duration(v.Age).String(), v.Outcome}]++
	}
	exposedSeries(t, tp, "watchprobe_resume_checks_total", func(l map[string]string, m *dto.Metric) {
		k := [4]string{l["path"], l["apiserver"], l["age"], l["outcome"]}
		if got := m.GetCounter().GetValue(); got != want[k] {
			t.Errorf("resume checks %v: counted %g, judged %g", k, got, want[k])
		}
		delete(want, k)
	})
	for k, n := range want {
		t.Errorf("resume checks %v: %g judged, no series", k, n)
	}
}

// With the watch cache off for ConfigMaps (--watch-cache-sizes=configmaps#0,
// which 1.37.2 honours: 0 is the only size that still does anything), a
// watch is served by etcd, and how far back it resumes is what etcd's
// compaction left: each compaction (--etcd-compaction-interval, here 15s)
// removes the revisions older than the one the previous compaction saw, so
// etcd holds between 15 s and 30 s. 5s replays, 45s is expired, on the
// watch path as on the etcd path, where the watch cache would have kept at
// least 75 s.
func TestResumeWindowFollowsCompactionWithoutWatchCache(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{APIServerFlags: []string{"--watch-cache-sizes=configmaps#0", "--etcd-compaction-interval=15s"}})
	localcluster.CreateNamespacesForTest(t, kubernetes.NewForConfigOrDie(c.AdminConfig()), "uncached")
	ages := []time.Duration{5 * time.Second, 45 * time.Second}
	cfg := resumeConfig("uncached", "uncached", 5*time.Second, ages...)
	cfg.Paths = []string{metrics.PathWatch, metrics.PathEtcd}
	cfg.Etcd.Endpoints = []string{c.EtcdURL}
	verdicts := &resumeVerdicts{}
	tp := startProbeWith(t, cfg, Options{Config: c.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{verdicts}})

	for _, path := range cfg.Paths {
		localcluster.Eventually(t, 2*time.Minute, "two resume checks at 45s on "+path, func() bool {
			return len(verdicts.matching(func(v judge.ResumeVerdict) bool { return v.Path == path && v.Age == 45*time.Second })) >= 2
		})
		windowBecomes(t, tp, path, "", 5*time.Second, 30*time.Second)
	}
	tp.stop()
	expectExpiredFrom(t, verdicts, 45*time.Second)
	for _, v := range verdicts.matching(func(judge.ResumeVerdict) bool { return true }) {
		if v.Outcome == metrics.ResumeExpired && v.Path == metrics.PathWatch && !strings.Contains(fmt.Sprint(v.Err), "too old") {
			t.Errorf("watch path at %s: expired with %v, want etcd's compaction as the apiserver reports it", v.Age, v.Err)
		}
	}
	expectCountsMatchVerdicts(t, tp, verdicts)
}

// busyWriter writes the ConfigMaps busy-0 to busy-<perTxn-1> of namespace
// straight into etcd, perTxn of them a transaction, rate events a second
// on average (behind, it catches up; ahead, it waits), until stop, which
// returns how many it wrote. The watch cache cannot tell these writes
// from the apiserver's own: it watches etcd. They go around the apiserver
// because the window shrinks below 75 s only above 102,400 / 75 = 1,366
// events a second, and on 2 shared cores the apiserver writes ConfigMaps
// at 400 to 1,400 a second: a test at that rate would pass or fail with
// the machine's load.
func busyWriter(t testing.TB, c *localcluster.Cluster, namespace string, rate, perTxn int) (stop func() int) {
	t.Helper()
	// The cluster's etcd is plain http here; a client of its own keeps
	// the etcd client's log of the cancelled last transaction quiet.
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{c.EtcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	encoder := protobuf.NewSerializer(kube.Scheme, kube.Scheme)
	var ops []clientv3.Op
	for i := range perTxn {
		cm := &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("busy-%d", i), Namespace: namespace, UID: types.UID(fmt.Sprintf("busy-%d", i))},
			Data:       map[string]string{"payload": strings.Repeat("x", 100)},
		}
		var b bytes.Buffer
		if err := encoder.Encode(cm, &b); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("/registry/configmaps/%s/%s", namespace, cm.Name), b.String()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		start, written := time.Now(), 0
		for ctx.Err() == nil {
			if due := int(time.Since(start).Seconds() * float64(rate)); written >= due {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if _, err := client.Txn(ctx).Then(ops...).Commit(); err != nil {
				if ctx.Err() == nil {
					t.Errorf("busy writer: %v", err)
				}
				break
			}
			written += perTxn
		}
		done <- written
	}()
	stopped := false
	var written int
	stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			written = <-done
			client.Close()
		}
		return written
	}
	t.Cleanup(func() { stop() })
	return stop
}

// A busy resource holds less than the 75 s the watch cache is configured
// to keep: the cache's ring grows (doubling while all it holds is younger
// than 75 s) up to 102,400 events and no further, so at 2,000 ConfigMap
// events a second it holds the last 51 s. The probe measures that: 10s and
// 30s replay, 1m15s is expired, the window is 30 s; and kube-apiserver's
// own metrics agree: its ConfigMaps ring is at that bound, and the bound
// over the rate it receives events at lies between the window and the next
// age.
func TestResumeWindowOfABusyResource(t *testing.T) {
	t.Parallel()
	c := localcluster.StartForTest(t, localcluster.Options{})
	localcluster.CreateNamespacesForTest(t, kubernetes.NewForConfigOrDie(c.AdminConfig()), "measured")
	const rate = 2000
	stop := busyWriter(t, c, "busy", rate, 100)
	ages := []time.Duration{10 * time.Second, 30 * time.Second, 75 * time.Second}
	cfg := resumeConfig("busy", "measured", 5*time.Second, ages...)
	verdicts := &resumeVerdicts{}
	tp := startProbeWith(t, cfg, Options{Config: c.AdminConfig(), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{verdicts}})

	localcluster.Eventually(t, 3*time.Minute, "a resume check at 1m15s", func() bool {
		return len(verdicts.matching(func(v judge.ResumeVerdict) bool { return v.Age == 75*time.Second })) > 0
	})
	windowBecomes(t, tp, metrics.PathWatch, "", 30*time.Second, 30*time.Second)
	first := apiserverMetrics(t, c)
	from := time.Now()
	time.Sleep(20 * time.Second)
	last := apiserverMetrics(t, c)
	received := configMapsMetric(t, last, "apiserver_watch_cache_events_received_total") - configMapsMetric(t, first, "apiserver_watch_cache_events_received_total")
	perSecond := received / time.Since(from).Seconds()
	capacity := configMapsMetric(t, last, "watch_cache_capacity")
	written := stop()
	tp.stop()
	held := time.Duration(capacity / perSecond * float64(time.Second))
	t.Logf("kube-apiserver: the ConfigMaps ring holds %g events, received at %.0f a second: %s of history; the probe's window: 30s; %d busy events written",
		capacity, perSecond, held.Round(100*time.Millisecond), written)
	if capacity != 102400 {
		t.Errorf("the ConfigMaps ring holds %g events, want its bound for a 75 s history, 102400", capacity)
	}
	// The ring's history is its capacity over the rate it receives events
	// at, and the writer keeps 2,000 a second only on a machine with the
	// CPU to spare: on a loaded one the rate sinks, the ring holds more
	// than 75 s by the time it is measured, and a comparison with the next
	// age, which the probe found expired earlier at a higher rate, would
	// say nothing. The ring holds at least the window that replayed.
	switch {
	case held < 30*time.Second:
		t.Errorf("kube-apiserver's ring holds %s of history, less than the window the probe measured (30s)", held)
	case perSecond < capacity/75:
		t.Logf("kube-apiserver received %.0f events a second, below the %.0f at which the ring holds less than 75 s: this machine could not keep the busy rate while it was measured", perSecond, capacity/75)
	}
	expectExpiredFrom(t, verdicts, 75*time.Second)
	expectCountsMatchVerdicts(t, tp, verdicts)
}

// One event dropped from a replay, on the path through the load balancer,
// is one incomplete check there, naming that event's resourceVersion, and
// nothing else anywhere: the next checks replay it, and the path pinned to
// the apiserver, whose checks go around the proxy, replays exactly
// throughout.
func TestResumeGapCountedOnce(t *testing.T) {
	t.Parallel()
	cfg, addr := pinnedToLoopback(t, "resumegap", "resumegap")
	ages := []time.Duration{10 * time.Second}
	cfg.Interval, cfg.Updates = model.Duration(time.Second), 1
	cfg.Resume = config.ResumeConfig{Ages: []model.Duration{model.Duration(ages[0])}, Every: model.Duration(3 * time.Second)}
	fp := newProxy(t, cluster)
	verdicts := &resumeVerdicts{}
	tp := startProbeWith(t, cfg, Options{
		// The watch path, its resume checks and the writes through the
		// proxy; the pinned path around it.
		Config: fp.Config(cluster.AdminConfig()), Replica: "r1", OrphanAge: time.Hour, Sinks: []judge.Sink{verdicts},
	})
	expectOutcomes(t, "watch path", verdicts.round(t, time.Time{}, metrics.PathWatch, "", ages, time.Minute),
		map[time.Duration]string{ages[0]: metrics.ResumeReplayed})

	// An update the probe has had the answer to for a second: its event
	// went by on the paths long ago, and the next replay, within 3 s,
	// owes it.
	var rv string
	localcluster.Eventually(t, 30*time.Second, "an acknowledged update a second old", func() bool {
		l := &resumeOf(t, tp.Probe).ledger
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, w := range slices.Backward(l.writes) {
			if age := time.Since(w.at); w.sure && w.rv != 0 && age >= time.Second && age < 2*time.Second {
				rv = strconv.FormatUint(w.rv, 10)
				return true
			}
		}
		return false
	})
	fp.Drop(1, func(ev faultproxy.Event) bool { return ev.ResourceVersion == rv })
	localcluster.Eventually(t, 30*time.Second, "the event dropped from a replay", func() bool { return fp.Applied(faultproxy.Drop) == 1 })
	dropped := time.Now()
	verdicts.round(t, dropped.Add(7*time.Second), metrics.PathWatch, "", ages, time.Minute) // two rounds later
	verdicts.round(t, dropped.Add(7*time.Second), metrics.PathAPIServer, addr, ages, time.Minute)
	tp.stop()

	inexact := verdicts.matching(func(v judge.ResumeVerdict) bool { return v.Outcome != metrics.ResumeReplayed })
	if len(inexact) != 1 || inexact[0].Path != metrics.PathWatch || inexact[0].Outcome != metrics.ResumeIncomplete || !slices.Equal(inexact[0].Missing, []string{rv}) {
		t.Errorf("checks not replayed exactly: %+v; want one incomplete on the watch path, missing %s", inexact, rv)
	}
	if w, _ := resumeWindow(t, tp, metrics.PathAPIServer, addr); w != ages[0].Seconds() {
		t.Errorf("the pinned path's window is %gs, want %s", w, ages[0])
	}
	expectCountsMatchVerdicts(t, tp, verdicts)
}
