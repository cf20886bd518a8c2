package selfhealth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// The exporter finds its own cgroup's cpu.stat from /proc/<pid>/cgroup and
// mountinfo, and reads its throttling, in each layout a pod meets: cgroup
// v1 with the container's cgroup mounted as the hierarchy's root; cgroup
// v2 in a cgroup namespace and seen from the host; and this machine's
// hybrid of a v1 cpu hierarchy beside a unified one without the cpu
// controller. The files are in the kernel's own format (cgroup v2 cannot
// be given the cpu controller on this machine, whose cpu controller is
// v1's, so its layouts are tested on files only).
func TestCgroupCPU(t *testing.T) {
	for _, c := range []struct {
		name string
		root string
		pid  int
		stat string
		v2   bool
		want metrics.CPUThrottling
	}{
		{"v1 container", "testdata/v1", 1, "sys/fs/cgroup/cpu,cpuacct/cpu.stat", false,
			metrics.CPUThrottling{Periods: 5184, ThrottledPeriods: 140, Throttled: 9123456789 * time.Nanosecond}},
		{"v2 in a cgroup namespace", "testdata/v2", 1, "sys/fs/cgroup/cpu.stat", true,
			metrics.CPUThrottling{Periods: 812, ThrottledPeriods: 97, Throttled: 4512307 * time.Microsecond}},
		{"v2 from the host", "testdata/v2", 2, "sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5f0c1e8a.slice/cri-containerd-3b9f.scope/cpu.stat", true,
			metrics.CPUThrottling{Periods: 10, ThrottledPeriods: 1, Throttled: 2500 * time.Microsecond}},
		{"v1 cpu beside an empty unified hierarchy", "testdata/hybrid", 1, "sys/fs/cgroup/cpu/kubepods/burstable/pod5f0c1e8a/3b9f/cpu.stat", false,
			metrics.CPUThrottling{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs, err := procfs.NewFS(filepath.Join(c.root, "proc"))
			if err != nil {
				t.Fatal(err)
			}
			cg, err := FindCgroupCPU(fs, c.pid, c.root)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(c.root, c.stat); cg.Stat != want || cg.V2 != c.v2 {
				t.Fatalf("found %s (v2 %v), want %s (v2 %v)", cg.Stat, cg.V2, want, c.v2)
			}
			got, err := cg.Read()
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("read %+v, want %+v", got, c.want)
			}
		})
	}
}

// A unified hierarchy without the cpu controller has a cpu.stat without
// throttling: that is no cgroup CPU controller, said so, not zeros.
func TestNoCgroupCPUController(t *testing.T) {
	root := t.TempDir()
	for file, content := range map[string]string{
		"proc/1/cgroup":                        "0::/\n",
		"proc/1/mountinfo":                     "41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n",
		"sys/fs/cgroup/cgroup.controllers":     "memory pids\n",
		"sys/fs/cgroup/cpu.stat":               "usage_usec 10\nuser_usec 6\nsystem_usec 4\n",
		"sys/fs/cgroup/cgroup.subtree_control": "",
	} {
		path := filepath.Join(root, file)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fs, err := procfs.NewFS(filepath.Join(root, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	if cg, err := FindCgroupCPU(fs, 1, root); err == nil || !strings.Contains(err.Error(), "no cgroup with the cpu controller") {
		t.Errorf("found %+v, %v; want the error that no cgroup has the cpu controller", cg, err)
	}
	if _, err := parseCPUStat([]byte("usage_usec 10\n"), true); err == nil || !strings.Contains(err.Error(), "nr_periods") {
		t.Errorf("a cpu.stat without throttling read as %v, want an error naming nr_periods", err)
	}
}
