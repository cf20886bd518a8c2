// Command markercost measures what one probe costs the cluster around it,
// the figures a platform team is asked about: the writes it makes (each
// one admission review per matching webhook and one audit event per
// logged stage), the requests of every verb it sends, the etcd revisions
// it adds, and the events a cluster-wide informer of its marker kind
// receives because of it. It runs the exporter with the chart's default
// probe, once with ConfigMap markers and once with Lease markers, on the
// real local control plane, and prints the counts and their extrapolation
// to a day.
//
//	go run ./hack/bench/markercost -bin-dir bin -duration 2m
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "directory with kube-apiserver and etcd")
	duration := flag.Duration("duration", 2*time.Minute, "how long each kind runs")
	flag.Parse()
	os.Setenv("WATCHPROBE_BIN_DIR", *binDir)
	if err := run(*duration); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(d time.Duration) error {
	dir, err := os.MkdirTemp("", "markercost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := exportertest.Build(dir)
	if err != nil {
		return err
	}
	fmt.Printf("the chart's default probe (interval 10s, updates 1), one replica, %s per kind\n", d)
	fmt.Printf("%-9s %8s %8s %8s %8s %10s %10s %8s %8s\n", "kind", "cycles", "creates", "updates", "deletes", "revisions", "informer", "lists", "watches")
	for _, kind := range []string{"ConfigMap", "Lease"} {
		if err := measure(dir, bin, kind, d); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
	}
	return nil
}

// resources are the marker kinds' API resources.
var resources = map[string]schema.GroupVersionResource{
	"ConfigMap": {Version: "v1", Resource: "configmaps"},
	"Lease":     {Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
}

func measure(dir, bin, kind string, d time.Duration) error {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if err := localcluster.CreateNamespaces(ctx, admin, "watchprobe"); err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, kind+".kubeconfig")
	if err := c.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	config := filepath.Join(dir, kind+".yml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("probes:\n  - {name: default, namespace: watchprobe, kind: %s, interval: 10s, updates: 1}\n", kind)), 0o600); err != nil {
		return err
	}

	// A cluster-wide watch of the marker kind, as a cluster-wide informer
	// (an operator's, a policy engine's) has: what the probe adds to it.
	res := resources[kind]
	w, err := dynamic.NewForConfigOrDie(c.AdminConfig()).Resource(res).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	defer w.Stop()
	var informer atomic.Int64
	go func() {
		for ev := range w.ResultChan() {
			// The probe's events only: the control plane's own leases are
			// renewed every 10 s whatever runs.
			if o, ok := ev.Object.(metav1.Object); ok && o.GetNamespace() == "watchprobe" &&
				(ev.Type == watch.Added || ev.Type == watch.Modified || ev.Type == watch.Deleted) {
				informer.Add(1)
			}
		}
	}()

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{c.EtcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer etcd.Close()
	// The control plane's own writes (its leases, for one) bump the
	// revision too: measured first, without the exporter, and subtracted.
	idle0, err := revision(ctx, etcd)
	if err != nil {
		return err
	}
	time.Sleep(d)
	rev0, err := revision(ctx, etcd)
	if err != nil {
		return err
	}
	idle := rev0 - idle0
	before, err := requestCounts(ctx, admin, res.Resource)
	if err != nil {
		return err
	}
	p, err := exportertest.Start(bin, nil, io.Discard, "--kubeconfig", kubeconfig, "--config.file", config, "--probe.replica", "cost")
	if err != nil {
		return err
	}
	time.Sleep(d)
	metrics, err := exportertest.Scrape(p.URL)
	p.Stop()
	if err != nil {
		return err
	}
	rev1, err := revision(ctx, etcd)
	if err != nil {
		return err
	}
	after, err := requestCounts(ctx, admin, res.Resource)
	if err != nil {
		return err
	}
	verbs := map[string]float64{}
	for _, m := range metrics["watchprobe_writes_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" {
				verbs[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	// One create a cycle.
	cycles := verbs["create"]
	fmt.Printf("%-9s %8.0f %8.0f %8.0f %8.0f %10d %10d %8.0f %8.0f  (idle revisions %d, writes by verb %v)\n", kind, cycles, verbs["create"], verbs["update"], verbs["delete"],
		rev1-rev0-idle, informer.Load(), after["LIST"]-before["LIST"], after["WATCH"]-before["WATCH"], idle, verbs)
	if cycles > 0 {
		perDay := 86400 / 10.0 // cycles a day at the default interval
		writes := (verbs["create"] + verbs["update"] + verbs["delete"]) / cycles
		fmt.Printf("%-9s per day: %.0f writes (each an admission review per matching webhook, an audit event per logged stage), %.0f etcd revisions, %.0f events to each cluster-wide informer of %s\n",
			kind, writes*perDay, float64(rev1-rev0-idle)/cycles*perDay, float64(informer.Load())/cycles*perDay, res.Resource)
	}
	return nil
}

// revision is etcd's current revision.
func revision(ctx context.Context, etcd *clientv3.Client) (int64, error) {
	resp, err := etcd.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

var requestLine = regexp.MustCompile(`^apiserver_request_total\{(.*)\} ([0-9.e+]+)$`)

// requestCounts is kube-apiserver's count of requests on resource, by
// verb, from its /metrics.
func requestCounts(ctx context.Context, admin kubernetes.Interface, resource string) (map[string]float64, error) {
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := requestLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.Contains(m[1], `resource="`+resource+`"`) {
			continue
		}
		verb := regexp.MustCompile(`verb="([A-Z]+)"`).FindStringSubmatch(m[1])
		v, err := strconv.ParseFloat(m[2], 64)
		if verb != nil && err == nil {
			out[verb[1]] += v
		}
	}
	return out, sc.Err()
}
