package selfhealth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// CgroupCPU reads the CPU throttling of one cgroup: its cpu.stat.
type CgroupCPU struct {
	// Stat is the cgroup's cpu.stat.
	Stat string
	// V2: the unified hierarchy, whose cpu.stat counts throttled time in
	// microseconds (throttled_usec) rather than nanoseconds
	// (throttled_time).
	V2 bool
}

// FindCgroupCPU finds the cgroup whose CPU limit applies to process pid, as
// fs (a proc file system) shows it, under root (the file system the mount
// points are in: "/" but in tests): the cpu controller's cgroup v1
// hierarchy if one is mounted, else the unified (v2) hierarchy if the cpu
// controller is enabled there. Each is found from /proc/<pid>/cgroup and
// mountinfo, so that a container that sees only its own part of the
// hierarchy (a cgroup namespace, or a bind mount of its cgroup) reads its
// own cgroup.
func FindCgroupCPU(fs procfs.FS, pid int, root string) (*CgroupCPU, error) {
	proc, err := fs.Proc(pid)
	if err != nil {
		return nil, err
	}
	groups, err := proc.Cgroups()
	if err != nil {
		return nil, err
	}
	mounts, err := fs.GetProcMounts(pid)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if !slices.Contains(g.Controllers, "cpu") {
			continue
		}
		for _, m := range mounts {
			if m.FSType == "cgroup" && hasOption(m.SuperOptions, "cpu") {
				return &CgroupCPU{Stat: filepath.Join(root, m.MountPoint, within(g.Path, m.Root), "cpu.stat")}, nil
			}
		}
	}
	for _, g := range groups {
		if g.HierarchyID != 0 {
			continue
		}
		for _, m := range mounts {
			if m.FSType != "cgroup2" {
				continue
			}
			dir := filepath.Join(root, m.MountPoint, within(g.Path, m.Root))
			// cpu.stat is there with or without the cpu controller; its
			// throttling counts only with it.
			if controllers, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers")); err == nil && slices.Contains(strings.Fields(string(controllers)), "cpu") {
				return &CgroupCPU{Stat: filepath.Join(dir, "cpu.stat"), V2: true}, nil
			}
		}
	}
	return nil, errors.New("no cgroup with the cpu controller: neither a cgroup v1 cpu hierarchy nor the cpu controller of cgroup v2 is mounted where /proc/self/mountinfo shows")
}

// hasOption reports whether a mount's super options name the option: a
// cgroup v1 hierarchy names its controllers there (rw,cpu,cpuacct).
func hasOption(options map[string]string, name string) bool {
	_, ok := options[name]
	return ok
}

// within is path, a cgroup as /proc/<pid>/cgroup names it, relative to the
// mount's root in the hierarchy: a container's mount of its own cgroup has
// that cgroup as its root.
func within(path, mountRoot string) string {
	if rel, ok := strings.CutPrefix(path, mountRoot); ok && (rel == "" || rel[0] == '/' || mountRoot == "/") {
		return rel
	}
	return path
}

// Read reads the cgroup's throttling now.
func (c *CgroupCPU) Read() (metrics.CPUThrottling, error) {
	data, err := os.ReadFile(c.Stat)
	if err != nil {
		return metrics.CPUThrottling{}, err
	}
	return parseCPUStat(data, c.V2)
}

// parseCPUStat reads the throttling of a cpu.stat, cgroup v1's or v2's.
func parseCPUStat(data []byte, v2 bool) (metrics.CPUThrottling, error) {
	fields := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			return metrics.CPUThrottling{}, fmt.Errorf("cpu.stat %s: %w", key, err)
		}
		fields[key] = n
	}
	throttled, unit := "throttled_time", time.Nanosecond
	if v2 {
		throttled, unit = "throttled_usec", time.Microsecond
	}
	for _, k := range []string{"nr_periods", "nr_throttled", throttled} {
		if _, ok := fields[k]; !ok {
			return metrics.CPUThrottling{}, fmt.Errorf("cpu.stat has no %s", k)
		}
	}
	return metrics.CPUThrottling{
		Periods: fields["nr_periods"], ThrottledPeriods: fields["nr_throttled"],
		Throttled: time.Duration(fields[throttled]) * unit,
	}, nil
}

// throttledReader reads a cgroup's throttled time at every tick of the
// monitor: its cpu.stat stays open, is read again from its start and
// parsed without allocating.
type throttledReader struct {
	f    *os.File
	key  []byte
	unit time.Duration
	buf  []byte
}

func (c *CgroupCPU) throttledReader() (*throttledReader, error) {
	f, err := os.Open(c.Stat)
	if err != nil {
		return nil, err
	}
	r := &throttledReader{f: f, key: []byte("\nthrottled_time "), unit: time.Nanosecond, buf: make([]byte, 1024)}
	if c.V2 {
		r.key, r.unit = []byte("\nthrottled_usec "), time.Microsecond
	}
	return r, nil
}

// read is the time the cgroup has been throttled, and in how many
// enforcement periods.
func (r *throttledReader) read() (time.Duration, int64, error) {
	n, err := r.f.ReadAt(r.buf, 0)
	if n == 0 {
		return 0, 0, err
	}
	t, err := r.field(r.buf[:n], r.key)
	if err != nil {
		return 0, 0, err
	}
	periods, err := r.field(r.buf[:n], nrThrottled)
	if err != nil {
		return 0, 0, err
	}
	return time.Duration(t) * r.unit, periods, nil
}

var nrThrottled = []byte("\nnr_throttled ")

// field is the value of the cpu.stat line that key (a newline, the name
// and a space) begins.
func (r *throttledReader) field(b, key []byte) (int64, error) {
	i := bytes.Index(b, key)
	if i < 0 {
		return 0, fmt.Errorf("%s has no%s", r.f.Name(), bytes.TrimRight(key, " "))
	}
	var v int64
	for _, c := range b[i+len(key):] {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int64(c-'0')
	}
	return v, nil
}

func (r *throttledReader) close() { r.f.Close() }
