package check

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/model"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// tally counts one probe's outcomes for the report: its cycles, its writes
// and, per path, the counts and every latency. A check is short, so keeping
// every latency is cheap, and gives exact quantiles and the true maximum,
// which the histograms' buckets cannot.
type tally struct {
	mu          sync.Mutex
	cycles      Cycles
	settled     map[uint64]bool // cycles settled after one older than them is not yet
	paths       map[pathKey]*pathTally
	controllers map[string]*controllerTally
	writes      int64
	writeErrors int64
	// writesRefused counts the refused writes by cause; refusedBy names
	// the latest policy or webhook that denied one, by cause.
	writesRefused map[string]int64
	refusedBy     map[string]string
}

// Cycles count a probe's cycle verdicts as they are taken.
type Cycles struct {
	Judged, OK int
	// Unjudged: settled without a verdict, a write of theirs unmeasurable
	// because the exporter was starved.
	Unjudged int
	// Through: every cycle up to this one has settled. A cycle with a miss
	// settles only at its deadline, after newer ones.
	Through uint64
}

// pathKey names one path of a probe.
type pathKey struct {
	path, apiserver string
}

type pathTally struct {
	report    PathReport
	latencies []time.Duration
	// heard: the path told something, so it ran.
	heard bool
}

type controllerTally struct {
	report            ControllerReport
	latencies, shares []time.Duration
}

// newTally starts the tally of a probe, with a row for each configured
// path, which must report; a path pinned to an apiserver gets one when it
// first tells something.
func newTally(cfg config.Config) *tally {
	t := &tally{settled: map[uint64]bool{}, paths: map[pathKey]*pathTally{}, controllers: map[string]*controllerTally{},
		writesRefused: zeros(metrics.RefusalCauses), refusedBy: map[string]string{}}
	for _, p := range cfg.Paths {
		t.row(p, "")
	}
	for _, c := range cfg.Controllers {
		t.controllers[c] = &controllerTally{report: ControllerReport{Controller: c}}
	}
	return t
}

func (t *tally) row(path, apiserver string) *pathTally {
	k := pathKey{path, apiserver}
	if t.paths[k] == nil {
		t.paths[k] = &pathTally{report: PathReport{Path: path, APIServer: apiserver,
			Missed: zeros(MissedReasons), Lost: zeros(MissedReasons), WatchEnds: zeros(EndReasons), Relists: zeros(RelistReasons),
			Counts: zeros(PathCounts)}}
	}
	return t.paths[k]
}

func zeros(keys []string) map[string]int64 {
	m := make(map[string]int64, len(keys))
	for _, k := range keys {
		m[k] = 0
	}
	return m
}

func (t *tally) Outcome(o judge.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if o.Controller != "" {
		t.controllerOutcome(o)
		return
	}
	if o.Path == nil {
		switch o.Kind {
		case judge.Answered:
			t.writes++
			switch {
			case o.Err != nil && o.Reason != "":
				t.writesRefused[o.Reason]++
				if o.RefusedBy != "" {
					t.refusedBy[o.Reason] = o.RefusedBy
				}
			case o.Err != nil:
				t.writeErrors++
			}
		case judge.CycleJudged:
			t.verdict(o.Cycle, o.OK, o.Reason == "")
		}
		return
	}
	row := t.row(o.Path.Name, o.Path.APIServer)
	row.heard = true
	r := &row.report
	if f := judge.Counted(o.Kind); f != nil && f.Report != "" {
		r.Counts[f.Report]++
	}
	switch o.Kind {
	case judge.Arrived:
		r.Observed++
		row.latencies = append(row.latencies, o.Latency)
		if o.Late {
			r.Late++
		}
	case judge.Missed:
		r.Missed[o.Reason]++
	case judge.Lost:
		r.Lost[o.Reason]++
	case judge.StreamEnded:
		r.WatchEnds[o.Reason]++
	case judge.Relisted:
		r.Relists[o.Reason]++
	case judge.Refused:
		r.Refused = o.Reason
	case judge.ResumeChecked:
		rr := r.resume()
		age := model.Duration(o.Limit).String()
		if rr.Checks[age] == nil {
			rr.Checks[age] = zeros(metrics.ResumeOutcomes)
		}
		rr.Checks[age][o.Reason]++
		if v := o.Resume; v != nil && v.Outcome == metrics.ResumeIncomplete {
			ir := InexactReplay{Age: age, From: v.From, Missing: nonNil(v.Missing), Duplicated: nonNil(v.Duplicated), OutOfOrder: nonNil(v.OutOfOrder)}
			if v.Err != nil {
				ir.Error = v.Err.Error()
			}
			rr.Inexact = append(rr.Inexact, ir)
			if len(rr.Inexact) > inexactKept {
				rr.Inexact = slices.Delete(rr.Inexact, 0, len(rr.Inexact)-inexactKept)
			}
		}
	case judge.ResumeWindow:
		w := o.Limit.Seconds()
		r.resume().WindowSeconds = &w
	}
}

// inexactKept bounds the inexact replays a path's report lists: the latest.
const inexactKept = 20

func (p *PathReport) resume() *ResumeReport {
	if p.Resume == nil {
		p.Resume = &ResumeReport{Checks: map[string]map[string]int64{}, Inexact: []InexactReplay{}}
	}
	return p.Resume
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// controllerOutcome counts a controller's outcome. The caller holds mu.
func (t *tally) controllerOutcome(o judge.Outcome) {
	ct := t.controllers[o.Controller]
	if ct == nil {
		return
	}
	r := &ct.report
	switch o.Kind {
	case judge.ControllerChanged:
		switch {
		case o.Err != nil:
			r.ChangeErrors++
		case o.Verb == metrics.VerbUpdate:
			r.Changes++
		}
	case judge.Reacted:
		r.Reacted++
		ct.latencies = append(ct.latencies, o.Latency)
		if o.Share >= 0 {
			ct.shares = append(ct.shares, o.Share)
		}
		if o.Late {
			r.Late++
		}
	case judge.ReactionMissed:
		r.Missed++
	case judge.ReactionLost:
		r.Lost++
	}
}

// verdict counts cycle n's verdict, if judged (else it settled without
// one: a write of it was unmeasurable). The caller holds mu.
func (t *tally) verdict(n uint64, ok, judged bool) {
	c := &t.cycles
	if judged {
		c.Judged++
		if ok {
			c.OK++
		}
	} else {
		c.Unjudged++
	}
	t.settled[n] = true
	for t.settled[c.Through+1] {
		delete(t.settled, c.Through+1)
		c.Through++
	}
}

func (t *tally) counts() Cycles {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cycles
}
