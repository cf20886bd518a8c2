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
// readStart), so that its writes can keep the exporter's schedule.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
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

// counts are what arrived, so that the bench can check the reference did the
// work it is compared on.
var writes, informerEvents, watchEvents atomic.Int64

// series keeps the exporter's series, in a build with the series tag
// (series.go); nil in the bare client proper, which links none of the
// exporter's code.
var series seriesKeeper

var newSeries func(probes int) seriesKeeper

type seriesKeeper interface {
	sent(probe int, name string, seq uint64) time.Time
	wrote(probe int, ev watch.EventType, took time.Duration, err error)
	arrived(probe int, path string, ev watch.EventType, obj any, at time.Time)
}

// lastArrival keeps the arrival stamps from being optimised away: taking
// the time is the one thing a measuring client must do per event.
var lastArrival atomic.Int64

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "bench-bare", "probe i writes and watches in namespace <namespace>-p<i>, which must exist")
	probes := flag.Int("probes", 1, "number of probes: each has its writer, informer and raw watch")
	interval := flag.Duration("interval", 10*time.Second, "time between the starts of two marker cycles")
	updates := flag.Int("updates", 1, "updates per cycle, between create and delete")
	watchTimeout := flag.Duration("watch-timeout", 5*time.Minute, "each raw watch asks to be ended after between this and twice this")
	flag.BoolVar(&waitForStart, "wait-for-start", false, "once ready, wait for a line on stdin saying when each probe's cycles start (see readStart)")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *probes, *interval, *updates, *watchTimeout); err != nil {
		fmt.Fprintln(os.Stderr, "bare:", err)
		os.Exit(1)
	}
}

// waitForStart: the writers wait for readStart.
var waitForStart bool

// readStart reads "start" and, optionally, one Unix time in nanoseconds per
// probe: probe i's cycles then begin at the first instant from now that is a
// whole number of intervals from its time. The bench gives, for each probe,
// a time at which the exporter's probe of that number began a cycle, so
// that both clients write on the same schedule: how many probes' writes
// fall together decides the CPU either pays (a wakeup serves every event
// pending), and the exporter's probes begin each as its own paths have
// synced. Without times, every probe begins at once.
func readStart(probes int, interval time.Duration) ([]time.Time, error) {
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("reading the start line: %w", err)
	}
	return startTimes(line, probes, interval, time.Now())
}

// startTimes is when each probe begins by the start line, read at now.
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

// probeNamespace is the namespace probe i writes and watches in: each
// probe has its own, as the bench gives the exporter's.
func probeNamespace(namespace string, i int) string {
	return namespace + "-" + probeName(i)
}

func run(kubeconfig, namespace string, probes int, interval time.Duration, updates int, watchTimeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // as the exporter: no client-side throttling
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			fmt.Printf("writes=%d informer_events=%d watch_events=%d\n", writes.Load(), informerEvents.Load(), watchEvents.Load())
		}
	}()

	run := strconv.FormatInt(time.Now().Unix(), 36)
	if newSeries != nil {
		series = newSeries(probes)
	}
	var watching sync.WaitGroup
	var synced []cache.InformerSynced
	listed := make([]atomic.Bool, probes)
	for i := range probes {
		selector := labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelProbe: probeName(i), labelReplica: "bare"}).String()
		cms := client.CoreV1().ConfigMaps(probeNamespace(namespace, i))
		inf := newInformer(cms, selector, i)
		synced = append(synced, inf.HasSynced)
		watching.Go(func() { inf.RunWithContext(ctx) })
		watching.Go(func() { rawWatch(ctx, cms, selector, watchTimeout, &listed[i], i) })
	}
	for !allSynced(synced, listed) {
		select {
		case <-ctx.Done():
			watching.Wait()
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	fmt.Println("ready")
	starts := make([]time.Time, probes)
	if waitForStart {
		read := make(chan error, 1)
		go func() {
			var err error
			starts, err = readStart(probes, interval)
			read <- err
		}()
		select {
		case err = <-read:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			cancel()
			watching.Wait()
			return err
		}
	}

	var writing sync.WaitGroup
	for i := range probes {
		writing.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(starts[i])):
			}
			writer(ctx, client.CoreV1().ConfigMaps(probeNamespace(namespace, i)), i, run, interval, updates)
		})
	}
	<-ctx.Done()
	writing.Wait()
	watching.Wait()
	cleanup, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	for i := range probes {
		err = errors.Join(err, client.CoreV1().ConfigMaps(probeNamespace(namespace, i)).DeleteCollection(cleanup, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy}))
	}
	fmt.Printf("writes=%d informer_events=%d watch_events=%d\n", writes.Load(), informerEvents.Load(), watchEvents.Load())
	return err
}

func probeName(i int) string { return "p" + strconv.Itoa(i) }

func allSynced(synced []cache.InformerSynced, listed []atomic.Bool) bool {
	for i := range synced {
		if !synced[i]() || !listed[i].Load() {
			return false
		}
	}
	return true
}

func arrived(n *atomic.Int64) time.Time {
	at := time.Now()
	lastArrival.Store(at.UnixNano())
	n.Add(1)
	return at
}

// newInformer is a shared informer built as the exporter builds its own:
// LIST or WatchList, then WATCH, through the DeltaFIFO, no resync.
func newInformer(cms typedcorev1.ConfigMapInterface, selector string, probe int) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return cms.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return cms.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(obj any, _ bool) { informerArrived(probe, watch.Added, obj) },
		UpdateFunc: func(_, obj any) { informerArrived(probe, watch.Modified, obj) },
		DeleteFunc: func(obj any) { informerArrived(probe, watch.Deleted, obj) },
	})
	return inf
}

func informerArrived(probe int, ev watch.EventType, obj any) {
	at := arrived(&informerEvents)
	if series != nil {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		series.arrived(probe, "informer", ev, obj, at)
	}
}

// rawWatch lists once, then watches, resuming from the newest
// resourceVersion seen after every end, and lists again only when that
// version has expired: the exporter's watch path, without the judging.
func rawWatch(ctx context.Context, cms typedcorev1.ConfigMapInterface, selector string, timeout time.Duration, listed *atomic.Bool, probe int) {
	var rv string
	retry := 100 * time.Millisecond
	for ctx.Err() == nil {
		if rv == "" {
			list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				sleep(ctx, &retry)
				continue
			}
			rv = list.ResourceVersion
			listed.Store(true)
		}
		secs := int64((timeout + rand.N(timeout+1)).Seconds())
		w, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &secs})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			sleep(ctx, &retry)
			continue
		}
		var expired bool
		rv, expired = consume(ctx, w, rv, probe)
		if expired {
			rv = ""
		}
		retry = 100 * time.Millisecond
	}
}

func consume(ctx context.Context, w watch.Interface, rv string, probe int) (string, bool) {
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, false
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, false
		}
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			at := arrived(&watchEvents)
			if series != nil {
				series.arrived(probe, "watch", ev.Type, ev.Object, at)
			}
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			return rv, apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
		}
		if m, err := meta.Accessor(ev.Object); err == nil {
			rv = m.GetResourceVersion()
		}
	}
}

func sleep(ctx context.Context, d *time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(*d):
	}
	*d = min(2**d, 10*time.Second)
}

// seriesSent stamps a write for the exporter's series, if kept.
func seriesSent(probe int, name string, seq uint64) time.Time {
	if series == nil {
		return time.Time{}
	}
	return series.sent(probe, name, seq)
}

func seriesWrote(probe int, ev watch.EventType, sent time.Time, err error) {
	if series != nil {
		series.wrote(probe, ev, time.Since(sent), err)
	}
}

// writer runs one probe's cycles: create, updates, delete, every interval,
// each write carrying the next sequence number as the exporter's do.
func writer(ctx context.Context, cms typedcorev1.ConfigMapInterface, i int, run string, interval time.Duration, updates int) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var seq uint64
	lbls := map[string]string{labelManagedBy: managedBy, labelProbe: probeName(i), labelReplica: "bare"}
	for n := 1; ctx.Err() == nil; n++ {
		seq++
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("bare-%s-%s-%d", probeName(i), run, n),
			Labels:      lbls,
			Annotations: map[string]string{annotationSeq: strconv.FormatUint(seq, 10)},
		}}
		sent := seriesSent(i, cm.Name, seq)
		cm, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		seriesWrote(i, watch.Added, sent, err)
		writes.Add(1)
		if err == nil {
			for range updates {
				seq++
				cm.Annotations[annotationSeq] = strconv.FormatUint(seq, 10)
				sent := seriesSent(i, cm.Name, seq)
				updated, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
				seriesWrote(i, watch.Modified, sent, err)
				writes.Add(1)
				if err != nil {
					break
				}
				cm = updated
			}
			seq++
			sent := seriesSent(i, cm.Name, 0)
			err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{})
			seriesWrote(i, watch.Deleted, sent, err)
			writes.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
}
