package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// buildBare builds the bare reference client (hack/bench/bare) into dir,
// with the flags hack/build.sh gives the exporter, so that neither binary
// is heavier for how it was built.
func buildBare(dir string) (string, error) {
	bin := filepath.Join(dir, "bare")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./hack/bench/bare")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building the bare client: %w", err)
	}
	return bin, nil
}

// bareClient is a running bare reference client.
type bareClient struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer // read only once it has exited
	lines  chan string
	exited chan struct{}
}

// startBare runs the bare client on the same load as the exporter, in its
// own namespace, and waits until its informers and watches have synced.
func startBare(ctx context.Context, bin string, config *rest.Config, dir, ns string, probes int, interval time.Duration, updates int) (*bareClient, error) {
	kubeconfig := filepath.Join(dir, "bare-kubeconfig")
	if err := localcluster.WriteKubeconfig(config, kubeconfig); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-kubeconfig", kubeconfig, "-namespace", ns,
		"-probes", fmt.Sprint(probes), "-interval", interval.String(), "-updates", fmt.Sprint(updates))
	// client-go logs every watch it cuts on SIGINT: shown only on failure.
	b := &bareClient{cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
	cmd.Stderr = &b.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
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
			return nil, fmt.Errorf("the bare client exited before it was ready: %s", b.stderr.String())
		}
		return nil, fmt.Errorf("the bare client said %q instead of ready: %s", line, b.stderr.String())
	case <-time.After(2 * time.Minute):
		b.stop()
		return nil, fmt.Errorf("the bare client was not ready within 2m: %s", b.stderr.String())
	}
}

func (b *bareClient) pid() int { return b.cmd.Process.Pid }

// counts asks the bare client for its counts: writes sent and events
// received on its informers and raw watches.
func (b *bareClient) counts() (writes, informer, watch float64) {
	if err := b.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return 0, 0, 0
	}
	select {
	case line := <-b.lines:
		_, _ = fmt.Sscanf(line, "writes=%g informer_events=%g watch_events=%g", &writes, &informer, &watch)
	case <-time.After(10 * time.Second):
	}
	return writes, informer, watch
}

func (b *bareClient) stop() {
	_ = b.cmd.Process.Signal(os.Interrupt)
	for range b.lines { // the final counts
	}
	<-b.exited
	if !b.cmd.ProcessState.Success() {
		fmt.Fprintf(os.Stderr, "bench: the bare client failed (%s): %s\n", b.cmd.ProcessState, b.stderr.String())
	}
}
