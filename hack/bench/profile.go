package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// cpuProfile, when set, makes the 100-probe load also save a CPU profile
// of the exporter over its measurement window.
var cpuProfile bool

// memoryReport prints where the exporter's memory is, from its own Go
// runtime metrics, then saves its heap profile (after a GC, so that it
// shows what is live) as prefix-heap.pb.gz and, with top, prints its
// largest entries.
func memoryReport(url, prefix string, top bool) error {
	fmt.Printf("   %s: exporter heap in use %s (next GC at %s), stacks %s for %.0f goroutines; %s obtained from the OS by the Go runtime\n",
		filepath.Base(prefix), mib(sumMetric(url, "go_memstats_heap_inuse_bytes")), mib(sumMetric(url, "go_memstats_next_gc_bytes")),
		mib(sumMetric(url, "go_memstats_stack_inuse_bytes")), sumMetric(url, "go_goroutines"), mib(sumMetric(url, "go_memstats_sys_bytes")))
	path := prefix + "-heap.pb.gz"
	if err := fetchProfile(url+"/debug/pprof/heap?gc=1", path); err != nil || !top {
		return err
	}
	return printTop(path, "inuse_space", "heap in use")
}

// startCPUProfile profiles the exporter's CPU for d into prefix-cpu.pb.gz;
// the returned function waits for the profile and prints its top entries.
func startCPUProfile(url, prefix string, d time.Duration) func() {
	path := prefix + "-cpu.pb.gz"
	done := make(chan error, 1)
	go func() {
		done <- fetchProfile(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", url, int(d.Seconds())), path)
	}()
	return func() {
		err := <-done
		if err == nil {
			err = printTop(path, "cpu", "CPU")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: no CPU profile:", err)
		}
	}
}

func fetchProfile(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// printTop prints the largest entries of a profile, by cumulative and by
// flat value, as `go tool pprof -top` shows them.
func printTop(path, index, what string) error {
	for _, order := range []string{"-cum", "-flat"} {
		out, err := exec.Command("go", "tool", "pprof", "-top", order, "-sample_index="+index, "-nodecount=20", path).Output()
		if err != nil {
			return fmt.Errorf("go tool pprof %s: %w", path, err)
		}
		fmt.Printf("   %s profile %s (%s):\n", what, path, strings.TrimPrefix(order, "-"))
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.HasPrefix(line, "File:") || strings.HasPrefix(line, "Build ID:") || strings.HasPrefix(line, "Type:") || strings.HasPrefix(line, "Time:") {
				continue
			}
			fmt.Println("     " + line)
		}
	}
	return nil
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// rssSplit reads a process's resident memory by kind: anonymous (its heap,
// stacks and runtime), and file-backed (mostly its binary's pages, which
// the kernel may drop and read again under memory pressure).
func rssSplit(pid int) (anon, file int64) {
	status := procStatus(pid)
	return status["RssAnon:"], status["RssFile:"]
}
