package metrics

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/watchprobe/watchprobe/internal/golden"
)

// exposition is /metrics, in the text format, of a fixed set of probes in
// one mode: a probe on every configured path, a path pinned to an
// apiserver, each path's initial relist and first activity, one write of
// each verb, a resume check, a controller, and one resource's freshness
// checks through the load balancer and an apiserver, with that apiserver's
// read checks, and the same resource's WatchList sync checks. Values are all zero or fixed.
func exposition(t *testing.T, opts Options) []byte {
	t.Helper()
	reg := prometheus.NewRegistry()
	RegisterInfo(reg)
	self := RegisterSelfHealth(reg, opts, func() (CPUThrottling, bool) {
		return CPUThrottling{Periods: 3, ThrottledPeriods: 2, Throttled: 150 * time.Millisecond}, true
	})
	self.WakeLateness.Observe(0.0004)
	self.StarvedThreshold.Set(0.02)
	m := NewProbeWithOptions(reg, opts)
	exercise(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if mf.GetName() == "watchprobe_watch_idle_seconds" {
			for _, m := range mf.Metric {
				m.Gauge.Value = new(float64) // the age at scrape time: not fixed
			}
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// The exposition of a fixed probe set is exactly the golden one, in both
// histogram modes, so that any change of a name, a label or a HELP shows in
// review; `go test -run TestExpositionGolden -update` rewrites it, and
// promtool checks it as Prometheus's own linter would.
func TestExpositionGolden(t *testing.T) {
	for _, mode := range []struct {
		file string
		opts Options
	}{{"exposition.classic.txt", Options{}}, {"exposition.native.txt", Options{NativeHistogramsOnly: true}}} {
		got := exposition(t, mode.opts)
		file := filepath.Join("testdata", mode.file)
		if _, same := golden.Check(t, file, got); !same {
			t.Errorf("the exposition differs from %s (rerun with -update if the change is meant)", file)
		}
		promtool := filepath.Join(os.Getenv("WATCHPROBE_BIN_DIR"), "promtool")
		if _, err := os.Stat(promtool); err != nil {
			t.Fatalf("promtool: %v (make test builds it; set WATCHPROBE_BIN_DIR)", err)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(got)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on %s: %v\n%s", file, err, out)
		}
	}
}

// exercise gives every family of the probe registry a series.
func exercise(m *Probe) {
	s := m.ForProbe("p", []string{PathInformer, PathWatch, PathEtcd})
	paths := []*PathSeries{m.ForPath("p", PathAPIServer, "10.0.0.1:6443", true)}
	for _, path := range []string{PathInformer, PathWatch, PathEtcd} {
		paths = append(paths, s.Paths[path])
	}
	for _, ps := range paths {
		ps.Counter(Relists, RelistInitial, ModeList).Inc()
		ps.Observer(RelistDuration, ModeList).Observe(0.001)
		ps.Idle.Touch(time.Now())
	}
	r := m.ForResume("p", PathWatch, "", []string{"1m"})
	r.Gauge(ResumeWindow).Set(60)
	s.Gauge(ResumeAge, "1m").Set(60)
	m.ForControllers("p", []string{ControllerDeployment})
	m.ForResource("p", "pods", "")
	m.ForResource("p", "pods", "10.0.0.1:6443")
	m.ForReads("p", "10.0.0.1:6443")
	m.ForWatchList("p", "pods", "")
	m.ForWatchList("p", "pods", "10.0.0.1:6443")
}
