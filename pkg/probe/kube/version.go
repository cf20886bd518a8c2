package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/version"
)

// The kube-apiserver minors `make compat` runs the exporter against
// (docs/compatibility.md; hack/compat's tests keep the two equal). A server
// outside them is measured all the same: the exporter logs a warning once
// and `watchprobe check` reports an untested version, and nothing refuses,
// so that a monitor never holds back a cluster's upgrade.
//
// NewestTestedMinor is a variable so that a test can pretend the tested
// range ends below the real apiserver it runs against.
var (
	OldestTestedMinor = 31
	NewestTestedMinor = 37
)

// ServerVersion is the release a kube-apiserver reports on /version.
type ServerVersion struct {
	// GitVersion as served: v1.33.13, v1.34.2-eks-1234, v1.32.1-gke.100.
	GitVersion   string
	Major, Minor int
}

func (v ServerVersion) String() string { return v.GitVersion }

// AtLeast says whether v is release major.minor or later.
func (v ServerVersion) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// gitVersionRE reads the major and minor out of gitVersion, which managed
// offerings suffix (-eks-…, -gke.…) and whose separate minor field they
// suffix too ("33+").
var gitVersionRE = regexp.MustCompile(`^v?(\d+)\.(\d+)(?:\.|$|[-+])`)

// ErrNoRelease: /version answered without a release it can be read from.
var ErrNoRelease = errors.New("kube-apiserver reports no release on /version")

// ParseServerVersion reads /version's answer. gitVersion decides; the
// major and minor fields, which some distributions leave empty or suffix,
// stand in only where gitVersion says nothing (a build without version
// stamps says v0.0.0-master).
func ParseServerVersion(info version.Info) (ServerVersion, error) {
	v := ServerVersion{GitVersion: info.GitVersion}
	if m := gitVersionRE.FindStringSubmatch(info.GitVersion); m != nil {
		v.Major, _ = strconv.Atoi(m[1])
		v.Minor, _ = strconv.Atoi(m[2])
		if v.Major > 0 {
			return v, nil
		}
	}
	major, err1 := strconv.Atoi(info.Major)
	minor, err2 := strconv.Atoi(regexp.MustCompile(`^\d+`).FindString(info.Minor))
	if err1 != nil || err2 != nil || major == 0 {
		return v, fmt.Errorf("%w (gitVersion %q, major %q, minor %q)", ErrNoRelease, info.GitVersion, info.Major, info.Minor)
	}
	v.Major, v.Minor = major, minor
	if v.GitVersion == "" {
		v.GitVersion = fmt.Sprintf("v%d.%d", major, minor)
	}
	return v, nil
}

// WatchListByDefault says whether the release serves WatchList (a watch
// with sendInitialEvents) with its defaults: its WatchList gate
// (k8s.io/apiserver pkg/features) is alpha and off to 1.31, beta and on in
// 1.32, off again in 1.33, and on from 1.34. A cluster may set the gate
// either way; this is the default only.
func (v ServerVersion) WatchListByDefault() bool {
	return v.AtLeast(1, 34) || v.Major == 1 && v.Minor == 32
}

// Untested says why v is outside the tested range, or "" if it is in it.
func (v ServerVersion) Untested() string {
	switch {
	case v.Major != 1:
		return fmt.Sprintf("untested version: kube-apiserver %s is not a 1.x release; watchprobe was tested on 1.%d to 1.%d", v, OldestTestedMinor, NewestTestedMinor)
	case v.Minor > NewestTestedMinor:
		return fmt.Sprintf("untested version: kube-apiserver %s is newer than 1.%d, the newest watchprobe was tested on; it is measured as 1.%d is, and a feature that changed since may be measured wrongly", v, NewestTestedMinor, NewestTestedMinor)
	case v.Minor < OldestTestedMinor:
		return fmt.Sprintf("untested version: kube-apiserver %s is older than 1.%d, the oldest watchprobe was tested on; features it lacks are reported refused or unavailable", v, OldestTestedMinor)
	}
	return ""
}

// ServerVersion asks the apiserver for its release.
func (c *Client) ServerVersion(ctx context.Context) (ServerVersion, error) {
	body, err := c.core.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return ServerVersion{}, err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return ServerVersion{}, fmt.Errorf("%w: %v", ErrNoRelease, err)
	}
	return ParseServerVersion(info)
}
