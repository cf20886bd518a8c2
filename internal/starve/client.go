package starve

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// clientEnv, set to "kubeconfig namespace interval", makes a process that
// calls ClientMain the independent client.
const clientEnv = "WATCHPROBE_STARVE_CLIENT"

// Sample is one of the independent client's writes: the watch event it
// causes and the time from just before it was sent to the event's arrival
// on the client's watch.
type Sample struct {
	Event   string
	Latency time.Duration
}

// ClientMain runs the independent client and exits if this process was
// started as one (StartClient); else it returns at once. A program that
// starts clients calls it first thing in main (or TestMain).
func ClientMain() {
	spec := os.Getenv(clientEnv)
	if spec == "" {
		return
	}
	f := strings.Fields(spec)
	interval, err := time.ParseDuration(f[2])
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		err = runClient(ctx, f[0], f[1], interval, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "independent client:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runClient writes a ConfigMap in ns every interval, creates, updates
// and deletes it, and times each write's event on a watch of its own,
// printing "event seconds" per write to out, until ctx ends. It is the
// least a client does to time a write's event: one raw watch, no
// informer, no judgement.
func runClient(ctx context.Context, kubeconfig, ns string, interval time.Duration, out io.Writer) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(ns)
	const label = "watchprobe-starve-client"
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: label})
	if err != nil {
		return err
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: label, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	// sent holds each write's send instant by "event name", until its
	// event arrives: stamped before the request, so before any event.
	var mu sync.Mutex
	sent := map[string]time.Time{}
	arrived := func(key string, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := sent[key]; ok {
			fmt.Fprintf(out, "%s %.9f\n", strings.Fields(key)[0], at.Sub(s).Seconds())
			delete(sent, key)
		}
	}
	go func() {
		for ev := range w.ResultChan() {
			at := time.Now()
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			var event string
			switch ev.Type {
			case watch.Added:
				event = "added"
			case watch.Modified:
				event = "modified"
			case watch.Deleted:
				event = "deleted"
			default:
				continue
			}
			arrived(event+" "+cm.Name, at)
		}
	}()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		name := "starve-client-" + strconv.Itoa(n)
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}}}
		writes := []struct {
			event string
			do    func() error
		}{
			{"added", func() error {
				var err error
				obj, err = cms.Create(ctx, obj, metav1.CreateOptions{})
				return err
			}},
			{"modified", func() error {
				obj.Data = map[string]string{"n": strconv.Itoa(n)}
				var err error
				obj, err = cms.Update(ctx, obj, metav1.UpdateOptions{})
				return err
			}},
			{"deleted", func() error { return cms.Delete(ctx, name, metav1.DeleteOptions{}) }},
		}
		for _, wr := range writes {
			mu.Lock()
			sent[wr.event+" "+name] = time.Now()
			mu.Unlock()
			if err := wr.do(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%s %s: %w", wr.event, name, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Client is a running independent client.
type Client struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	got  []Sample
	done chan struct{}
	// stderr holds what it said, for a failure.
	stderr strings.Builder
}

// StartClient starts the independent client as program exe (which calls
// ClientMain), in g, writing in namespace ns every interval through
// kubeconfig.
func StartClient(exe string, g *Group, kubeconfig, ns string, interval time.Duration) (*Client, error) {
	c := &Client{done: make(chan struct{})}
	c.cmd = exec.Command(exe)
	c.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s", clientEnv, kubeconfig, ns, interval))
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	if err := g.Add(c.cmd.Process.Pid); err != nil {
		c.Stop()
		return nil, err
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 2 {
				continue
			}
			s, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				continue
			}
			c.mu.Lock()
			c.got = append(c.got, Sample{Event: f[0], Latency: time.Duration(s * float64(time.Second))})
			c.mu.Unlock()
		}
		_ = c.cmd.Wait()
	}()
	return c, nil
}

// Samples are the client's samples so far.
func (c *Client) Samples() []Sample {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Sample(nil), c.got...)
}

// Exited is closed once the client has exited.
func (c *Client) Exited() <-chan struct{} { return c.done }

// Stderr is what the client wrote to stderr, once it has exited.
func (c *Client) Stderr() string { return c.stderr.String() }

// Stop stops the client and waits for it to exit.
func (c *Client) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}
