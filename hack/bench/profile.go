package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/watchprobe/watchprobe/internal/exportertest"
)

// memoryReport prints where the exporter's memory is, from its own Go
// runtime metrics, then saves its heap profile (after a GC, so that it
// shows what is live) as prefix-heap.pb.gz, for `go tool pprof`.
func memoryReport(url, prefix string) error {
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
	return fetchProfile(url+"/debug/pprof/heap?gc=1", prefix+"-heap.pb.gz")
}

// startCPUProfile profiles the exporter's CPU for d into prefix-cpu.pb.gz,
// for `go tool pprof`; the returned function waits for the profile.
func startCPUProfile(url, prefix string, d time.Duration) func() {
	done := make(chan error, 1)
	go func() {
		done <- fetchProfile(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", url, int(d.Seconds())), prefix+"-cpu.pb.gz")
	}()
	return func() {
		if err := <-done; err != nil {
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
