package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/exportertest"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// costLoad is a load the exporter and the bare client carry alike.
type costLoad struct {
	probes   int
	interval time.Duration // each probe writes updates+2 markers per interval
	updates  int
}

// writesPerSecond is the rate the load's settings make.
func (l costLoad) writesPerSecond() float64 {
	return float64(l.probes*(l.updates+2)) / l.interval.Seconds()
}

// costLoads are the cost runs' loads, the last the largest.
var costLoads = []costLoad{
	{1, 3 * time.Second, 1}, {1, 300 * time.Millisecond, 1}, {1, 100 * time.Millisecond, 3},
	{10, 3 * time.Second, 1}, largestLoad,
}

// largestLoad is 100 probes x 3 writes every 2.857 s, 105 writes/s: the
// load the series memory and the soak run too.
var largestLoad = costLoad{100, 2857 * time.Millisecond, 1}

// rig is what the runs of the exporter binary and the bare client share:
// the control plane, an admin client of it, the certificate their counting
// proxies serve, and a directory for their kubeconfigs and configs.
type rig struct {
	cluster   *localcluster.Cluster
	client    kubernetes.Interface
	cert, key []byte
	dir       string
}

func newRig(cluster *localcluster.Cluster) (*rig, error) {
	cert, key, err := cluster.IssueServing()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "watchprobe-bench-")
	if err != nil {
		return nil, err
	}
	return &rig{cluster: cluster, client: kubernetes.NewForConfigOrDie(cluster.AdminConfig()), cert: cert, key: key, dir: dir}, nil
}

func (r *rig) close() { os.RemoveAll(r.dir) }

// probeNamespace is the namespace of probe i (named p<i>) of a client in ns.
// Each probe has its own: kube-apiserver's watch cache offers every event
// of a namespace to every watch in it, whatever its label selector, so
// with 100 probes in one namespace each write would go to 200 watches
// rather than 2, and kube-apiserver ends some of them as unresponsive
// (apiserver_terminated_watchers_total), at random: relists that make the
// clients' CPU differ from run to run by more than what is compared.
func probeNamespace(ns string, i int) string {
	return fmt.Sprintf("%s-p%d", ns, i)
}

// createProbeNamespaces creates the namespaces of the probes of a client in
// ns.
func createProbeNamespaces(ctx context.Context, client kubernetes.Interface, ns string, probes int) error {
	names := make([]string, probes)
	for i := range names {
		names[i] = probeNamespace(ns, i)
	}
	return localcluster.CreateNamespaces(ctx, client, names...)
}

// place makes the namespaces of one client of a run in ns and the counting
// proxy it talks to the apiserver through.
func (r *rig) place(ctx context.Context, ns string, probes int) (*countingProxy, error) {
	if err := createProbeNamespaces(ctx, r.client, ns, probes); err != nil {
		return nil, err
	}
	return newCountingProxy(r.cluster.APIServerURL, r.cluster.CAPEM(), r.cert, r.key)
}

// startBare runs the bare client bin on load as config's user, its probes
// in namespaces under ns, which must exist, and waits until its informers
// and watches have synced.
func (r *rig) startBare(ctx context.Context, bin string, config *rest.Config, ns string, load costLoad, extra ...string) (*bareClient, error) {
	kubeconfig := filepath.Join(r.dir, ns+"-kubeconfig")
	if err := localcluster.WriteKubeconfig(config, kubeconfig); err != nil {
		return nil, err
	}
	return startChild(ctx, "the bare client", bin, append([]string{"-kubeconfig", kubeconfig, "-namespace", ns,
		"-probes", fmt.Sprint(load.probes), "-interval", load.interval.String(), "-updates", fmt.Sprint(load.updates)}, extra...)...)
}

// startExporter runs the exporter binary bin on load as config's user, its
// probes in namespaces under ns, which must exist, with the retention
// given (if not 0), and waits until every path of its probes is up.
func (r *rig) startExporter(bin string, config *rest.Config, ns string, load costLoad, retention time.Duration) (*exportertest.Process, error) {
	kubeconfig := filepath.Join(r.dir, ns+"-kubeconfig")
	if err := localcluster.WriteKubeconfig(config, kubeconfig); err != nil {
		return nil, err
	}
	var cfg strings.Builder
	cfg.WriteString("probes:\n")
	for i := range load.probes {
		fmt.Fprintf(&cfg, "  - {name: p%d, namespace: %s, interval: %s, updates: %d", i, probeNamespace(ns, i), model.Duration(load.interval), load.updates)
		if retention != 0 {
			fmt.Fprintf(&cfg, ", retention: %s", model.Duration(retention))
		}
		cfg.WriteString("}\n")
	}
	configFile := filepath.Join(r.dir, ns+"-config.yml")
	if err := os.WriteFile(configFile, []byte(cfg.String()), 0o600); err != nil {
		return nil, err
	}
	p, err := exportertest.Start(bin, nil, os.Stderr, "--kubeconfig", kubeconfig, "--config.file", configFile,
		"--probe.replica", "bench", "--log.level", "warn", "--web.enable-pprof")
	if err != nil {
		return nil, err
	}
	if err := p.WaitPathsUp(2 * time.Minute); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}
