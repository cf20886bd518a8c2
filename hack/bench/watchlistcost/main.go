// Command watchlistcost measures what the WatchList sync checks
// (pkg/probe/watchlist) cost kube-apiserver on the local control plane,
// with 10,000 pods in another namespace: per request form, the seats API
// Priority and Fairness estimates for it, the apiserver's CPU and the time
// to the end bookmark, sent as a ServiceAccount (whose requests priority
// and fairness estimates, as it does the exporter's); then a checker's
// requests per second and the apiserver's CPU over idle, at several
// intervals. `make bench-watchlist` runs it; it prints Markdown for
// docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/watchlist"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "where kube-apiserver and etcd are")
	objects := flag.Int("objects", 10000, "pods in the load namespace")
	requests := flag.Int("requests", 200, "requests of each form")
	window := flag.Duration("window", 30*time.Second, "each checker measurement's length")
	flag.Parse()
	if err := run(*binDir, *objects, *requests, *window); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const (
	probeNS = "wl"
	loadNS  = "load"
)

// apiserverMetrics is what the bench reads of kube-apiserver's /metrics:
// its CPU, the pods it counted, and the seats priority and fairness
// estimated for the requests of the ServiceAccounts' priority level.
type apiserverMetrics struct {
	cpu, pods        float64
	seatsSum, seatsN float64
}

func scrape(ctx context.Context, admin *kubernetes.Clientset) (apiserverMetrics, error) {
	raw, err := admin.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return apiserverMetrics{}, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return apiserverMetrics{}, err
	}
	var m apiserverMetrics
	for _, s := range families["process_cpu_seconds_total"].GetMetric() {
		m.cpu += s.GetCounter().GetValue()
	}
	for _, s := range families["apiserver_resource_objects"].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "resource" && l.GetValue() == "pods" {
				m.pods += s.GetGauge().GetValue()
			}
		}
	}
	for _, s := range families["apiserver_flowcontrol_work_estimated_seats"].GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "priority_level" && l.GetValue() == "workload-low" {
				m.seatsSum += s.GetHistogram().GetSampleSum()
				m.seatsN += float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return m, nil
}

// form is one way of asking, sent as the ServiceAccount.
type form struct {
	name, path string
}

func run(binDir string, objects, requests int, window time.Duration) error {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir})
	if err != nil {
		return err
	}
	defer c.Stop()
	admin := kubernetes.NewForConfigOrDie(c.AdminConfig())
	if err := localcluster.CreateNamespaces(ctx, admin, probeNS, loadNS); err != nil {
		return err
	}
	sa, err := serviceAccount(ctx, c, admin)
	if err != nil {
		return err
	}
	loader := rest.CopyConfig(c.AdminConfig())
	loader.QPS, loader.Burst = 500, 1000
	if err := localcluster.CreatePods(ctx, kubernetes.NewForConfigOrDie(loader), loadNS, objects); err != nil {
		return err
	}
	// Priority and fairness prices a list by the resource's object count
	// as the apiserver last counted it (every minute by default): until
	// then it does not know the pods, and gives every request one seat.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		m, err := scrape(ctx, admin)
		if err != nil {
			return err
		}
		if m.pods >= float64(objects) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("apiserver_resource_objects{resource=\"pods\"} is %v, not %d, after 3 minutes", m.pods, objects)
		}
	}

	hc, err := rest.HTTPClientFor(sa)
	if err != nil {
		return err
	}
	const watchList = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=10"
	const noSuchName = "&fieldSelector=metadata.name%3Dwatchprobe-watchlist-check-watches-nothing"
	forms := []form{
		{"WatchList, a name no object has (the check's)", "/api/v1/namespaces/" + probeNS + "/pods?" + watchList + noSuchName},
		{"WatchList of the namespace (an informer's)", "/api/v1/namespaces/" + probeNS + "/pods?" + watchList},
		{"consistent LIST of the namespace (freshness's)", "/api/v1/namespaces/" + probeNS + "/pods"},
	}
	fmt.Printf("| request, pods in an empty namespace, %d pods elsewhere | APF seats (mean) | apiserver CPU per request | p50 | p99 |\n|---|---|---|---|---|\n", objects)
	for _, f := range forms {
		before, err := scrape(ctx, admin)
		if err != nil {
			return err
		}
		var took []time.Duration
		for range requests {
			d, err := timed(ctx, hc, sa.Host+f.path)
			if err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			took = append(took, d)
		}
		after, err := scrape(ctx, admin)
		if err != nil {
			return err
		}
		slices.Sort(took)
		n := after.seatsN - before.seatsN
		fmt.Printf("| %s | %.2f (%d requests estimated) | %.2f ms | %s | %s |\n", f.name, (after.seatsSum-before.seatsSum)/n, int(n),
			1000*(after.cpu-before.cpu)/float64(requests), took[len(took)/2].Round(10*time.Microsecond), took[len(took)*99/100].Round(10*time.Microsecond))
	}

	fmt.Printf("\n| checker, through the load balancer | apiserver CPU (cores) | over idle | requests/s |\n|---|---|---|---|\n")
	measure := func(every time.Duration, resources []string) (float64, float64, error) {
		var chk *watchlist.Checker
		var syncs int
		if every > 0 {
			w := config.DefaultWatchListConfig()
			w.Resources, w.Every = resources, model.Duration(every)
			w.Bound = model.Duration(min(5*time.Second, every*9/10))
			chk, err = watchlist.New(watchlist.Options{Probe: "bench", Namespace: probeNS, Config: w, LoadBalanced: sa,
				Metrics: metrics.NewProbe(prometheus.NewRegistry()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now,
				Observe: func(watchlist.Event) { syncs++ }})
			if err != nil {
				return 0, 0, err
			}
			chk.Round(ctx) // discovery, outside the window
			syncs = 0
		}
		before, err := scrape(ctx, admin)
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		wctx, cancel := context.WithTimeout(ctx, window)
		defer cancel()
		if chk != nil {
			chk.Run(wctx)
		} else {
			<-wctx.Done()
		}
		el := time.Since(start).Seconds()
		after, err := scrape(ctx, admin)
		if err != nil {
			return 0, 0, err
		}
		return (after.cpu - before.cpu) / el, float64(syncs) / el, nil
	}
	idle, _, err := measure(0, nil)
	if err != nil {
		return err
	}
	fmt.Printf("| idle, %d pods in another namespace | %.4f | | 0 |\n", objects, idle)
	four := config.DefaultWatchListConfig().Resources
	for _, tc := range []struct {
		every     time.Duration
		resources []string
	}{
		{time.Second, []string{"pods"}},
		{100 * time.Millisecond, []string{"pods"}},
		{time.Second, four},
		{30 * time.Second, four},
	} {
		cores, rps, err := measure(tc.every, tc.resources)
		if err != nil {
			return err
		}
		fmt.Printf("| every %s, %s | %.4f | %+.4f | %.2f |\n", tc.every, strings.Join(tc.resources, ", "), cores, cores-idle, rps)
	}
	return nil
}

// serviceAccount is a config of a ServiceAccount that may watch and list
// the probe namespace's resources, as the exporter's does: priority and
// fairness estimates its requests (an admin's are exempt).
func serviceAccount(ctx context.Context, c *localcluster.Cluster, admin *kubernetes.Clientset) (*rest.Config, error) {
	sa, err := c.ServiceAccountConfig(ctx, probeNS, "bench")
	if err != nil {
		return nil, err
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "bench"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"", "discovery.k8s.io", "coordination.k8s.io"}, Resources: []string{"pods", "configmaps", "endpointslices", "leases"}, Verbs: []string{"list", "watch"}},
	}}
	if _, err := admin.RbacV1().Roles(probeNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bench"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "bench", Namespace: probeNS}}}
	if _, err := admin.RbacV1().RoleBindings(probeNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	// RBAC is read from a cache: wait until the grant is in force.
	client := kubernetes.NewForConfigOrDie(sa)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := client.CoreV1().Pods(probeNS).List(ctx, metav1.ListOptions{}); err == nil {
			return sa, nil
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("the ServiceAccount's Role not in force: %w", err)
		}
	}
}

// timed is one GET of url, to the end of its initial events for a
// WatchList (the end bookmark is its first line in an empty namespace),
// to the end of its body otherwise.
func timed(ctx context.Context, hc *http.Client, url string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	if !strings.Contains(url, "watch=true") {
		_, err = io.Copy(io.Discard, resp.Body)
		return time.Since(start), err
	}
	line := make([]byte, 0, 512)
	buf := make([]byte, 512)
	for !strings.Contains(string(line), "k8s.io/initial-events-end") {
		n, err := resp.Body.Read(buf)
		line = append(line, buf[:n]...)
		if err != nil {
			return 0, fmt.Errorf("no end bookmark: %w", err)
		}
	}
	return time.Since(start), nil
}
