// Command watchprobe-agent is watchprobe's node agent: run on every node (a
// DaemonSet), it writes a marker of its own and times its arrival on a
// watch from that node's own network path to the apiserver, and exports a
// handful of series naming the node. It is a binary of its own, in the
// exporter's image, so that what every node pays is the agent's code
// alone: the exporter's discovery, freshness, etcd and tracing are not
// loaded on thousands of nodes.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	webflag "github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/watchprobe/watchprobe/pkg/agent"
	"github.com/watchprobe/watchprobe/pkg/selfhealth"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	app := kingpin.New("watchprobe-agent", "watchprobe's node agent: times the watch of a marker of its own from this node's network path to the apiserver.")
	app.Version(version.Print("watchprobe-agent"))
	app.HelpFlag.Short('h')
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	var (
		o          agent.Options
		kubeconfig string
		starved    time.Duration
		log        = &promslog.Config{}
	)
	app.Flag("node", "This node's name: the agent's Lease is named after it. The chart sets NODE_NAME from spec.nodeName.").Envar("NODE_NAME").StringVar(&o.Node)
	app.Flag("namespace", "The agents' namespace: one Lease per node in it, and nothing else.").Default("watchprobe-agents").StringVar(&o.Namespace)
	app.Flag("zone", "The node's zone; empty: read from the Node's topology.kubernetes.io/zone label (get on nodes), if --read-node.").StringVar(&o.Zone)
	app.Flag("read-node", "Read the agent's Node once at start: its topology.kubernetes.io/zone label when --zone is empty, and its UID to make the Node the owner of the agent's Lease, which the garbage collector then deletes with the Node. --no-read-node: neither, and the agent needs no get on nodes.").Default("true").BoolVar(&o.ReadNode)
	app.Flag("write-budget", "Marker writes per second all agents together may make: each agent writes every (agents / budget) seconds, and at least --min-interval apart.").Default("50").Float64Var(&o.WriteBudget)
	app.Flag("min-interval", "The shortest interval between two writes of an agent.").Default("10s").DurationVar(&o.MinInterval)
	app.Flag("deadline", "A write whose event has not arrived on the agent's watch this long after it was sent is missed (and late if it arrives after).").Default("5s").DurationVar(&o.Deadline)
	app.Flag("stall-after", "The watch is stalled when its live stream has delivered nothing this long while writes were answered.").Default("30s").DurationVar(&o.StallAfter)
	app.Flag("lost-after", "A write whose event has not arrived this long after its answer is lost; 0: 2 x the deadline, at least 1m.").Default("0s").DurationVar(&o.LostAfter)
	app.Flag("watch-timeout", "The watch requests' timeout, between it and twice it, as a client-go reflector's.").Default("5m").DurationVar(&o.WatchTimeout)
	app.Flag("agent.starved-threshold", "The agent counts itself starved of CPU while its self-monitor wakes later than this (or its threads wait for a CPU more than a fiftieth of this per time slice): writes whose verdict that could have moved are unmeasurable, not missed or lost. At least 5ms.").Default("50ms").DurationVar(&starved)
	app.Flag("kubeconfig", "Kubeconfig file; empty means in-cluster config.").StringVar(&kubeconfig)
	webFlags := webflag.AddFlags(app, ":9918")
	promslogflag.AddFlags(app, log)
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintf(stderr, "watchprobe-agent: %v\n", err)
		return 2
	}
	log.Writer = stderr
	logger := promslog.New(log)
	klog.SetSlogLogger(logger)

	cfg, err := restConfig(kubeconfig)
	if err != nil {
		logger.Error("loading the apiserver configuration", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	mon, err := selfhealth.New(starved, nil, nil)
	if err != nil {
		logger.Error("--agent.starved-threshold", "err", err)
		return 2
	}
	go mon.Run(ctx)
	reg := prometheus.NewRegistry()
	o.Config, o.Registry, o.Logger, o.Monitor = cfg, reg, logger, mon
	a, err := agent.New(o)
	if err != nil {
		logger.Error("invalid settings", "err", err)
		return 2
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	// Healthy is the process serving, for a liveness probe: an agent whose
	// node cannot reach the apiserver must stay up to say so, not be
	// restarted. Ready is its watch live once.
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Synced() {
			http.Error(w, "the agent's watch has not been live yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Ready")
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, a.Status().Encode())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		s := a.Status()
		fmt.Fprintf(w, "watchprobe-agent on node %s (zone %q), writing every %s\n\n%s\n", o.Node, a.Zone(), a.Interval(), s.Encode())
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ListenAndServe(server, webFlags, logger) }()

	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	code := 0
	select {
	case <-ctx.Done():
		err = <-runErr
	case err = <-serveErr:
		logger.Error("serving HTTP failed", "err", err)
		stop()
		<-runErr
		code = 1
	case err = <-runErr:
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("the agent stopped", "err", err)
		code = 1
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdownCtx)
	return code
}

// restConfig is the in-cluster configuration, or kubeconfig's.
func restConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "watchprobe-agent/" + version.Version
	// Client-side throttling would delay writes inside the measured span;
	// the agent writes once an interval.
	cfg.QPS = -1
	return cfg, nil
}
