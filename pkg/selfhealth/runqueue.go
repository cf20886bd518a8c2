package selfhealth

import (
	"errors"
	"os"
	"path/filepath"
	"time"
)

// runQueue reads how long all of a process's threads have waited,
// runnable, for a CPU (the kernel's run_delay, the second field of each
// thread's schedstat) and how many time slices they ran (the third).
// Contention by weight makes every goroutine that has work wait; the
// self-monitor's own wake-ups, which need almost no CPU, are served first
// and show little of it. Each thread's file stays open and is
// read again from its start, so that a reading costs a read per thread;
// the threads are listed again when one is gone or on refresh.
type runQueue struct {
	dir   string // /proc/<pid>/task
	files map[string]*os.File
	buf   []byte
}

func newRunQueue(dir string) *runQueue {
	return &runQueue{dir: dir, files: map[string]*os.File{}, buf: make([]byte, 128)}
}

// refresh opens the schedstat of every thread now in dir, and closes
// those of threads that are gone.
func (r *runQueue) refresh() error {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		seen[e.Name()] = true
		if r.files[e.Name()] == nil {
			if f, err := os.Open(filepath.Join(r.dir, e.Name(), "schedstat")); err == nil {
				r.files[e.Name()] = f
			}
		}
	}
	for tid, f := range r.files {
		if !seen[tid] {
			f.Close()
			delete(r.files, tid)
		}
	}
	if len(r.files) == 0 {
		return errors.New("no thread's schedstat could be opened in " + r.dir)
	}
	return nil
}

// wait is the run-queue wait of every thread and the time slices they ran,
// summed; a thread gone since the last refresh leaves its file, and the
// next call lists them again.
func (r *runQueue) wait() (time.Duration, int64, error) {
	var sum, slices int64
	gone := false
	for tid, f := range r.files {
		n, err := f.ReadAt(r.buf, 0)
		_, wait, ran, ok := schedstat(r.buf[:n])
		if !ok {
			if err != nil && n == 0 {
				f.Close()
				delete(r.files, tid)
				gone = true
			}
			continue
		}
		sum, slices = sum+wait, slices+ran
	}
	if gone {
		if err := r.refresh(); err != nil {
			return 0, 0, err
		}
	}
	return time.Duration(sum), slices, nil
}

// schedstat parses a thread's schedstat, "<on CPU ns> <waiting ns>
// <slices>", without allocating: it is read at every tick.
func schedstat(b []byte) (run, wait, slices int64, ok bool) {
	var v [3]int64
	i := 0
	for f := range v {
		for i < len(b) && b[i] == ' ' {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v[f] = v[f]*10 + int64(b[i]-'0')
			i++
		}
		if i == start {
			return 0, 0, 0, false
		}
	}
	return v[0], v[1], v[2], true
}

// close closes every open file.
func (r *runQueue) close() {
	for tid, f := range r.files {
		f.Close()
		delete(r.files, tid)
	}
}
