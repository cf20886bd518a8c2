// Command watchprobe writes marker objects through the Kubernetes apiserver
// and exports how List-Watch delivers them as Prometheus metrics.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	promslogflag "github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/watchprobe/watchprobe/pkg/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// probeFlags build a single probe when no --config.file is given.
type probeFlags struct {
	set  map[string]*bool
	cfg  config.Config
	path string
	etcd string
}

func addProbeFlags(app *kingpin.Application) *probeFlags {
	pf := &probeFlags{set: map[string]*bool{}, cfg: config.DefaultConfig()}
	def := config.DefaultConfig()
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

// commonFlags are the settings the exporter and `check` share: which probes,
// which cluster, and who this process is among the markers' writers.
type commonFlags struct {
	configFile string
	kubeconfig string
	replica    string
	replicaSet bool
	orphanAge  time.Duration
	probes     *probeFlags
	log        *promslog.Config

	// starvedThreshold: a self-monitor wake-up later than this counts the
	// exporter as starved (pkg/selfhealth).
	starvedThreshold time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	app := kingpin.New("watchprobe", "Measures Kubernetes List-Watch health end to end with marker objects.")
	app.UsageWriter(stdout).ErrorWriter(stderr)
	cf := &commonFlags{log: &promslog.Config{Writer: stderr}}
	app.Flag("config.file", "YAML file of probes; replaces the --probe.* flags.").StringVar(&cf.configFile)
	app.Flag("kubeconfig", "Kubeconfig file; empty means in-cluster config, else the usual kubeconfig loading rules.").StringVar(&cf.kubeconfig)
	app.Flag("probe.replica", "Identity of this exporter among replicas; defaults to $POD_NAME, else the host name (for check: check-<random>).").Default(defaultReplica()).IsSetByUser(&cf.replicaSet).StringVar(&cf.replica)
	app.Flag("marker.orphan-age", "Age after which another replica's marker is deleted as left behind.").Default("1h").DurationVar(&cf.orphanAge)
	app.Flag("exporter.starved-threshold", "The exporter counts itself starved of CPU while its self-monitor wakes later than this, or its threads wait for a CPU (a CPU limit's throttle included) more than a fiftieth of this per time slice, or, where that wait cannot be read, its cgroup is throttled longer than this per period: writes whose verdict that could have moved are unmeasurable (reason exporter_starved), not timed, missed or lost. At least 5ms.").Default(selfhealthDefaultThreshold.String()).DurationVar(&cf.starvedThreshold)
	cf.probes = addProbeFlags(app)
	promslogflag.AddFlags(app, cf.log)

	serveCmd := app.Command("serve", "Run the exporter: probe continuously and serve the results on /metrics (the default command).").Default()
	sf := addServeFlags(serveCmd)
	checkCmd := app.Command("check", "Probe for a number of cycles or a duration, print a report and exit 0 if the objective holds, 1 if not, 2 if the check could not run.")
	kf := addCheckFlags(checkCmd)

	app.Version(version.Print("watchprobe"))
	app.HelpFlag.Short('h')
	cmd, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(stderr, "watchprobe: %v\n", err)
		return 2
	}
	if cmd == checkCmd.FullCommand() {
		return runCheck(cf, kf, stdout, stderr)
	}
	return serve(cf, sf, stdout)
}

// probeConfigs returns the probes from the config file, or the one probe the
// flags describe.
func probeConfigs(file string, pf *probeFlags) ([]config.Config, error) {
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
		return config.LoadFile(file)
	}
	cfg := pf.cfg
	cfg.Paths = strings.Split(pf.path, ",")
	if pf.etcd != "" {
		cfg.Etcd.Endpoints = strings.Split(pf.etcd, ",")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("--probe.* flags: %w", err)
	}
	if err := cfg.CheckFiles(); err != nil {
		return nil, fmt.Errorf("--probe.* flags: %w", err)
	}
	return []config.Config{cfg}, nil
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
