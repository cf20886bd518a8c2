package agent

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/watchprobe/watchprobe/pkg/probe/judge"
)

// What an agent's Lease carries beside the write's sequence number.
const (
	// AnnotationStatus holds the agent's Status as of the write that set
	// it: what `watchprobe check` reads per node without a Prometheus.
	AnnotationStatus = "watchprobe.io/agent-status"
	// LabelComponent marks the agents' Leases; its value is ComponentAgent.
	LabelComponent = "watchprobe.io/component"
	ComponentAgent = "agent"
	// FieldManager is every agent write's field manager, the exporter's:
	// the apiserver stamps its managedFields entry with its own clock at
	// each write, which tells a Lease's age without the node's clock.
	FieldManager = judge.FieldManager
)

// Status is an agent's verdicts up to one of its writes: its counters
// since it started (the values of its metrics), and its troubles and the
// latency of the events that arrived in the last StatusWindow.
type Status struct {
	Healthy bool `json:"healthy"`
	// Refused: the agent's own requests are refused (its Role, its
	// namespace, a policy): what it cannot measure says nothing of the
	// node.
	Refused  bool     `json:"refused,omitempty"`
	Zone     string   `json:"zone,omitempty"`
	Interval Duration `json:"interval"`
	// Deadline is the agent's --deadline: with its interval, how long it
	// may go without a write before `watchprobe check` calls it stale.
	Deadline Duration `json:"deadline"`

	Writes       uint64 `json:"writes"`
	WriteErrors  uint64 `json:"writeErrors"`
	Missed       uint64 `json:"missed"`
	Lost         uint64 `json:"lost"`
	Stalls       uint64 `json:"stalls"`
	StreamEnds   uint64 `json:"streamEnds"`
	Relists      uint64 `json:"relists"`
	Unmeasurable uint64 `json:"unmeasurable"`

	// Recent are the misses, losses and stalls of the last StatusWindow.
	Recent Counts `json:"recent"`
	// P50, P90 and Max are of the arrivals in the last StatusWindow; 0
	// when none arrived.
	P50 Duration `json:"p50"`
	P90 Duration `json:"p90"`
	Max Duration `json:"max"`
	// WatchConn is the connection of the agent's watch, "local ->
	// remote", as the node's conntrack and ss show it.
	WatchConn string `json:"watchConn,omitempty"`
	// Since is when the agent started, by the node's clock: for a person,
	// never compared with another host's.
	Since time.Time `json:"since"`
}

// StatusWindow is how far back a Status's latencies reach.
const StatusWindow = 10 * time.Minute

// Counts are an agent's troubles over a window.
type Counts struct {
	Missed uint64 `json:"missed"`
	Lost   uint64 `json:"lost"`
	Stalls uint64 `json:"stalls"`
}

// Degraded reports whether s shows the node's watch path in trouble: an
// event missed or lost, or a stall, in the last StatusWindow, or the
// agent unhealthy now; never while its own requests are refused. A stream
// that ended and resumed with nothing missed (an apiserver's restart, a
// 410) is the watch working.
func (s Status) Degraded() bool {
	if s.Refused {
		return false
	}
	return !s.Healthy || s.Recent.Missed > 0 || s.Recent.Lost > 0 || s.Recent.Stalls > 0
}

// Encode is s as the annotation's value.
func (s Status) Encode() string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err) // a struct of numbers, strings and times always encodes
	}
	return string(b)
}

// ParseStatus reads an AnnotationStatus value.
func ParseStatus(v string) (Status, error) {
	var s Status
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return Status{}, fmt.Errorf("annotation %s: %w", AnnotationStatus, err)
	}
	return s, nil
}

// Duration is a time.Duration written as Go writes it ("3ms"), "" for 0.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) {
	if d == 0 {
		return []byte(`""`), nil
	}
	return json.Marshal(time.Duration(d).String())
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
