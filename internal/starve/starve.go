// Package starve starves processes of CPU in the kernel's own way, as a
// node does to a pod: it puts them in cgroups of cgroup v1's cpu
// controller (as root) with a CFS quota that throttles them, or with a low
// weight (cpu.shares) beside busy processes; and it runs an independent
// watch client beside them, whose latencies are the reference the
// exporter's are compared with. The exporter's self-health test and `make
// bench` use it.
package starve

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/selfhealth"
)

// Root is where cgroup v1's cpu controller is mounted.
const Root = "/sys/fs/cgroup/cpu"

// Unavailable says why this process cannot make cgroups of cgroup v1's cpu
// controller, "" if it can: the controller is not mounted at Root (a host
// with cgroup v2 only), or the process is not root.
func Unavailable() string {
	if _, err := os.Stat(filepath.Join(Root, "cpu.shares")); err != nil {
		return fmt.Sprintf("cgroup v1's cpu controller is not mounted at %s (a host with cgroup v2 only?): %v", Root, err)
	}
	if os.Geteuid() != 0 {
		return "not running as root"
	}
	return ""
}

// Group is a cgroup of the cpu controller that this process made.
type Group struct{ Dir string }

// NewGroup makes a cgroup named name under parent, or under the root if
// parent is nil.
func NewGroup(parent *Group, name string) (*Group, error) {
	dir := Root
	if parent != nil {
		dir = parent.Dir
	}
	if _, err := os.Stat(filepath.Join(Root, "cpu.shares")); err != nil {
		return nil, fmt.Errorf("cgroup v1's cpu controller is not mounted at %s: %w", Root, err)
	}
	g := &Group{Dir: filepath.Join(dir, name)}
	if err := os.Mkdir(g.Dir, 0o755); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Group) write(file string, v int64) error {
	return os.WriteFile(filepath.Join(g.Dir, file), []byte(strconv.FormatInt(v, 10)), 0o644)
}

// SetShares sets the group's weight: a pod's CPU request of m millicores
// gives its cgroup m*1024/1000 shares.
func (g *Group) SetShares(shares int) error { return g.write("cpu.shares", int64(shares)) }

// SharesOfRequest is the cpu.shares the kubelet gives a CPU request of
// millicores (at least 2).
func SharesOfRequest(millicores int) int { return max(millicores*1024/1000, 2) }

// SetQuota limits the group to quota of CPU time per period: a pod's CPU
// limit of m millicores is m/1000 of the period.
func (g *Group) SetQuota(quota, period time.Duration) error {
	if err := g.write("cpu.cfs_period_us", period.Microseconds()); err != nil {
		return err
	}
	return g.write("cpu.cfs_quota_us", quota.Microseconds())
}

// Add moves process pid, all its threads, into the group.
func (g *Group) Add(pid int) error { return g.write("cgroup.procs", int64(pid)) }

// Throttling is what the group's cpu.stat says of its quota.
func (g *Group) Throttling() (metrics.CPUThrottling, error) {
	return (&selfhealth.CgroupCPU{Stat: filepath.Join(g.Dir, "cpu.stat")}).Read()
}

// Remove removes the group, which its processes must have left (exited):
// a process that exits leaves its cgroup a moment later, so it tries for a
// few seconds.
func (g *Group) Remove() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(g.Dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			procs, _ := os.ReadFile(filepath.Join(g.Dir, "cgroup.procs"))
			return fmt.Errorf("removing cgroup %s (processes in it: %s): %w", g.Dir, strings.Fields(string(procs)), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Busy is n processes that spin in a group, each as busy as a CPU lets it.
type Busy struct{ cmds []*exec.Cmd }

// StartBusy starts n busy processes in g.
func StartBusy(g *Group, n int) (*Busy, error) {
	b := &Busy{}
	for range n {
		cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			b.Stop()
			return nil, err
		}
		b.cmds = append(b.cmds, cmd)
		if err := g.Add(cmd.Process.Pid); err != nil {
			b.Stop()
			return nil, err
		}
	}
	return b, nil
}

// Stop kills the busy processes and waits for them to exit.
func (b *Busy) Stop() {
	for _, cmd := range b.cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	b.cmds = nil
}

// Leave moves process pid, all its threads, back to the root cgroup, so
// that the group it was in can be removed while it runs on.
func Leave(pid int) error {
	return os.WriteFile(filepath.Join(Root, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644)
}
