// Command bare is the reference `make bench` weighs the exporter's cost
// against: the least client-go program that makes the exporter's marker
// writes at the same rate and holds the same watches, one shared informer
// and one raw watch per probe, and does nothing else with what arrives. Its
// CPU and memory are what any client of that load pays; the exporter's
// excess over them is what measuring costs.
//
// It prints "ready" once every informer has synced and every watch has
// listed, a line of counts on SIGUSR1, and deletes its markers on SIGINT.
// With -wait-for-start it then writes only once told when on stdin (see
// startTimes), so that its writes can keep the exporter's schedule.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The exporter's label keys and seq annotation, so that requests and
// objects are the same size; the managed-by value keeps the exporter's
// cleaner away from these markers.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "watchprobe-bench-bare"
	labelProbe     = "watchprobe.io/probe"
	labelReplica   = "watchprobe.io/replica"
	annotationSeq  = "watchprobe.io/seq"
)

// options are the bare client's flags.
type options struct {
	kubeconfig   string
	namespace    string
	probes       int
	interval     time.Duration
	updates      int
	watchTimeout time.Duration
	waitForStart bool
	seriesAddr   string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file")
	flag.StringVar(&o.namespace, "namespace", "bench-bare", "probe i writes and watches in namespace <namespace>-p<i>, which must exist")
	flag.IntVar(&o.probes, "probes", 1, "number of probes: each has its writer, informer and raw watch")
	flag.DurationVar(&o.interval, "interval", 10*time.Second, "time between the starts of two marker cycles")
	flag.IntVar(&o.updates, "updates", 1, "updates per cycle, between create and delete")
	flag.DurationVar(&o.watchTimeout, "watch-timeout", 5*time.Minute, "each raw watch asks to be ended after between this and twice this")
	flag.BoolVar(&o.waitForStart, "wait-for-start", false, "once ready, wait for a line on stdin saying when each probe's cycles start (see startTimes)")
	flag.StringVar(&o.seriesAddr, "series.listen-address", "", "serve the exporter's series on this address, at /metrics (built with the series tag only)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

// client is the bare client's state: what it counts, and the exporter's
// series if it keeps them.
type client struct {
	o    options
	kube kubernetes.Interface
	// Counts of what was written and what arrived, so that the bench can
	// check the reference did the work it is compared on.
	writes, informerEvents, watchEvents atomic.Int64
	// lastArrival keeps the arrival stamps from being optimised away:
	// taking the time is the one thing a measuring client must do per
	// event.
	lastArrival atomic.Int64
	// series keeps the exporter's series, in a build with the series tag
	// (series.go); nil in the bare client proper, which links none of the
	// exporter's code.
	series seriesKeeper
}

type seriesKeeper interface {
	sent(probe int, name string, seq uint64) time.Time
	wrote(probe int, ev watch.EventType, took time.Duration, err error)
	arrived(probe int, path string, ev watch.EventType, obj any, at time.Time)
}

func run(o options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // as the exporter: no client-side throttling
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	c := &client{o: o, kube: kube}
	if c.series, err = newSeriesKeeper(o.probes, o.seriesAddr); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	// Registered before "ready", so that no SIGUSR1 finds the default
	// action, which ends the process.
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go c.answerCounts(usr1)

	var watching sync.WaitGroup
	defer watching.Wait()
	if !c.watch(ctx, &watching) {
		return nil // interrupted before it was ready
	}
	fmt.Println("ready")
	starts, err := c.starts()
	if err != nil {
		cancel()
		return err
	}
	var writing sync.WaitGroup
	runID := strconv.FormatInt(time.Now().Unix(), 36)
	for i := range o.probes {
		writing.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(starts[i])):
			}
			c.writer(ctx, i, runID)
		})
	}
	<-ctx.Done()
	writing.Wait()
	watching.Wait()
	err = c.cleanUp()
	fmt.Println(c.countsLine())
	return err
}

// answerCounts prints a line of counts on each signal from usr1.
func (c *client) answerCounts(usr1 <-chan os.Signal) {
	for range usr1 {
		fmt.Println(c.countsLine())
	}
}

func (c *client) countsLine() string {
	return fmt.Sprintf("writes=%d informer_events=%d watch_events=%d", c.writes.Load(), c.informerEvents.Load(), c.watchEvents.Load())
}

// watch starts every probe's informer and raw watch, in watching, and
// waits until all have synced; false if ctx ended first.
func (c *client) watch(ctx context.Context, watching *sync.WaitGroup) bool {
	var synced []cache.InformerSynced
	listed := make([]atomic.Bool, c.o.probes)
	for i := range c.o.probes {
		inf := c.newInformer(i)
		synced = append(synced, inf.HasSynced)
		watching.Go(func() { inf.RunWithContext(ctx) })
		watching.Go(func() { c.rawWatch(ctx, i, &listed[i]) })
	}
	for {
		all := true
		for i := range synced {
			all = all && synced[i]() && listed[i].Load()
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// starts is when each probe begins writing: now, or with -wait-for-start
// as the start line on stdin says. The bench closes stdin before it
// interrupts, so that a client still waiting gives up.
func (c *client) starts() ([]time.Time, error) {
	line := "start"
	if c.o.waitForStart {
		var err error
		if line, err = bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return nil, fmt.Errorf("reading the start line: %w", err)
		}
	}
	return startTimes(line, c.o.probes, c.o.interval, time.Now())
}

// startTimes is when each probe begins by the start line, read at now:
// "start" and, optionally, one Unix time in nanoseconds per probe. Probe i's
// cycles then begin at the first instant from now that is a whole number
// of intervals from its time. The bench gives, for each probe, a time at
// which the exporter's probe of that number began a cycle, so that both
// clients write on the same schedule: how many probes' writes fall
// together decides the CPU either pays (a wakeup serves every event
// pending), and the exporter's probes begin each as its own paths have
// synced. Without times, every probe begins at once.
func startTimes(line string, probes int, interval time.Duration, now time.Time) ([]time.Time, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 || fields[0] != "start" {
		return nil, fmt.Errorf("start line %q does not begin with start", line)
	}
	starts := make([]time.Time, probes)
	for i := range starts {
		starts[i] = now
	}
	if len(fields) == 1 {
		return starts, nil
	}
	if len(fields)-1 != probes {
		return nil, fmt.Errorf("start line has %d times, want one per probe (%d)", len(fields)-1, probes)
	}
	for i, f := range fields[1:] {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("start time %d: %w", i, err)
		}
		phase := time.Unix(0, ns)
		starts[i] = phase.Add((now.Sub(phase)/interval + 1) * interval)
	}
	return starts, nil
}

// cleanUp deletes the markers left behind.
func (c *client) cleanUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for i := range c.o.probes {
		err = errors.Join(err, c.configMaps(i).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy}))
	}
	return err
}

func probeName(i int) string { return "p" + strconv.Itoa(i) }
