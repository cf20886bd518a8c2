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

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// buildBare builds the bare reference client (hack/bench/bare) into dir,
// with the flags hack/build.sh gives the exporter, so that neither binary
// is heavier for how it was built. With tags, it builds that variant.
func buildBare(dir string, tags ...string) (string, error) {
	return buildHelper(dir, "bare", tags...)
}

// buildHelper builds the bench's helper program hack/bench/<name>, with the
// build tags given, into dir.
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

// startBare runs the bare client on the same load as the exporter, in its
// own namespace, and waits until its informers and watches have synced.
func startBare(ctx context.Context, bin string, config *rest.Config, dir, ns string, probes int, interval time.Duration, updates int, extra ...string) (*bareClient, error) {
	kubeconfig := filepath.Join(dir, "bare-kubeconfig")
	if err := localcluster.WriteKubeconfig(config, kubeconfig); err != nil {
		return nil, err
	}
	return startChild(ctx, "the bare client", bin, append([]string{"-kubeconfig", kubeconfig, "-namespace", ns,
		"-probes", fmt.Sprint(probes), "-interval", interval.String(), "-updates", fmt.Sprint(updates)}, extra...)...)
}

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

// counts asks the bare client for its counts: writes sent and events
// received on its informers and raw watches.
func (b *bareClient) counts() (writes, informer, watch float64) {
	_, _ = fmt.Sscanf(b.ask(), "writes=%g informer_events=%g watch_events=%g", &writes, &informer, &watch)
	return writes, informer, watch
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
