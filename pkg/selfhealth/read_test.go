package selfhealth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/watchprobe/watchprobe/pkg/metrics"
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
		stat    string
		v2      bool
		want    time.Duration
		periods int64
	}{
		{"testdata/v1/sys/fs/cgroup/cpu,cpuacct/cpu.stat", false, 9123456789 * time.Nanosecond, 140},
		{"testdata/v2/sys/fs/cgroup/cpu.stat", true, 4512307 * time.Microsecond, 97},
	} {
		r, err := (&CgroupCPU{Stat: c.stat, V2: c.v2}).throttledReader()
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // read again from the start
			if got, periods, err := r.read(); err != nil || got != c.want || periods != c.periods {
				t.Errorf("%s: throttled %v in %d periods, %v; want %v in %d", c.stat, got, periods, err, c.want, c.periods)
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

// A kernel that shows no schedstats, or zeros in them, leaves the run-queue
// wait unread, and says why: the threads that started the process ran.
func TestRunQueueUnavailable(t *testing.T) {
	dir := t.TempDir()
	if rq, why := openRunQueue(dir); rq != nil || why == "" {
		t.Errorf("no thread: reader %v, reason %q; want none and a reason", rq, why)
	}
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1", "schedstat"), []byte("0 0 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if rq, why := openRunQueue(dir); rq != nil || !strings.Contains(why, "no time slice") {
		t.Errorf("schedstat of zeros: reader %v, reason %q; want none and a reason naming the slices", rq, why)
	}
	rq, why := openRunQueue("/proc/self/task")
	if rq == nil {
		t.Fatalf("this process's threads: %s", why)
	}
	rq.close()
	m := metrics.RegisterSelfHealth(prometheus.NewRegistry(), metrics.Options{}, func() (metrics.CPUThrottling, bool) { return metrics.CPUThrottling{}, false })
	mon, err := New(50*time.Millisecond, &CgroupCPU{Stat: "testdata/v1/sys/fs/cgroup/cpu,cpuacct/cpu.stat"}, m)
	if err != nil {
		t.Fatal(err)
	}
	// The run-queue wait sees a throttle: cpu.stat is not read at each
	// tick beside it.
	if mon.throttled != nil {
		t.Error("the monitor reads the cgroup's throttling at each tick although the run-queue wait can be read")
	}
	if got := testutil.ToFloat64(m.CPUWaitAvailable); got != 1 {
		t.Errorf("cpu_wait_available %g on this machine, whose threads show schedstats, want 1", got)
	}
}
