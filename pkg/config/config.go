// Package config is a probe's settings: their types and defaults, their
// validation with errors that name the field and the fix, and the strict
// decoding of the --config.file format.
package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Kinds of marker object a probe can write.
const (
	KindConfigMap = "ConfigMap"
	KindLease     = "Lease"
)

// DefaultPaths lists the watch paths a probe measures by default, in the
// order they are reported.
var DefaultPaths = []string{metrics.PathInformer, metrics.PathWatch}

// KnownPaths lists every path a probe can measure: the default ones and
// etcd, which needs access to etcd and is off unless listed.
var KnownPaths = []string{metrics.PathInformer, metrics.PathWatch, metrics.PathEtcd}

// Config describes one probe. The zero value is invalid; DefaultConfig is a
// valid starting point.
type Config struct {
	// Name identifies the probe in metric labels and marker names.
	Name string `yaml:"name"`
	// Kind of the marker objects: ConfigMap or Lease.
	Kind string `yaml:"kind"`
	// Namespace the markers are written to and watched in.
	Namespace string `yaml:"namespace"`
	// Interval between the starts of two cycles (create, updates, delete).
	Interval model.Duration `yaml:"interval"`
	// Updates is the number of updates per cycle, between create and delete.
	Updates int `yaml:"updates"`
	// Deadline after which an acknowledged write not seen on a path counts
	// as missed there.
	Deadline model.Duration `yaml:"deadline"`
	// Paths are the watch paths to measure: informer, watch, and etcd
	// (a direct etcd watch; needs the etcd settings).
	Paths []string `yaml:"paths"`
	// WatchTimeout: each watch asks the apiserver to end it after a random
	// time between this and twice this, as client-go's reflector does with
	// 5m. The apiserver's --min-request-timeout applies only to watches that
	// ask for nothing, which client-go never sends.
	WatchTimeout model.Duration `yaml:"watch_timeout"`
	// StallAfter: a path on which nothing (no event, no bookmark) arrives
	// for this long while writes are acknowledged counts as stalled.
	StallAfter model.Duration `yaml:"stall_after"`
	// Retention is how long after it was sent a write is kept, so that an
	// event for it arriving late, twice, or again after a relist is still
	// matched and counted as late, duplicate or replayed. An event arriving
	// after that is matched to nothing and not counted: its write was
	// already counted missed, but not late. Memory grows with it, by the
	// writes per second x retention kept (docs/performance.md, sizing).
	// Unset (0): 3 x the deadline, at least 5m, as long as a watch resumed
	// after an outage can still deliver old events (kube-apiserver compacts
	// etcd every 5m by default; a resume from an older resourceVersion
	// usually fails with 410 and relists).
	Retention model.Duration `yaml:"retention"`
	// LostAfter is how long after the apiserver answered it a write not
	// delivered on a path is counted lost there, a verdict apart from
	// missed: missed says the event was not delivered by the deadline (slow
	// or lost), lost that it was not delivered at all. It must lie beyond
	// the deadline, so that a slow second of etcd or of a webhook is late
	// and not lost, and within the retention, so that a write is still
	// known when it is judged. Unset (0): 2 x the deadline, at least 1m, at
	// most the retention.
	LostAfter model.Duration `yaml:"lost_after"`
	// Etcd reaches etcd for the etcd path.
	Etcd EtcdConfig `yaml:"etcd"`
	// APIServers adds a watch path pinned to each apiserver.
	APIServers APIServersConfig `yaml:"apiservers"`
	// Resume, when set, checks how far back a watch can resume on each path
	// (pkg/probe/resume.go). Off unless set.
	Resume ResumeConfig `yaml:"resume"`
	// Controllers lists the built-in controllers whose reaction to a change
	// the probe times (pkg/probe/controller.go): each is a marker object the probe
	// keeps in its namespace and changes every interval. Off unless listed.
	Controllers []string `yaml:"controllers"`
	// Freshness, when set, measures how far each listed resource's watch
	// cache is behind etcd, and whether the apiservers' caches list the
	// probe's markers as they were written (pkg/probe/freshness). Off
	// unless set.
	Freshness FreshnessConfig `yaml:"freshness"`
	// WatchList, when set, times each listed resource's sync as an
	// informer's WatchList makes it, to its end bookmark
	// (pkg/probe/watchlist). Off unless set.
	WatchList WatchListConfig `yaml:"watch_list"`
}

// KnownControllers are the controllers a probe can time.
var KnownControllers = []string{metrics.ControllerDeployment, metrics.ControllerReplicaSet}

// APIServersConfig adds one watch path per apiserver, each pinned to its
// apiserver's own address rather than sent wherever the load balancer
// chooses: the only way to see that one apiserver's watch cache has stopped
// while the others deliver. Writes still go through the ordinary client.
type APIServersConfig struct {
	// Discover follows the `kubernetes` EndpointSlices in `default`, which
	// list every apiserver of the cluster.
	Discover bool `yaml:"discover"`
	// Endpoints names the apiservers (host:port) instead, for clusters whose
	// EndpointSlice lists addresses that pods cannot reach.
	Endpoints []string `yaml:"endpoints"`
	// ServerName is the name each apiserver's serving certificate is
	// verified against, since it is dialled by address.
	ServerName string `yaml:"server_name"`
	// RetireAfter bounds how long a path outlives its apiserver's endpoint.
	// An apiserver whose etcd connection breaks, or that hangs, loses its
	// endpoint lease within seconds, and that is the apiserver to watch: its
	// path stays while the apiserver still accepts connections, and goes at
	// once when connections are refused (the apiserver was stopped).
	RetireAfter model.Duration `yaml:"retire_after"`
	// SeriesGrace is how long a retired path's series stay exposed, so
	// that what it counted just before it went is scraped: a few scrape
	// intervals.
	SeriesGrace model.Duration `yaml:"series_grace"`
}

// DiscoverAPIServers is the short form of `apiservers: {discover: true}`.
const DiscoverAPIServers = "discover"

// DefaultServerName is the name every apiserver's serving certificate has:
// the in-cluster name of the kubernetes Service.
const DefaultServerName = "kubernetes.default.svc"

func (a APIServersConfig) validate(field func(name, format string, args ...any)) {
	if a.Discover && len(a.Endpoints) > 0 {
		field("apiservers", "discover and endpoints exclude each other; keep one")
	}
	for i, e := range a.Endpoints {
		host, port, err := net.SplitHostPort(e)
		if err != nil || host == "" {
			field(fmt.Sprintf("apiservers.endpoints[%d]", i), "%q is not host:port; write the apiserver's address and secure port, e.g. 10.0.0.1:6443", e)
			continue
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			field(fmt.Sprintf("apiservers.endpoints[%d]", i), "%q has no valid port; use 1 to 65535, e.g. 10.0.0.1:6443", e)
		}
		if slices.Index(a.Endpoints, e) != i {
			field(fmt.Sprintf("apiservers.endpoints[%d]", i), "%q is listed twice", e)
		}
	}
	if a.ServerName == "" {
		field("apiservers.server_name", "is empty; use the name on the apiservers' serving certificates, e.g. %s", DefaultServerName)
	}
	if time.Duration(a.RetireAfter) <= 0 {
		field("apiservers.retire_after", "must be positive, got %s", a.RetireAfter)
	}
	if time.Duration(a.SeriesGrace) <= 0 {
		field("apiservers.series_grace", "must be positive, got %s; use a few scrape intervals, e.g. 2m", a.SeriesGrace)
	}
}

// ResumeConfig has the probe, every Every, open a short watch on its
// markers from the resourceVersion of one of its own writes at each of
// Ages, on each path that reaches an apiserver or etcd, and judge whether
// every event since is replayed: how long a controller can be away and
// still resume rather than relist.
type ResumeConfig struct {
	// Ages are how far back each check resumes: from the newest write at
	// least this old. Each is a label value.
	Ages []model.Duration `yaml:"ages"`
	// Every is the time between the starts of two rounds of checks.
	Every model.Duration `yaml:"every"`
	// set: the probe's configuration has a resume setting, so that an
	// empty list of ages is an error rather than the checks quietly off.
	set bool
}

// Enabled reports whether the probe has paths pinned to apiservers.
func (a APIServersConfig) Enabled() bool { return a.Discover || len(a.Endpoints) > 0 }

// Enabled reports whether the probe runs resume checks.
func (r ResumeConfig) Enabled() bool { return len(r.Ages) > 0 }

// DefaultResumeConfig is what `resume: {}` sets: ages from a reconnect
// after a blip (10s) through an apiserver's rolling restart (30s, 60s), the
// history kube-apiserver's watch cache is configured to keep (75s), past it
// (120s), to etcd's default compaction interval (300s); a round a minute,
// six short watches per path.
func DefaultResumeConfig() ResumeConfig {
	ages := []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 75 * time.Second, 2 * time.Minute, 5 * time.Minute}
	r := ResumeConfig{Every: model.Duration(time.Minute)}
	for _, a := range ages {
		r.Ages = append(r.Ages, model.Duration(a))
	}
	return r
}

// Bounds of the resume settings: the probe keeps every write as old as the
// largest age, and each age is a label value and a watch per path and round.
const (
	maxResumeAges = 10
	minResumeAge  = time.Second
	maxResumeAge  = time.Hour
	minResumeEach = time.Second
)

func (r ResumeConfig) validate(field func(name, format string, args ...any)) {
	if !r.set && !r.Enabled() {
		return
	}
	if len(r.Ages) == 0 {
		field("resume.ages", "is empty; list the ages to resume from, e.g. [10s, 60s, 2m], or remove resume to turn the checks off")
	}
	if len(r.Ages) > maxResumeAges {
		field("resume.ages", "lists %d ages; use at most %d: each is a label value, and a watch per path in every round", len(r.Ages), maxResumeAges)
	}
	for i, a := range r.Ages {
		name := fmt.Sprintf("resume.ages[%d]", i)
		switch d := time.Duration(a); {
		case d < minResumeAge:
			field(name, "%s is too short; use at least %s", a, model.Duration(minResumeAge))
		case d > maxResumeAge:
			field(name, "%s is too long; use at most %s: the probe keeps every write that long", a, model.Duration(maxResumeAge))
		case slices.Index(r.Ages, a) != i:
			field(name, "%s is listed twice", a)
		}
	}
	if time.Duration(r.Every) < minResumeEach {
		field("resume.every", "%s is too short; use at least %s (1m is the default: six ages make six short watches a minute per path)", r.Every, model.Duration(minResumeEach))
	}
}

// EtcdConfig is how the etcd path reaches etcd: the etcd that the
// apiserver uses, with the client certificate that etcd requires in a real
// cluster.
type EtcdConfig struct {
	Endpoints   []string       `yaml:"endpoints"`
	CertFile    string         `yaml:"cert_file"`
	KeyFile     string         `yaml:"key_file"`
	CAFile      string         `yaml:"ca_file"`
	DialTimeout model.Duration `yaml:"dial_timeout"`
	// Prefix is kube-apiserver's --etcd-prefix.
	Prefix string `yaml:"prefix"`
}

// DefaultConfig is the probe `make demo` and a flag-only start run.
func DefaultConfig() Config {
	return Config{
		Name:      "default",
		Kind:      KindConfigMap,
		Namespace: "watchprobe",
		Interval:  model.Duration(10 * time.Second),
		Updates:   1,
		Deadline:  model.Duration(5 * time.Second),
		Paths:     slices.Clone(DefaultPaths),

		WatchTimeout: model.Duration(5 * time.Minute),
		StallAfter:   model.Duration(30 * time.Second),
		Etcd:         EtcdConfig{DialTimeout: model.Duration(5 * time.Second), Prefix: "/registry"},
		APIServers:   APIServersConfig{ServerName: DefaultServerName, RetireAfter: model.Duration(10 * time.Minute), SeriesGrace: model.Duration(2 * time.Minute)},
	}
}

// MaxNameLength keeps "watchprobe-<probe>-<replica>-<run>-<cycle>" and the
// label values built from the name within Kubernetes' limits.
const MaxNameLength = 40

// Validate returns an error naming each field at fault and how to fix it.
func (c *Config) Validate() error {
	var errs []string
	field := func(name string, format string, args ...any) {
		errs = append(errs, name+": "+fmt.Sprintf(format, args...))
	}
	switch {
	case c.Name == "":
		field("name", "is required")
	case len(c.Name) > MaxNameLength:
		field("name", "%q is %d characters long; at most %d are allowed", c.Name, len(c.Name), MaxNameLength)
	case len(validation.IsDNS1123Label(c.Name)) > 0:
		field("name", "%q is invalid; use lowercase letters, digits and '-', starting and ending with a letter or digit", c.Name)
	}
	if c.Kind != KindConfigMap && c.Kind != KindLease {
		field("kind", "%q is not supported; use %s or %s", c.Kind, KindConfigMap, KindLease)
	}
	if c.Namespace == "" {
		field("namespace", "is required")
	} else if len(validation.IsDNS1123Label(c.Namespace)) > 0 {
		field("namespace", "%q is not a valid namespace name; use lowercase letters, digits and '-'", c.Namespace)
	}
	if time.Duration(c.Interval) < 100*time.Millisecond {
		field("interval", "%s is too short; use at least 100ms", c.Interval)
	}
	if c.Updates < 0 || c.Updates > 100 {
		field("updates", "%d is out of range; use 0 to 100", c.Updates)
	}
	if time.Duration(c.Deadline) <= 0 {
		field("deadline", "must be positive, got %s", c.Deadline)
	}
	if time.Duration(c.WatchTimeout) < time.Second {
		field("watch_timeout", "%s is too short; use at least 1s (client-go uses 5m)", c.WatchTimeout)
	}
	if time.Duration(c.StallAfter) <= time.Duration(c.Deadline) {
		field("stall_after", "%s must be longer than the deadline (%s)", c.StallAfter, c.Deadline)
	}
	if c.Retention != 0 && time.Duration(c.Retention) <= time.Duration(c.Deadline) {
		field("retention", "%s must be longer than the deadline (%s): an event is counted late only while its write is retained; leave it out for the default, 3 x the deadline, at least 5m", c.Retention, c.Deadline)
	}
	if c.LostAfter != 0 {
		switch lost := time.Duration(c.LostAfter); {
		case lost <= time.Duration(c.Deadline):
			field("lost_after", "%s must be longer than the deadline (%s): an event later than the deadline is late, and lost only if it never comes; leave it out for the default, 2 x the deadline, at least 1m", c.LostAfter, c.Deadline)
		case lost > c.RetentionOrDefault():
			field("lost_after", "%s is longer than the retention (%s), after which the write is forgotten; raise retention or shorten lost_after", c.LostAfter, model.Duration(c.RetentionOrDefault()))
		}
	}
	if len(c.Paths) == 0 {
		field("paths", "is empty; use one or more of %s", strings.Join(KnownPaths, ", "))
	}
	for i, p := range c.Paths {
		if !slices.Contains(KnownPaths, p) {
			field("paths", "%q is not a path; use one or more of %s", p, strings.Join(KnownPaths, ", "))
		} else if slices.Index(c.Paths, p) != i {
			field("paths", "%q is listed twice", p)
		}
	}
	etcd := slices.Contains(c.Paths, metrics.PathEtcd)
	switch {
	case etcd && len(c.Etcd.Endpoints) == 0:
		field("etcd.endpoints", "is empty, but paths lists etcd; give the etcd client URLs the apiserver uses, e.g. https://10.0.0.1:2379")
	case !etcd && len(c.Etcd.Endpoints) > 0:
		field("etcd.endpoints", "are set, but paths does not list etcd; add etcd to paths or remove the endpoints")
	}
	if (c.Etcd.CertFile == "") != (c.Etcd.KeyFile == "") {
		field("etcd.cert_file", "and etcd.key_file go together; set both or neither")
	}
	if time.Duration(c.Etcd.DialTimeout) <= 0 {
		field("etcd.dial_timeout", "must be positive, got %s", c.Etcd.DialTimeout)
	}
	if !strings.HasPrefix(c.Etcd.Prefix, "/") {
		field("etcd.prefix", "%q must start with /; kube-apiserver's default --etcd-prefix is /registry", c.Etcd.Prefix)
	}
	c.APIServers.validate(field)
	c.Resume.validate(field)
	c.Freshness.validate(field)
	c.WatchList.validate(field)
	for i, ctl := range c.Controllers {
		name := fmt.Sprintf("controllers[%d]", i)
		if !slices.Contains(KnownControllers, ctl) {
			field(name, "%q is not a controller the probe can time; use one or more of %s", ctl, strings.Join(KnownControllers, ", "))
		} else if slices.Index(c.Controllers, ctl) != i {
			field(name, "%q is listed twice", ctl)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// CheckFiles reads the files the settings name (the etcd path's
// certificate, key and CA), so that one that cannot be read or parsed is
// an error when the configuration is loaded, naming the field, rather than
// a probe that fails to start after a reload has stopped its predecessor.
func (c Config) CheckFiles() error {
	if !slices.Contains(c.Paths, metrics.PathEtcd) {
		return nil
	}
	_, err := c.Etcd.TLS()
	return err
}

// TLS is the etcd client's TLS configuration, nil for plain HTTP.
func (e EtcdConfig) TLS() (*tls.Config, error) {
	if e.CertFile == "" && e.CAFile == "" {
		return nil, nil
	}
	for _, f := range []struct{ field, file string }{{"etcd.cert_file", e.CertFile}, {"etcd.key_file", e.KeyFile}, {"etcd.ca_file", e.CAFile}} {
		if f.file == "" {
			continue
		}
		if _, err := os.ReadFile(f.file); err != nil {
			return nil, fmt.Errorf("%s: %w", f.field, err)
		}
	}
	info := transport.TLSInfo{CertFile: e.CertFile, KeyFile: e.KeyFile, TrustedCAFile: e.CAFile}
	tlsConfig, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd.cert_file, etcd.key_file, etcd.ca_file: not a usable client certificate, key and CA: %w", err)
	}
	return tlsConfig, nil
}

// RetentionOrDefault is how long a probe keeps a write: the configured
// retention, or the default for the deadline.
func (c *Config) RetentionOrDefault() time.Duration {
	if c.Retention > 0 {
		return time.Duration(c.Retention)
	}
	return DefaultRetention(time.Duration(c.Deadline))
}

// LostAfterOrDefault is how long after its answer an undelivered write is
// counted lost: the configured lost_after, or the default, within the
// retention.
func (c *Config) LostAfterOrDefault() time.Duration {
	if c.LostAfter > 0 {
		return time.Duration(c.LostAfter)
	}
	return DefaultLostAfter(time.Duration(c.Deadline), c.RetentionOrDefault())
}

// DefaultLostAfter is well beyond the deadline: a write delivered within
// it was slow, not lost; and at most the retention.
func DefaultLostAfter(deadline, retention time.Duration) time.Duration {
	return min(max(2*deadline, time.Minute), retention)
}

// DefaultRetention keeps a write long enough for a watch that resumes
// after minutes of outage to deliver its event late and have it counted.
func DefaultRetention(deadline time.Duration) time.Duration {
	return max(3*deadline, 5*time.Minute)
}
