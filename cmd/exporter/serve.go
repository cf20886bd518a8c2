package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	webflag "github.com/prometheus/exporter-toolkit/web/kingpinflag"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/klog/v2"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/tracing"
)

// serveFlags are the exporter's own flags.
type serveFlags struct {
	configCheck       bool
	metricsPath       string
	noSelfMetrics     bool
	maxRequests       int
	enableLifecycle   bool
	enablePprof       bool
	tracingMode       string
	classicHistograms bool
	web               *web.FlagConfig
}

func addServeFlags(cmd *kingpin.CmdClause) *serveFlags {
	sf := &serveFlags{}
	cmd.Flag("config.check", "Validate the configuration and exit.").BoolVar(&sf.configCheck)
	cmd.Flag("web.telemetry-path", "Path under which to expose metrics.").Default("/metrics").StringVar(&sf.metricsPath)
	cmd.Flag("web.disable-exporter-metrics", "Leave out metrics about the exporter itself (promhttp_*, process_*, go_*, watchprobe_tracing_*). watchprobe_build_info, watchprobe_config_* and the self-health series (watchprobe_exporter_*), which the alerts read, stay.").BoolVar(&sf.noSelfMetrics)
	cmd.Flag("web.max-requests", "Maximum number of parallel scrape requests. Use 0 to disable.").Default("40").IntVar(&sf.maxRequests)
	cmd.Flag("web.enable-lifecycle", "Enable reloading the configuration file over HTTP (POST /-/reload). SIGHUP reloads it regardless.").BoolVar(&sf.enableLifecycle)
	cmd.Flag("web.enable-pprof", "Serve Go's profiles under /debug/pprof/ on the metrics port. Off by default: they expose the command line and cost CPU when fetched.").BoolVar(&sf.enablePprof)
	cmd.Flag("tracing", "OpenTelemetry tracing of marker writes: auto (on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set), on or off. Configured by the standard OTEL_* variables.").Default(tracing.ModeAuto).EnumVar(&sf.tracingMode, tracing.ModeAuto, tracing.ModeOn, tracing.ModeOff)
	cmd.Flag("metrics.classic-histograms", "Keep the classic buckets (le series) of the histograms. --no-metrics.classic-histograms leaves native buckets only, a fraction of the series; Prometheus must then ingest native histograms (scrape_native_histograms: true in 3.8 and later, --enable-feature=native-histograms from 2.40 to 3.7).").Default("true").BoolVar(&sf.classicHistograms)
	sf.web = webflag.AddFlags(cmd, ":9917")
	return sf
}

// serve runs the exporter until SIGTERM or SIGINT, reloading the config
// file on SIGHUP.
func serve(cf *commonFlags, sf *serveFlags, stdout io.Writer) int {
	// SIGHUP's default action ends the process: a config-reloader that
	// signals while the exporter starts must find the handler in place.
	// One that arrives during start-up reloads once start-up is done.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	selfRegistry := prometheus.NewRegistry()
	exporterMetrics := metrics.RegisterExporter(selfRegistry)
	logs := newLogWriter(cf.log.Writer, exporterMetrics.LogRecordsDropped)
	defer logs.Close()
	cf.log.Writer = logs
	logger := promslog.New(cf.log)
	// client-go logs through klog; one logger keeps one format and level.
	klog.SetSlogLogger(logger)

	probes, err := probeConfigs(cf.configFile, cf.probes)
	if err != nil {
		logger.Error("invalid configuration", "err", err)
		return 1
	}
	if sf.configCheck {
		fmt.Fprintf(stdout, "configuration is valid: %d probe(s)\n", len(probes))
		return 0
	}
	logger.Info("starting watchprobe", "version", version.Info(), "build_context", version.BuildContext())

	restConfig, err := loadRESTConfig(cf.kubeconfig)
	if err != nil {
		logger.Error("no Kubernetes configuration", "err", err)
		return 1
	}
	var tracer trace.Tracer
	if tracing.Enabled(sf.tracingMode, os.Getenv) {
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
	configMetrics := metrics.RegisterInfo(probeRegistry)
	metricsOpts := metrics.Options{NativeHistogramsOnly: !sf.classicHistograms}
	probeMetrics := metrics.NewProbeWithOptions(probeRegistry, metricsOpts)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go logServerVersion(ctx, restConfig, logger)
	cgroup := ownCgroup(logger)
	monitor, err := startMonitor(ctx, cf.starvedThreshold, cgroup, metrics.RegisterSelfHealth(probeRegistry, metricsOpts, cgroupThrottling(cgroup, logger)), logger)
	if err != nil {
		logger.Error("invalid configuration", "err", err)
		return 1
	}
	board := newBoard(10)
	sweeper := judge.NewSweeper()
	go sweeper.Run(ctx)
	mgr := &manager{
		ctx:     ctx,
		file:    cf.configFile,
		metrics: probeMetrics,
		config:  configMetrics,
		board:   board,
		logger:  logger,
		opts: probe.Options{
			Config: restConfig, Metrics: probeMetrics, Logger: logger, Tracer: tracer,
			Replica: cf.replica, OrphanAge: cf.orphanAge, Sweeper: sweeper, Monitor: monitor,
		},
	}
	if err := mgr.apply(probes); err != nil {
		logger.Error("invalid probe", "err", err)
		stop()
		mgr.wait()
		return 1
	}
	configMetrics.LastReloadSuccessful.Set(1)
	configMetrics.LastReloadSuccessTimestamp.SetToCurrentTime()

	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = mgr.reload() // logged, and counted unless there is no file
			}
		}
	}()

	gatherers := prometheus.Gatherers{probeRegistry}
	if !sf.noSelfMetrics {
		gatherers = append(gatherers, selfRegistry)
	}
	server := &http.Server{Handler: newMux(sf, gatherers, selfRegistry, mgr, logger)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- web.ListenAndServe(server, sf.web, logger) }()

	code := 0
	select {
	case <-ctx.Done():
		logger.Info("shutting down: deleting this replica's markers")
	case err := <-serveErr:
		logger.Error("serving HTTP failed", "err", err)
		stop()
		code = 1
	}
	mgr.wait()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = server.Shutdown(shutdownCtx)
	return code
}

// newMux serves gatherers (the probe results, and unless disabled the
// exporter's own metrics, with promhttp's instrumentation on self), the
// lifecycle and status endpoints, and pprof if enabled.
func newMux(sf *serveFlags, gatherers prometheus.Gatherers, self prometheus.Registerer, mgr *manager, logger *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(sf.metricsPath, promhttp.InstrumentMetricHandler(self, promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{
		// A collector that fails is logged, and the rest still served.
		ErrorLog:      slog.NewLogLogger(logger.With("component", "metrics").Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
		// OpenMetrics carries the exemplars that link latency to traces.
		EnableOpenMetrics:   true,
		MaxRequestsInFlight: sf.maxRequests,
	})))
	mux.HandleFunc("/-/healthy", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "Healthy")
	})
	// Ready is the exporter's own state: its config loaded and its probes
	// started, which the server's start follows. Whether the cluster's
	// paths can list and watch is a result (watchprobe_path_up, the status
	// page, the logs): an apiserver incident must not take the exporter
	// out of its Service, its scrapes or a `helm upgrade --wait`.
	mux.HandleFunc("/-/ready", func(w http.ResponseWriter, _ *http.Request) {
		if mgr.ctx.Err() != nil {
			http.Error(w, "Not ready: shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "Ready")
	})
	mux.Handle("/-/reload", reloadHandler(sf.enableLifecycle, mgr.reload))
	mux.Handle("/config", configHandler(mgr))
	if sf.enablePprof {
		// Profiles of a misbehaving exporter without a rebuild, when asked for.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	if sf.metricsPath != "/" {
		mux.Handle("/", landingHandler(sf.metricsPath, sf.enablePprof, mgr, logger))
	}
	return mux
}
