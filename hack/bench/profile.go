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

	"github.com/watchprobe/watchprobe/internal/exportertest"
)

// memoryReport prints where the exporter's memory is, from its own Go
// runtime metrics, then saves its heap profile (after a GC, so that it
// shows what is live) as prefix-heap.pb.gz and, with top, prints its
// largest entries.
func memoryReport(url, prefix string, top bool) error {
	families, err := exportertest.Scrape(url)
	if err != nil {
		return err
	}
	v := func(name string) float64 {
		sum, _ := exportertest.Sum(families, name, nil)
		return sum
	}
	fmt.Printf("   %s: exporter heap in use %s (next GC at %s), stacks %s for %.0f goroutines; %s obtained from the OS by the Go runtime\n",
		filepath.Base(prefix), mib(v("go_memstats_heap_inuse_bytes")), mib(v("go_memstats_next_gc_bytes")),
		mib(v("go_memstats_stack_inuse_bytes")), v("go_goroutines"), mib(v("go_memstats_sys_bytes")))
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
