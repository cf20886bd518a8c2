package judge

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The series of a path pinned to an apiserver that left go after the
// grace, its resume checks' with them, and a round of resume checks that
// outlasted the apiserver (a wedged one holds each replay up to
// lost_after) does not bring them back: nothing would delete them again.
func TestRetiredResumeSeriesStayDeleted(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewMetricsSink(metrics.NewProbe(reg), "p", []string{metrics.PathWatch}, nil, nil,
		map[string]time.Duration{"1m": time.Minute}, RetiredSeries{Grace: time.Millisecond})
	gone := &PathInfo{Name: metrics.PathAPIServer, APIServer: "10.0.0.1:6443"}
	apiserver := map[string]string{"apiserver": gone.APIServer}
	exposed := func(name string) bool {
		families, err := exportertest.Gather(reg)
		if err != nil {
			t.Fatal(err)
		}
		_, found := exportertest.Sum(families, name, apiserver)
		return found
	}
	s.Outcome(Outcome{Kind: PathAdded, Path: gone})
	if !exposed("watchprobe_resume_checks_total") {
		t.Fatal("no resume series for the added apiserver's path")
	}
	s.Outcome(Outcome{Kind: PathRemoved, Path: gone})
	localcluster.Eventually(t, time.Minute, "the retired path's series deleted", func() bool {
		return !exposed("watchprobe_resume_checks_total") && !exposed("watchprobe_path_up")
	})

	late := *gone // the resume checker names paths by value
	v := ResumeVerdict{Path: late.Name, APIServer: late.APIServer, Age: time.Minute, Outcome: metrics.ResumeReplayed}
	s.Outcome(Outcome{Kind: ResumeChecked, Path: &late, Reason: v.Outcome, Limit: v.Age, Resume: &v})
	s.Outcome(Outcome{Kind: ResumeWindow, Path: &late, Limit: time.Minute})
	for _, name := range []string{"watchprobe_resume_checks_total", "watchprobe_resume_replay_seconds", "watchprobe_resume_window_seconds"} {
		if exposed(name) {
			t.Errorf("%s is back for %s after its path was retired", name, gone.APIServer)
		}
	}
}
