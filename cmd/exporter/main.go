// Command watchprobe writes marker objects through the Kubernetes apiserver
// and exports how List-Watch delivers them as Prometheus metrics.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
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

	"go.opentelemetry.io/otel/trace"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/tracing"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// probeFlags build a single probe when no --config.file is given.
type probeFlags struct {
	set  map[string]*bool
	cfg  probe.Config
	path string
	etcd string
}

func addProbeFlags(app *kingpin.Application) *probeFlags {
	pf := &probeFlags{set: map[string]*bool{}, cfg: probe.DefaultConfig()}
	def := probe.DefaultConfig()
	flag := func(name, help, value string) *kingpin.FlagClause {
		set := new(bool)
		pf.set["--probe."+name] = set
		return app.Flag("probe."+name, help+" Ignored with --config.file.").Default(value).IsSetByUser(set)
	}
	flag("name", "Name of the probe, used in labels and marker names.", def.Name).StringVar(&pf.cfg.Name)
	flag("kind", "Kind of marker object: ConfigMap or Lease.", def.Kind).StringVar(&pf.cfg.Kind)
	flag("namespace", "Namespace the markers are written to and watched in.", def.Namespace).StringVar(&pf.cfg.Namespace)
	flag("interval", "Time between the starts of two marker cycles.", def.Interval.String()).SetValue(&pf.cfg.Interval)
	flag("updates", "Updates per marker cycle, between create and delete.", fmt.Sprint(def.Updates)).IntVar(&pf.cfg.Updates)
	flag("deadline", "Time after which a write not seen on a path counts as missed there.", def.Deadline.String()).SetValue(&pf.cfg.Deadline)
	flag("paths", "Comma-separated watch paths to measure: informer, watch, etcd (needs --probe.etcd.endpoints).", strings.Join(def.Paths, ",")).StringVar(&pf.path)
	flag("watch-timeout", "Each watch asks the apiserver to end it after between this and twice this.", def.WatchTimeout.String()).SetValue(&pf.cfg.WatchTimeout)
	flag("stall-after", "A path with nothing arriving for this long while writes succeed counts as stalled.", def.StallAfter.String()).SetValue(&pf.cfg.StallAfter)
	flag("etcd.endpoints", "Comma-separated etcd client URLs for the etcd path: the etcd the apiserver uses.", "").StringVar(&pf.etcd)
	flag("etcd.cert-file", "Client certificate for etcd.", "").StringVar(&pf.cfg.Etcd.CertFile)
	flag("etcd.key-file", "Client key for etcd.", "").StringVar(&pf.cfg.Etcd.KeyFile)
	flag("etcd.ca-file", "CA that signed etcd's serving certificate.", "").StringVar(&pf.cfg.Etcd.CAFile)
	flag("etcd.prefix", "kube-apiserver's --etcd-prefix.", def.Etcd.Prefix).StringVar(&pf.cfg.Etcd.Prefix)
	flag("etcd.dial-timeout", "Timeout for connecting to etcd.", def.Etcd.DialTimeout.String()).SetValue(&pf.cfg.Etcd.DialTimeout)
	return pf
}

func run(args []string) int {
	app := kingpin.New("watchprobe", "Measures Kubernetes List-Watch health end to end with marker objects.")
	var (
		configFile   = app.Flag("config.file", "YAML file of probes; replaces the --probe.* flags.").String()
		configCheck  = app.Flag("config.check", "Validate the configuration and exit.").Bool()
		kubeconfig   = app.Flag("kubeconfig", "Kubeconfig file; empty means in-cluster config, else the usual kubeconfig loading rules.").String()
		replica      = app.Flag("probe.replica", "Identity of this exporter among replicas; defaults to $POD_NAME, else the host name.").Default(defaultReplica()).String()
		orphanAge    = app.Flag("marker.orphan-age", "Age after which another replica's marker is deleted as left behind.").Default("1h").Duration()
		metricsPath  = app.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").String()
		noSelfMetric = app.Flag("web.disable-exporter-metrics", "Leave out metrics about the exporter itself (promhttp_*, process_*, go_*, watchprobe_tracing_*).").Bool()
		tracingMode  = app.Flag("tracing", "OpenTelemetry tracing of marker writes: auto (on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set), on or off. Configured by the standard OTEL_* variables.").Default(tracing.ModeAuto).Enum(tracing.ModeAuto, tracing.ModeOn, tracing.ModeOff)
		webConfig    = webflag.AddFlags(app, ":9917")
		logConfig    = &promslog.Config{}
	)
	pf := addProbeFlags(app)
	promslogflag.AddFlags(app, logConfig)
	app.Version(version.Print("watchprobe"))
	app.HelpFlag.Short('h')
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintf(os.Stderr, "watchprobe: %v\n", err)
		return 2
	}
	logger := promslog.New(logConfig)
	// client-go logs through klog; one logger keeps one format and level.
	klog.SetSlogLogger(logger)

	probes, err := probeConfigs(*configFile, pf)
	if err != nil {
		logger.Error("invalid configuration", "err", err)
		return 1
	}
	if *configCheck {
		fmt.Printf("configuration is valid: %d probe(s)\n", len(probes))
		return 0
	}
	logger.Info("starting watchprobe", "version", version.Info(), "build_context", version.BuildContext())

	restConfig, err := loadRESTConfig(*kubeconfig)
	if err != nil {
		logger.Error("no Kubernetes configuration", "err", err)
		return 1
	}
	selfRegistry := prometheus.NewRegistry()
	exporterMetrics := metrics.RegisterExporter(selfRegistry)
	var tracer trace.Tracer
	if tracing.Enabled(*tracingMode, os.Getenv) {
		tp, err := tracing.NewProvider(context.Background(), version.Version, exporterMetrics.TracingSpansDropped)
		if err != nil {
			logger.Error("setting up tracing", "err", err)
			return 1
		}
		defer func() {
			// Flush what is queued, but never hang shutdown on a dead collector.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(ctx)
		}()
		tracer = tp.Tracer("github.com/watchprobe/watchprobe")
		restConfig.Wrap(tracing.Transport(tp))
		logger.Info("tracing marker writes over OTLP")
	}

	probeRegistry := prometheus.NewRegistry()
	probeMetrics := metrics.NewProbe(probeRegistry)
	var running []*probe.Probe
	for _, cfg := range probes {
		p, err := probe.New(cfg, probe.Options{
			Config: restConfig, Metrics: probeMetrics, Logger: logger, Tracer: tracer,
			Replica: *replica, OrphanAge: *orphanAge,
		})
		if err != nil {
			logger.Error("invalid probe", "err", err)
			return 1
		}
		running = append(running, p)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var wg sync.WaitGroup
	for _, p := range running {
		wg.Go(func() { p.Run(ctx) })
	}

	gatherers := prometheus.Gatherers{probeRegistry}
	if !*noSelfMetric {
		gatherers = append(gatherers, selfRegistry)
	}
	server := &http.Server{Handler: newMux(*metricsPath, gatherers, selfRegistry, running, logger)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ListenAndServe(server, webConfig, logger) }()

	code := 0
	select {
	case <-ctx.Done():
		logger.Info("shutting down: deleting this replica's markers")
	case err := <-serveErr:
		logger.Error("serving HTTP failed", "err", err)
		stop()
		code = 1
	}
	wg.Wait()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdownCtx)
	return code
}

// probeConfigs returns the probes from the config file, or the one probe the
// flags describe.
func probeConfigs(file string, pf *probeFlags) ([]probe.Config, error) {
	if file != "" {
		var clash []string
		for name, set := range pf.set {
			if *set {
				clash = append(clash, name)
			}
		}
		if len(clash) > 0 {
			slices.Sort(clash)
			return nil, fmt.Errorf("%s cannot be combined with --config.file: set the same fields in the file", strings.Join(clash, ", "))
		}
		return loadConfig(file)
	}
	cfg := pf.cfg
	cfg.Paths = strings.Split(pf.path, ",")
	if pf.etcd != "" {
		cfg.Etcd.Endpoints = strings.Split(pf.etcd, ",")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("--probe.* flags: %w", err)
	}
	return []probe.Config{cfg}, nil
}

// newMux serves gatherers (the probe results, and unless disabled the
// exporter's own metrics, with promhttp's instrumentation on self).
func newMux(metricsPath string, gatherers prometheus.Gatherers, self prometheus.Registerer, probes []*probe.Probe, logger interface{ Error(string, ...any) }) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(metricsPath, promhttp.InstrumentMetricHandler(self, promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{
		// OpenMetrics carries the exemplars that link latency to traces.
		EnableOpenMetrics: true,
		ErrorHandling:     promhttp.ContinueOnError,
	})))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		for _, p := range probes {
			if err := p.Ready(); err != nil {
				http.Error(w, "Not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "Ready")
	})
	if metricsPath != "/" {
		landing, err := web.NewLandingPage(web.LandingConfig{
			Name:        "watchprobe",
			Description: "Kubernetes List-Watch health, measured end to end with marker objects",
			Version:     version.Info(),
			Links: []web.LandingLinks{
				{Address: metricsPath, Text: "Metrics"},
				{Address: "/-/healthy", Text: "Health"},
				{Address: "/-/ready", Text: "Readiness"},
			},
		})
		if err != nil {
			logger.Error("building the landing page", "err", err)
		} else {
			mux.Handle("/", landing)
		}
	}
	return mux
}

// loadRESTConfig follows kubectl's order: an explicit file, the in-cluster
// ServiceAccount, then $KUBECONFIG and ~/.kube/config.
func loadRESTConfig(kubeconfig string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	default:
		cfg, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		}
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "watchprobe/" + version.Version
	// Client-side throttling would delay writes inside the measured span and
	// be reported as apiserver latency. The load is bounded by the config:
	// probes x (updates + 2) writes per interval.
	cfg.QPS = -1
	return cfg, nil
}

func defaultReplica() string {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name
	}
	host, err := os.Hostname()
	if err != nil {
		return "watchprobe"
	}
	return strings.ToLower(host)
}
