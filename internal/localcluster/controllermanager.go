package localcluster

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// ControllerManagerOptions shape one kube-controller-manager.
type ControllerManagerOptions struct {
	// Controllers it runs, as its --controllers. Empty means deployment,
	// replicaset and garbagecollector: the two that answer a controller
	// probe's markers, and the collector that deletes a Deployment's
	// ReplicaSet after it, so that nothing is left behind.
	Controllers []string
	// Config is how it reaches the apiserver, written as its own
	// kubeconfig: nil means the cluster's admin identity, straight to the
	// apiserver; a test puts a fault proxy between them with the proxy's
	// Config.
	Config *rest.Config
	// Leader election's timings. It is always on, as in a real cluster, so
	// that a restart waits for the old leader's lease to expire. Zero
	// means 8s, 6s and 1s: short enough for a test to measure the gap.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Flags are appended to the defaults.
	Flags []string
}

// ControllerManager is a kube-controller-manager running against a
// Cluster.
type ControllerManager struct {
	proc *process
}

// controllerManagerRuns numbers the managers of a cluster, for their files.
var controllerManagerRuns atomic.Int32

// StartControllerManager starts a kube-controller-manager against c. It
// returns once the process runs; whether it leads, and so acts, shows in
// what its controllers do. The serviceaccount-token controller is never
// run unless listed, so it needs no --service-account-private-key-file.
func (c *Cluster) StartControllerManager(opts ControllerManagerOptions) (*ControllerManager, error) {
	binDir, err := findBinDir("")
	if err != nil {
		return nil, err
	}
	controllers := opts.Controllers
	if len(controllers) == 0 {
		controllers = []string{"deployment", "replicaset", "garbagecollector"}
	}
	config := opts.Config
	if config == nil {
		config = c.AdminConfig()
	}
	n := controllerManagerRuns.Add(1)
	path := func(name string) string {
		return filepath.Join(c.dir, fmt.Sprintf("kube-controller-manager-%d.%s", n, name))
	}
	if err := WriteKubeconfig(config, path("kubeconfig")); err != nil {
		return nil, err
	}
	orDefault := func(d, def time.Duration) string {
		if d == 0 {
			d = def
		}
		return d.String()
	}
	m := &ControllerManager{proc: &process{
		name:    "kube-controller-manager",
		path:    filepath.Join(binDir, "kube-controller-manager"),
		logPath: path("log"),
		args: append([]string{
			"--kubeconfig", path("kubeconfig"),
			"--controllers", strings.Join(controllers, ","),
			// No serving: nothing here scrapes it, and its port would be
			// one more to choose.
			"--secure-port", "0",
			"--leader-elect=true",
			// A lease of its own, so that managers started one after
			// another for different tests never wait for each other's;
			// a restart of this one (Kill, Start) waits for its own.
			"--leader-elect-resource-name", fmt.Sprintf("kube-controller-manager-%d", n),
			"--leader-elect-lease-duration", orDefault(opts.LeaseDuration, 8*time.Second),
			"--leader-elect-renew-deadline", orDefault(opts.RenewDeadline, 6*time.Second),
			"--leader-elect-retry-period", orDefault(opts.RetryPeriod, time.Second),
			"--v", "2",
		}, opts.Flags...),
	}}
	if err := checkBinary(m.proc); err != nil {
		return nil, fmt.Errorf("%w (`make controlplane` builds kube-controller-manager)", err)
	}
	if err := m.proc.start(); err != nil {
		return nil, err
	}
	return m, nil
}

// Pause freezes the controller-manager (SIGSTOP): its connections stay
// open and silent, as a process that hangs.
func (m *ControllerManager) Pause() error { return m.proc.signal(syscall.SIGSTOP) }

// Continue thaws it (SIGCONT).
func (m *ControllerManager) Continue() error { return m.proc.signal(syscall.SIGCONT) }

// Kill ends it abruptly (SIGKILL), as a crash: its lease is not released,
// so a successor waits for the lease to expire.
func (m *ControllerManager) Kill() error {
	return ignoreKilled(m.proc.stop(syscall.SIGKILL, 0))
}

// Start starts it again after Kill or Stop, with the same flags.
func (m *ControllerManager) Start() error { return m.proc.start() }

// Stop ends it (SIGTERM, then SIGKILL after a grace); a frozen one is
// thawed first so that it can hear the signal. Safe to call more than once.
func (m *ControllerManager) Stop() error {
	if m.proc.pid() != 0 {
		_ = m.proc.signal(syscall.SIGCONT)
	}
	return ignoreKilled(m.proc.stop(syscall.SIGTERM, 10*time.Second))
}

// PID is its process id, 0 when it is not running.
func (m *ControllerManager) PID() int { return m.proc.pid() }

// LogTail returns the last lines of its log.
func (m *ControllerManager) LogTail(lines int) string { return m.proc.logTail(lines) }

// StartControllerManagerForTest starts a kube-controller-manager for t and
// stops it when t ends, showing its log's tail if t failed.
func StartControllerManagerForTest(t testing.TB, c *Cluster, opts ControllerManagerOptions) *ControllerManager {
	t.Helper()
	m, err := c.StartControllerManager(opts)
	return stopWhenDone(t, "kube-controller-manager", m, err)
}
