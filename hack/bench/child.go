package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// buildHelper builds the bench's helper program hack/bench/<name> (the bare
// client, the churn), with the build tags given, into dir. It builds with
// the flags hack/build.sh gives the exporter, so that neither the exporter
// nor the bare client is heavier for how it was built.
func buildHelper(dir, name string, tags ...string) (string, error) {
	bin := filepath.Join(dir, strings.Join(append([]string{name}, tags...), "-"))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-tags", strings.Join(tags, ","), "-o", bin, "./hack/bench/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building hack/bench/%s: %w", name, err)
	}
	return bin, nil
}

// child is a helper process of the bench (the bare client, the churn): it
// says "ready" on stdout when it works, answers SIGUSR1 with a line of
// counts, and cleans up after itself on SIGINT.
type child struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer // read only once it has exited
	lines  chan string
	exited chan struct{}
}

// bareClient is a running bare reference client.
type bareClient = child

func startChild(ctx context.Context, name, bin string, args ...string) (*child, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	// client-go logs every watch it cuts on SIGINT: shown only on failure.
	b := &child{name: name, cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
	cmd.Stderr = &b.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if b.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
		close(b.lines)
		_ = cmd.Wait()
		close(b.exited)
	}()
	select {
	case line, ok := <-b.lines:
		if line == "ready" {
			return b, nil
		}
		b.stop()
		if !ok {
			return nil, fmt.Errorf("%s exited before it was ready: %s", name, b.stderr.String())
		}
		return nil, fmt.Errorf("%s said %q instead of ready: %s", name, line, b.stderr.String())
	case <-time.After(2 * time.Minute):
		b.stop()
		return nil, fmt.Errorf("%s was not ready within 2m: %s", name, b.stderr.String())
	}
}

func (b *child) pid() int { return b.cmd.Process.Pid }

// ask asks the child for its line of counts.
func (b *child) ask() string {
	if err := b.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return ""
	}
	select {
	case line := <-b.lines:
		return line
	case <-time.After(10 * time.Second):
		return ""
	}
}

// start tells a bare client started with -wait-for-start to begin its
// probes' cycles: each at a whole number of intervals from its time in
// phases, or all at once without phases.
func (b *bareClient) start(phases []time.Time) error {
	line := "start"
	for _, t := range phases {
		line += " " + strconv.FormatInt(t.UnixNano(), 10)
	}
	_, err := io.WriteString(b.stdin, line+"\n")
	return err
}

// bareCounts are the bare client's counts: writes sent and events received
// on its informers and raw watches.
type bareCounts struct{ writes, informer, watch float64 }

// counts asks the bare client for its counts.
func (b *bareClient) counts() bareCounts {
	var c bareCounts
	_, _ = fmt.Sscanf(b.ask(), "writes=%g informer_events=%g watch_events=%g", &c.writes, &c.informer, &c.watch)
	return c
}

func (b *child) stop() {
	_ = b.stdin.Close() // a bare client still waiting for its start line gives up
	_ = b.cmd.Process.Signal(os.Interrupt)
	for range b.lines { // the final counts
	}
	<-b.exited
	if !b.cmd.ProcessState.Success() {
		fmt.Fprintf(os.Stderr, "bench: %s failed (%s): %s\n", b.name, b.cmd.ProcessState, b.stderr.String())
	}
}
