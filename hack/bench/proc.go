package main

import "github.com/watchprobe/watchprobe/internal/procstat"

// readProc reads a process's CPU time and memory from /proc, zero for what
// it cannot read.
func readProc(pid int) procstat.Sample {
	s, _ := procstat.Read(pid)
	return s
}
