package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The retention and the lost horizon a probe's tracker uses: the configured
// ones, else 3 x the deadline and at least 5m, and 2 x the deadline, at
// least 1m, within the retention.
func TestRetentionSetting(t *testing.T) {
	for _, tc := range []struct {
		yaml       string
		want, lost time.Duration
	}{
		{"name: p", 5 * time.Minute, time.Minute},
		{"name: p\ndeadline: 3m\nstall_after: 4m", 9 * time.Minute, 6 * time.Minute},
		{"name: p\nretention: 1m", time.Minute, time.Minute},
		{"name: p\ndeadline: 30s\nstall_after: 1m\nretention: 31s", 31 * time.Second, 31 * time.Second},
		{"name: p\nlost_after: 10s", 5 * time.Minute, 10 * time.Second},
	} {
		var c Config
		if err := yaml.Unmarshal([]byte(tc.yaml), &c); err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		if got := c.RetentionOrDefault(); got != tc.want {
			t.Errorf("%q: writes retained for %s, want %s", tc.yaml, got, tc.want)
		}
		if got := c.LostAfterOrDefault(); got != tc.lost {
			t.Errorf("%q: writes counted lost after %s, want %s", tc.yaml, got, tc.lost)
		}
	}
}

func TestRetentionNotLongerThanDeadlineRejected(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"name: p\nretention: 5s", `probe "p" (line 1): retention: 5s must be longer than the deadline (5s)`},
		{"name: p\nretention: soon", `probe at line 1: retention: "soon" is not a duration`},
	} {
		var c Config
		err := yaml.Unmarshal([]byte(tc.yaml), &c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
}

// The controllers setting: off unless listed, and an error that names the
// entry at fault otherwise.
func TestControllersSetting(t *testing.T) {
	var c Config
	if err := yaml.Unmarshal([]byte("name: p\ncontrollers: [deployment, replicaset]"), &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Controllers) != 2 {
		t.Errorf("controllers %v, want both", c.Controllers)
	}
	if err := yaml.Unmarshal([]byte("name: p"), &c); err != nil || len(c.Controllers) != 0 {
		t.Errorf("controllers %v (%v), want none by default", c.Controllers, err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"name: p\ncontrollers: [job]", `probe "p" (line 1): controllers[0]: "job" is not a controller the probe can time; use one or more of deployment, replicaset`},
		{"name: p\ncontrollers: [deployment, deployment]", `probe "p" (line 1): controllers[1]: "deployment" is listed twice`},
		{"name: p\ncontrollers: deployment", "probe at line 1: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!str `deployment` into []string"},
	} {
		var c Config
		err := yaml.Unmarshal([]byte(tc.yaml), &c)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got: %v\nwant: %s", tc.yaml, err, tc.want)
		}
	}
}

// The three forms of apiservers, and the mapping's fields left out take
// their defaults.
func TestAPIServersConfigForms(t *testing.T) {
	for _, tc := range []struct {
		yaml      string
		discover  bool
		endpoints []string
		retire    time.Duration
		grace     time.Duration
	}{
		{"name: p\napiservers: discover", true, nil, 10 * time.Minute, 2 * time.Minute},
		{"name: p\napiservers: [10.0.0.1:6443, '[fd00::1]:6443']", false, []string{"10.0.0.1:6443", "[fd00::1]:6443"}, 10 * time.Minute, 2 * time.Minute},
		{"name: p\napiservers: {discover: true, retire_after: 1m}", true, nil, time.Minute, 2 * time.Minute},
		{"name: p\napiservers: {discover: true, series_grace: 10m}", true, nil, 10 * time.Minute, 10 * time.Minute},
		{"name: p", false, nil, 10 * time.Minute, 2 * time.Minute},
	} {
		var c Config
		if err := yaml.Unmarshal([]byte(tc.yaml), &c); err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
			continue
		}
		a := c.APIServers
		if a.Discover != tc.discover || !slices.Equal(a.Endpoints, tc.endpoints) || time.Duration(a.RetireAfter) != tc.retire || time.Duration(a.SeriesGrace) != tc.grace || a.ServerName != DefaultServerName {
			t.Errorf("%q: got %+v", tc.yaml, a)
		}
	}
}

// roundTrip is p written as YAML and loaded back.
func roundTrip(t *testing.T, p Config) Config {
	t.Helper()
	out, err := yaml.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Config
	if err := yaml.Unmarshal(out, &back); err != nil {
		t.Fatalf("%s: %v\n%s", p.Name, err, out)
	}
	return back
}
