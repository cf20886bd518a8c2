package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// process is one child (etcd or kube-apiserver) whose output goes to a log
// file that survives restarts, so a failure can be explained by its tail.
type process struct {
	name    string
	path    string
	args    []string
	logPath string
	// cloneflags are namespaces (CLONE_NEW*) the child gets of its own.
	cloneflags uintptr
	// env is added to this process's environment for the child.
	env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// spawner starts children from one OS thread that stays alive for the life of
// the process. Pdeathsig fires when the *thread* that forked the child exits,
// so forking from an arbitrary goroutine's thread could kill a healthy child
// at random; forking from a pinned thread makes the children die exactly when
// this process dies, even if it is killed without running any cleanup.
var spawner = sync.OnceValue(func() chan func() {
	jobs := make(chan func())
	go func() {
		runtime.LockOSThread()
		for job := range jobs {
			job()
		}
	}()
	return jobs
})

func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.name)
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logFile, "==== %s starting at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if p.env != nil {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: p.cloneflags}
	errc := make(chan error, 1)
	spawner() <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// exited reports whether the child has ended on its own.
func (p *process) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// errKilled says a child outlived its grace period and was killed.
var errKilled = errors.New("killed after the grace period")

// stop sends sig and waits; a child that ignores it for the grace period is
// killed, so stop never leaves a process behind.
func (p *process) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
		return fmt.Errorf("%s ignored %s for %s: %w", p.name, sig, grace, errKilled)
	case <-time.After(10 * time.Second):
		return errors.New(p.name + " survived SIGKILL")
	}
}

// signal sends sig to the running child, as stop does but without waiting:
// SIGSTOP and SIGCONT freeze and thaw it.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.name)
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// pid is the child's process id, 0 when it is not running.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// logTail returns the last n lines of the child's log.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log for %s: %v)", p.name, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
