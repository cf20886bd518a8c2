package kube

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/version"
)

// /version as releases and managed offerings serve it: gitVersion decides,
// suffixes and all; the minor field stands in only where gitVersion says
// nothing.
func TestParseServerVersion(t *testing.T) {
	for _, tc := range []struct {
		info         version.Info
		major, minor int
	}{
		{version.Info{GitVersion: "v1.37.2", Major: "1", Minor: "37"}, 1, 37},
		{version.Info{GitVersion: "v1.31.14"}, 1, 31},
		{version.Info{GitVersion: "v1.33.5-eks-3025e55", Major: "1", Minor: "33+"}, 1, 33},
		{version.Info{GitVersion: "v1.32.4-gke.1415000", Major: "1", Minor: "32"}, 1, 32},
		{version.Info{GitVersion: "v1.40.0-alpha.1"}, 1, 40},
		{version.Info{GitVersion: "v1.38"}, 1, 38},
		// A build without version stamps: the fields, if any, say it.
		{version.Info{GitVersion: "v0.0.0-master+$Format:%H$", Major: "1", Minor: "36+"}, 1, 36},
	} {
		v, err := ParseServerVersion(tc.info)
		if err != nil || v.Major != tc.major || v.Minor != tc.minor {
			t.Errorf("%+v: %d.%d (%v), want %d.%d", tc.info, v.Major, v.Minor, err, tc.major, tc.minor)
		}
	}
	for _, info := range []version.Info{
		{GitVersion: "v0.0.0-master+$Format:%H$"},
		{GitVersion: "", Major: "", Minor: ""},
		{GitVersion: "latest", Major: "one", Minor: "x"},
	} {
		if v, err := ParseServerVersion(info); !errors.Is(err, ErrNoRelease) || !strings.Contains(err.Error(), info.GitVersion) {
			t.Errorf("%+v: %+v, %v; want ErrNoRelease naming gitVersion", info, v, err)
		}
	}
}

// Inside the tested range nothing is said; either side, "untested
// version" names the release and the bound it passed. Nothing refuses:
// Untested is all there is.
func TestUntestedVersion(t *testing.T) {
	for _, tc := range []struct {
		minor int
		want  string // "" in range
	}{
		{OldestTestedMinor - 1, "older than 1.31"},
		{OldestTestedMinor, ""},
		{34, ""},
		{NewestTestedMinor, ""},
		{NewestTestedMinor + 1, "newer than 1.37"},
		{NewestTestedMinor + 10, "newer than 1.37"},
	} {
		v := ServerVersion{GitVersion: "v1.x", Major: 1, Minor: tc.minor}
		got := v.Untested()
		switch {
		case tc.want == "" && got != "":
			t.Errorf("1.%d: %q, want nothing: it is in the tested range", tc.minor, got)
		case tc.want != "" && (!strings.HasPrefix(got, "untested version: ") || !strings.Contains(got, tc.want) || !strings.Contains(got, "v1.x")):
			t.Errorf("1.%d: %q, want untested version, %s, naming the release", tc.minor, got, tc.want)
		}
	}
	if got := (ServerVersion{GitVersion: "v2.0.0", Major: 2}).Untested(); !strings.HasPrefix(got, "untested version: ") {
		t.Errorf("v2.0.0: %q, want untested version", got)
	}
	if !(ServerVersion{Major: 1, Minor: 34}).AtLeast(1, 34) || (ServerVersion{Major: 1, Minor: 33}).AtLeast(1, 34) || !(ServerVersion{Major: 2}).AtLeast(1, 40) {
		t.Error("AtLeast compares major, then minor")
	}
}

// The WatchList gate's default by release, as k8s.io/apiserver's
// pkg/features says it: on in 1.32, off in 1.31 and 1.33, on from 1.34.
func TestWatchListByDefaultVersion(t *testing.T) {
	for minor, want := range map[int]bool{30: false, 31: false, 32: true, 33: false, 34: true, 37: true, 40: true} {
		if got := (ServerVersion{Major: 1, Minor: minor}).WatchListByDefault(); got != want {
			t.Errorf("1.%d: WatchList by default %t, want %t", minor, got, want)
		}
	}
}
