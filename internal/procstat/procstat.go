// Package procstat reads a process's CPU time and memory from /proc, for
// the measurements of hack/bench: procfs's reading, in the units the
// reports use.
package procstat

import "github.com/prometheus/procfs"

// Sample is what /proc says of a process at one instant.
type Sample struct {
	// CPU is its user and system time, in seconds.
	CPU float64
	// RSS is its resident memory now and Peak the highest so far; Anon
	// and File split RSS by kind: anonymous (heap, stacks, runtime) and
	// file-backed (mostly the binary's pages, which the kernel may drop
	// and read again under memory pressure). Bytes.
	RSS, Peak, Anon, File int64
}

// Read reads process pid's sample.
func Read(pid int) (Sample, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return Sample{}, err
	}
	stat, err := p.Stat()
	if err != nil {
		return Sample{}, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return Sample{}, err
	}
	return Sample{
		CPU: stat.CPUTime(),
		RSS: int64(status.VmRSS), Peak: int64(status.VmHWM), Anon: int64(status.RssAnon), File: int64(status.RssFile),
	}, nil
}
