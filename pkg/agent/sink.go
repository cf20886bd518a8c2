package agent

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// sink keeps what an agent exports of its judgement's outcomes: its few
// series and the Status its next write carries. Every verdict is the
// judgement's (pkg/probe/judge); the sink only counts them.
type sink struct {
	mu     sync.Mutex
	m      *metrics.Agent
	status Status
	// up and stalled are the watch's state; onTime says whether the
	// newest judged write (newest) arrived within the deadline, and
	// writeFailed whether the newest answered write (answered) failed.
	up, stalled, onTime, writeFailed bool
	newest, answered                 uint64
	// pathRefused: the watch's requests are refused for the agent's own
	// permissions or namespace (judge.Refused); writeRefused: so is the
	// newest answered write (a refusal cause); setupRefused: so is its
	// Lease's preparation or the count of the agents.
	pathRefused, writeRefused, setupRefused bool
	// recent are the arrivals of the last StatusWindow, oldest first;
	// troubles its misses, losses and stalls.
	recent   []arrival
	troubles []trouble
}

type arrival struct {
	at      time.Time
	latency time.Duration
}

type trouble struct {
	at   time.Time
	kind judge.Kind
}

// newSink is an agent's sink before its first write: unhealthy until a
// write of its arrives on time, so that an agent that never gets to write
// is never shown healthy.
func newSink(m *metrics.Agent, since time.Time) *sink {
	s := &sink{m: m, status: Status{Since: since.UTC().Truncate(time.Second)}}
	s.setGauges()
	return s
}

// relabel registers the agent's series again on reg with zone, before the
// first write: every series is still at its start.
func (s *sink) relabel(reg prometheus.Registerer, node, zone string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Unregister(reg)
	s.m = metrics.RegisterAgent(reg, node, zone)
	s.setGauges()
}

// Outcome counts one outcome of the agent's judgement.
func (s *sink) Outcome(o judge.Outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch o.Kind {
	case judge.Answered:
		if o.Err == nil {
			s.status.Writes++
			s.m.Writes.Inc()
		} else {
			s.status.WriteErrors++
			s.m.WriteErrors.Inc()
		}
		if o.Seq >= s.answered {
			// Unhealthy only for a write that got no answer: an
			// apiserver's error (5xx, 429) is the control plane's,
			// answered over the node's path, which worked. A 404 of the
			// agent's own Lease (deleted; the agent makes it again) is
			// no refusal of the agent's; a missing namespace is.
			s.answered = o.Seq
			s.writeFailed = o.Err != nil && o.Code == 0
			s.writeRefused = o.Reason != "" && o.Reason != metrics.RefusedNotFound
		}
	case judge.Arrived:
		s.m.Latency.Observe(o.Latency.Seconds())
		s.recent = append(s.recent, arrival{o.At, o.Latency})
		if !o.Late && o.Seq >= s.newest {
			s.newest, s.onTime = o.Seq, true
		}
	case judge.Missed:
		s.status.Missed++
		s.m.Missed.Inc()
		s.troubles = append(s.troubles, trouble{o.At, o.Kind})
		if o.Seq >= s.newest {
			s.newest, s.onTime = o.Seq, false
		}
	case judge.Lost:
		if o.Gone {
			break
		}
		s.status.Lost++
		s.m.Lost.Inc()
		s.troubles = append(s.troubles, trouble{o.At, o.Kind})
	case judge.Unmeasurable:
		s.status.Unmeasurable++
		s.m.Unmeasurable.Inc()
	case judge.Stalled:
		s.status.Stalls++
		s.m.Stalls.Inc()
		s.troubles = append(s.troubles, trouble{o.At, o.Kind})
		s.stalled = true
	case judge.Unstalled:
		s.stalled = false
	case judge.Up:
		s.up = true
	case judge.Down:
		s.up = false
	case judge.Refused:
		s.pathRefused = o.Reason != ""
	case judge.StreamEnded:
		// A stream ended at the timeout it asked for, or by the agent's own
		// shutdown, is the watch working as meant.
		if o.Reason != metrics.EndTimeout && o.Reason != metrics.EndClient {
			s.status.StreamEnds++
			s.m.StreamEnds.Inc()
		}
	case judge.Relisted:
		if o.Reason != metrics.RelistInitial {
			s.status.Relists++
			s.m.Relists.Inc()
		}
	default:
		return
	}
	s.setGauges()
}

// setupFailed counts a failed attempt at preparing the agent's Lease or
// counting the agents: a write error, since nothing is written until they
// succeed, refused when the apiserver refused it for the agent's own
// permissions or namespace; cleared by their success (err nil).
func (s *sink) setupFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setupRefused = err != nil && judge.WriteRefusal(err).Cause != ""
	if err != nil {
		s.status.WriteErrors++
		s.m.WriteErrors.Inc()
	}
	s.setGauges()
}

// setGauges sets the health and refusal gauges from the sink's state.
func (s *sink) setGauges() {
	s.status.Healthy = s.up && !s.stalled && s.onTime && !s.writeFailed
	s.status.Refused = s.pathRefused || s.writeRefused || s.setupRefused
	s.m.Healthy.Set(gauge(s.status.Healthy))
	s.m.Refused.Set(gauge(s.status.Refused))
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// snapshot is the agent's Status now, with the latencies and troubles of
// the last StatusWindow before now.
func (s *sink) snapshot(now time.Time, interval time.Duration) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recent = slices.DeleteFunc(s.recent, func(a arrival) bool { return now.Sub(a.at) > StatusWindow })
	s.troubles = slices.DeleteFunc(s.troubles, func(t trouble) bool { return now.Sub(t.at) > StatusWindow })
	st := s.status
	st.Interval = Duration(interval)
	st.Recent = Counts{}
	for _, t := range s.troubles {
		switch t.kind {
		case judge.Missed:
			st.Recent.Missed++
		case judge.Lost:
			st.Recent.Lost++
		case judge.Stalled:
			st.Recent.Stalls++
		}
	}
	st.P50, st.P90, st.Max = 0, 0, 0
	if n := len(s.recent); n > 0 {
		ls := make([]time.Duration, n)
		for i, a := range s.recent {
			ls[i] = a.latency
		}
		slices.Sort(ls)
		st.P50, st.P90, st.Max = Duration(rank(ls, 0.5)), Duration(rank(ls, 0.9)), Duration(ls[n-1])
	}
	return st
}

// rank is the q-quantile of sorted by the nearest rank.
func rank(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
