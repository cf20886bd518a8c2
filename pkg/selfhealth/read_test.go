package selfhealth

import (
	"testing"
	"time"
)

// The readers the monitor uses at every tick parse the kernel's formats.
func TestTickReaders(t *testing.T) {
	if run, wait, slices, ok := schedstat([]byte("1639372 2088532 37\n")); !ok || run != 1639372 || wait != 2088532 || slices != 37 {
		t.Errorf("schedstat parsed as %d %d %d %v", run, wait, slices, ok)
	}
	if _, _, _, ok := schedstat([]byte("12 x\n")); ok {
		t.Error("a malformed schedstat parsed")
	}
	for _, c := range []struct {
		stat string
		v2   bool
		want time.Duration
	}{
		{"testdata/v1/sys/fs/cgroup/cpu,cpuacct/cpu.stat", false, 9123456789 * time.Nanosecond},
		{"testdata/v2/sys/fs/cgroup/cpu.stat", true, 4512307 * time.Microsecond},
	} {
		r, err := (&CgroupCPU{Stat: c.stat, V2: c.v2}).throttledReader()
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // read again from the start
			if got, err := r.read(); err != nil || got != c.want {
				t.Errorf("%s: throttled %v, %v; want %v", c.stat, got, err, c.want)
			}
		}
		r.close()
	}
	rq := newRunQueue("/proc/self/task")
	if err := rq.refresh(); err != nil {
		t.Fatal(err)
	}
	defer rq.close()
	if _, slices, err := rq.wait(); err != nil || slices == 0 {
		t.Errorf("this process's threads: %d slices, %v", slices, err)
	}
}
