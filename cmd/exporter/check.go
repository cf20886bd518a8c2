package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"k8s.io/klog/v2"

	"github.com/watchprobe/watchprobe/pkg/check"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/selfhealth"
)

// Exit statuses of `watchprobe check`.
const (
	checkOK     = 0 // the objective holds
	checkFailed = 1 // it does not
	checkError  = 2 // the check could not run: bad flags or config, no cluster, or interrupted
)

type checkFlags struct {
	cycles      int
	cyclesSet   bool
	duration    time.Duration
	durationSet bool
	latency     time.Duration
	target      float64
	allowed     int
	output      string

	agentsNamespace      string
	agentsFailOnDegraded bool
}

func addCheckFlags(cmd *kingpin.CmdClause) *checkFlags {
	kf := &checkFlags{}
	cmd.Flag("cycles", "Stop once every probe has had this many cycles judged (the default, unless --duration is given).").Default("10").IsSetByUser(&kf.cyclesSet).IntVar(&kf.cycles)
	cmd.Flag("duration", "Stop after this long instead: no cycle starts after it, and the cycles under way finish and are judged.").IsSetByUser(&kf.durationSet).DurationVar(&kf.duration)
	cmd.Flag("objective.latency", "An event that arrives within this latency of its write meets the objective.").Default("1s").DurationVar(&kf.latency)
	cmd.Flag("objective.target", "Share of the events expected on each path that must arrive within --objective.latency, above 0 and at most 1.").Default("0.99").Float64Var(&kf.target)
	cmd.Flag("objective.allowed-anomalies", "Anomalies allowed on each path (missed, duplicated and out-of-order events), and write errors allowed per probe.").Default("0").IntVar(&kf.allowed)
	cmd.Flag("output", "Report format: text, or json (schema: docs/check-report.schema.json).").Default("text").EnumVar(&kf.output, "text", "json")
	cmd.Flag("agents.namespace", "The node agents' namespace: the report lists each node's agent verdict from their Leases there. Empty: leave the agents out.").Default("watchprobe-agents").StringVar(&kf.agentsNamespace)
	cmd.Flag("agents.fail-on-degraded", "Fail the check when a node's agent is degraded, rather than note it. Its counters run since the agent started, not over the check.").BoolVar(&kf.agentsFailOnDegraded)
	return kf
}

func (kf *checkFlags) validate() error {
	var errs []error
	if kf.cyclesSet && kf.durationSet {
		errs = append(errs, errors.New("--cycles and --duration cannot be combined; give one"))
	}
	if kf.cycles < 1 {
		errs = append(errs, fmt.Errorf("--cycles: %d is too few; use at least 1", kf.cycles))
	}
	if kf.durationSet && kf.duration <= 0 {
		errs = append(errs, fmt.Errorf("--duration: must be positive, got %s", kf.duration))
	}
	if kf.latency <= 0 {
		errs = append(errs, fmt.Errorf("--objective.latency: must be positive, got %s", kf.latency))
	}
	if !(kf.target > 0 && kf.target <= 1) {
		errs = append(errs, fmt.Errorf("--objective.target: %g is not a share; use a number above 0 and at most 1, e.g. 0.99", kf.target))
	}
	if kf.allowed < 0 {
		errs = append(errs, fmt.Errorf("--objective.allowed-anomalies: %d is negative; use 0 or more", kf.allowed))
	}
	return errors.Join(errs...)
}

// validateFor checks the flags against the probes: an event later than
// its probe's deadline is missed, so an objective latency above a
// deadline would count an event both missed and within the objective.
func (kf *checkFlags) validateFor(cfgs []config.Config) error {
	var errs []error
	for _, cfg := range cfgs {
		if d := time.Duration(cfg.Deadline); kf.latency > d {
			errs = append(errs, fmt.Errorf("--objective.latency: %s is longer than probe %q's deadline (%s), after which an event counts as missed; use at most %s, or raise the deadline", kf.latency, cfg.Name, d, d))
		}
	}
	return errors.Join(errs...)
}

// runCheck runs `watchprobe check`: pkg/check runs the probes and judges;
// here are its flags, its progress on stderr, its report on stdout and its
// exit status.
func runCheck(cf *commonFlags, kf *checkFlags, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "watchprobe check: %s\n", line)
		}
		return checkError
	}
	if err := kf.validate(); err != nil {
		return fail(err)
	}
	if err := selfhealth.CheckThreshold(cf.starvedThreshold); err != nil {
		return fail(fmt.Errorf("--exporter.starved-threshold: %w", err))
	}
	cfgs, err := probeConfigs(cf.configFile, cf.probes)
	if err != nil {
		return fail(err)
	}
	if err := kf.validateFor(cfgs); err != nil {
		return fail(err)
	}
	replica := cf.replica
	if !cf.replicaSet {
		// Its own identity: the check must never take, or sweep away, the
		// markers of an exporter that runs as this host or pod.
		replica = "check-" + randomHex(3)
	}
	restConfig, err := loadRESTConfig(cf.kubeconfig)
	if err != nil {
		return fail(fmt.Errorf("no Kubernetes configuration: %w", err))
	}

	prog := newProgress(stderr, isTerminal(stderr))
	cf.log.Writer = prog
	logger := promslog.New(cf.log)
	klog.SetSlogLogger(logger)

	// The check's verdicts wait for the self-monitor as the exporter's
	// do: a check on a starved machine must not fail the cluster.
	monCtx, stopMonitor := context.WithCancel(context.Background())
	defer stopMonitor()
	monitor, err := startMonitor(monCtx, cf.starvedThreshold, ownCgroup(logger), nil, logger)
	if err != nil {
		return fail(err)
	}

	// The status board hears each cycle's verdict with its anomalies, for
	// the progress lines.
	board := newBoard(1)
	board.onCycle = prog.cycle
	opts := check.Options{
		Probes: cfgs, Config: restConfig, Replica: replica, OrphanAge: cf.orphanAge, Logger: logger, Monitor: monitor,
		Objective: check.Objective{Latency: kf.latency, Target: kf.target, Allowed: kf.allowed},
		Cycles:    kf.cycles,
		Sinks:     func(name string) []judge.Sink { return []judge.Sink{board.track(name)} },

		AgentsNamespace: kf.agentsNamespace, AgentsFailOnDegraded: kf.agentsFailOnDegraded,
	}
	if kf.durationSet {
		opts.Duration = kf.duration
	}
	c := check.New(opts)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.Preflight(ctx); err != nil {
		return fail(err)
	}
	prog.start(time.Now(), kf, cfgs, c)
	unwatch := context.AfterFunc(ctx, func() {
		stop() // a second interrupt ends the process at once
		prog.println("interrupted: deleting markers (interrupt again to quit at once)")
	})
	rep, err := c.Run(ctx)
	unwatch()
	prog.finish()
	if err != nil {
		return fail(err)
	}
	if kf.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = writeText(stdout, rep)
	}
	if err != nil {
		return fail(err)
	}
	switch rep.Verdict() {
	case check.Holds:
		return checkOK
	case check.Fails:
		return checkFailed
	}
	return checkError
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
