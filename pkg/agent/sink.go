package agent

import (
	"slices"
	"sync"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// sink keeps what an agent exports of its judgement's outcomes: its few
// series and the Status its next write carries. Every verdict is the
// judgement's (pkg/probe/judge); the sink only counts them.
type sink struct {
	m *metrics.Agent

	mu     sync.Mutex
	status Status
	// up and stalled are the watch's state; onTime says whether the
	// newest judged write (newest) arrived within the deadline.
	up, stalled bool
	onTime      bool
	newest      uint64
	// recent are the arrivals of the last StatusWindow, oldest first.
	recent []arrival
}

type arrival struct {
	at      time.Time
	latency time.Duration
}

func newSink(m *metrics.Agent, zone string, since time.Time) *sink {
	s := &sink{m: m, onTime: true, status: Status{Zone: zone, Since: since.UTC().Truncate(time.Second)}}
	s.m.Healthy.Set(0)
	return s
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
	case judge.Arrived:
		s.m.Latency.Observe(o.Latency.Seconds())
		s.recent = append(s.recent, arrival{o.At, o.Latency})
		if !o.Late && o.Seq >= s.newest {
			s.newest, s.onTime = o.Seq, true
		}
	case judge.Missed:
		s.status.Missed++
		s.m.Missed.Inc()
		if o.Seq >= s.newest {
			s.newest, s.onTime = o.Seq, false
		}
	case judge.Lost:
		if o.Gone {
			break
		}
		s.status.Lost++
		s.m.Lost.Inc()
	case judge.Unmeasurable:
		s.status.Unmeasurable++
		s.m.Unmeasurable.Inc()
	case judge.Stalled:
		s.status.Stalls++
		s.m.Stalls.Inc()
		s.stalled = true
	case judge.Unstalled:
		s.stalled = false
	case judge.Up:
		s.up = true
	case judge.Down:
		s.up = false
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
	healthy := s.healthyLocked()
	s.status.Healthy = healthy
	if healthy {
		s.m.Healthy.Set(1)
	} else {
		s.m.Healthy.Set(0)
	}
}

func (s *sink) healthyLocked() bool { return s.up && !s.stalled && s.onTime }

// snapshot is the agent's Status now, with the latencies of the arrivals
// since now minus StatusWindow.
func (s *sink) snapshot(now time.Time, interval time.Duration) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	cut := 0
	for cut < len(s.recent) && now.Sub(s.recent[cut].at) > StatusWindow {
		cut++
	}
	s.recent = slices.Delete(s.recent, 0, cut)
	st := s.status
	st.Interval = Duration(interval)
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
