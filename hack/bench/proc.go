package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procSample is what /proc says of a process at one instant.
type procSample struct {
	cpu float64 // seconds, user + system
	// rss is resident memory now and peak its highest so far; anon and file
	// split rss by kind: anonymous (heap, stacks, runtime) and file-backed
	// (mostly the binary's pages, which the kernel may drop and read again
	// under memory pressure).
	rss, peak, anon, file int64
}

// readProc reads a process's CPU time and memory from /proc, zero for what
// it cannot read.
func readProc(pid int) procSample {
	var s procSample
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
		f := strings.Fields(string(stat)[i+2:])
		utime, _ := strconv.ParseFloat(f[11], 64)
		stime, _ := strconv.ParseFloat(f[12], 64)
		s.cpu = (utime + stime) / 100 // USER_HZ is 100 on Linux
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			s.rss = kb * 1024
		case "VmHWM:":
			s.peak = kb * 1024
		case "RssAnon:":
			s.anon = kb * 1024
		case "RssFile:":
			s.file = kb * 1024
		}
	}
	return s
}
