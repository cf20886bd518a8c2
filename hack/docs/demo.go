package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// demoCapture is the output of the last `make demo` run by `make
// demo-output`; README.md shows it trimmed (demoSample), and a test keeps
// the two equal, so the README's sample is a run's, not a hand's.
const demoCapture = "hack/docs/testdata/demo.txt"

// summaryLine is a line of the demo's live summary: a time, then the paths.
var summaryLine = regexp.MustCompile(`^\d\d:\d\d:\d\d `)

// runDemo runs `make demo` in root until it has printed lines summary
// lines (one every 5 s), then interrupts it as Ctrl-C would, and returns
// what the demo printed from its first line on (make's own lines and the
// builds before it are left out).
func runDemo(root string, lines int, log io.Writer) (string, error) {
	cmd := exec.Command("make", "--no-print-directory", "demo")
	cmd.Dir = root
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	interrupt := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	// A demo that never gets going is stopped: the first build of the
	// control plane takes minutes, a live demo a line every 5 s.
	stuck := time.AfterFunc(30*time.Minute, interrupt)
	defer stuck.Stop()

	var out []string
	started, summaries := false, 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		l := sc.Text()
		fmt.Fprintln(log, l)
		if strings.HasPrefix(l, ">> starting etcd") {
			started = true
		}
		if !started {
			continue
		}
		out = append(out, l)
		if summaryLine.MatchString(l) {
			if summaries++; summaries == lines {
				interrupt()
			}
		}
	}
	if err := cmd.Wait(); err != nil && summaries < lines {
		return "", fmt.Errorf("make demo: %w", err)
	}
	if summaries < lines {
		return "", fmt.Errorf("make demo printed %d summary lines, want %d", summaries, lines)
	}
	return strings.Join(out, "\n") + "\n", nil
}

// demoSample is what README.md shows of a captured demo: its opening
// lines, its first, middle and last summary lines, and how it stopped. In
// the summary lines, the watch and informer paths keep their latencies and
// drop their counters, which the etcd path's show the form of.
func demoSample(capture string) string {
	var head, summaries, tail []string
	for _, l := range strings.Split(strings.TrimRight(capture, "\n"), "\n") {
		switch {
		case summaryLine.MatchString(l):
			summaries = append(summaries, shortSummary(l))
		case len(summaries) == 0:
			head = append(head, l)
		default:
			tail = append(tail, l)
		}
	}
	if n := len(summaries); n > 3 {
		summaries = []string{summaries[0], "[...]", summaries[n/2], "[...]", summaries[n-1]}
	}
	all := append(append(head, summaries...), tail...)
	return "```console\n" + strings.Join(all, "\n") + "\n```\n"
}

var pathCounters = regexp.MustCompile(`^(\w+ +p50 +\S+ p99 +\S+) observed .*$`)

func shortSummary(l string) string {
	parts := strings.Split(l, " | ")
	for i := 1; i < len(parts); i++ {
		parts[i] = pathCounters.ReplaceAllString(parts[i], "$1 …")
	}
	return strings.Join(parts, " | ")
}

// refreshDemo runs the demo and writes its capture and the README's sample.
func refreshDemo(root string, lines int) error {
	capture, err := runDemo(root, lines, os.Stderr)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(demoCapture), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(demoCapture, []byte(capture), 0o644); err != nil {
		return err
	}
	return rewrite("README.md", "demo", "make demo-output", demoSample(capture))
}
