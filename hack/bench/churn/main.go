// Command churn is the background load of `make bench`'s load phase: other
// tenants' writes on the same apiserver, ConfigMaps created, updated and
// deleted in a namespace of their own at a steady rate, from a process of
// their own so that their CPU competes with the exporter's as a busy
// cluster's does and never runs inside the process being measured.
//
// It prints "ready" once it writes, a line of counts on SIGUSR1, and deletes
// what it left on SIGINT.
package main

import (
	"context"
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

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
)

const labelChurn = "watchprobe.io/bench-churn"

var writes, failures atomic.Int64

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file")
	namespace := flag.String("namespace", "churn", "namespace to write in (must exist)")
	perSecond := flag.Float64("rate", 600, "writes per second, creates, updates and deletes together")
	workers := flag.Int("workers", 16, "concurrent writers: enough that the rate holds when a write takes tens of milliseconds")
	size := flag.Int("size", 1024, "bytes of data in each ConfigMap, so that the apiserver and etcd encode, store and fan out objects of a realistic size")
	flag.Parse()
	if err := run(*kubeconfig, *namespace, *perSecond, *workers, *size); err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string, perSecond float64, workers, size int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // the limiter below sets the rate
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cms := client.CoreV1().ConfigMaps(namespace)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			fmt.Printf("writes=%d failures=%d\n", writes.Load(), failures.Load())
		}
	}()
	limiter := rate.NewLimiter(rate.Limit(perSecond), workers)
	data := map[string]string{"payload": strings.Repeat("x", size)}
	fmt.Println("ready")
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { worker(ctx, cms, limiter, w, data) })
	}
	<-ctx.Done()
	wg.Wait()
	cleanup, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	err = cms.DeleteCollection(cleanup, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: labelChurn})
	fmt.Printf("writes=%d failures=%d\n", writes.Load(), failures.Load())
	return err
}

// worker cycles its objects through create, update, delete, one write per
// token, so that the three kinds of write come in equal numbers.
func worker(ctx context.Context, cms typedcorev1.ConfigMapInterface, limiter *rate.Limiter, w int, data map[string]string) {
	for n := 0; ; n++ {
		name := "churn-" + strconv.Itoa(w) + "-" + strconv.Itoa(n)
		if limiter.Wait(ctx) != nil {
			return
		}
		cm, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelChurn: "true"}},
			Data:       data,
		}, metav1.CreateOptions{})
		if !count(ctx, err) {
			continue
		}
		if limiter.Wait(ctx) != nil {
			return
		}
		cm.Annotations = map[string]string{"watchprobe.io/bench-churn-n": strconv.Itoa(n)}
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		count(ctx, err)
		if limiter.Wait(ctx) != nil {
			return
		}
		count(ctx, cms.Delete(ctx, name, metav1.DeleteOptions{}))
	}
}

// count counts a write and says whether it succeeded; writes cut short by
// the end of the run are not failures.
func count(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	writes.Add(1)
	if err != nil {
		failures.Add(1)
		return false
	}
	return true
}
