package main

import (
	"net/http"
	"path"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// writeKey names one marker write: the marker and the sequence number the
// write gave it.
type writeKey struct {
	name string
	seq  uint64
}

// sentWrite is one marker write as the recorder saw it leave.
type sentWrite struct {
	event string // the event it is expected as
	// called is the probe's own stamp, at its write call; wire is when the
	// request entered the HTTP transport, below every wrapper of the
	// probe's, just after the exporter's send stamp: the instant every
	// client's latency counts from (zero if the transport never saw it).
	called, wire time.Time
}

// sendTime is when the write left, as the exporter times it: at the
// transport, or, failing that stamp, at the probe's write call.
func (w sentWrite) sendTime() time.Time {
	if w.wire.IsZero() {
		return w.called
	}
	return w.wire
}

// recorder collects, for each marker write, when it was sent and when each
// client received it. Sends and arrivals have locks of their own: the
// probe reports a send between its send stamp and the request, and a wait
// there, behind the clients' arrivals, would be timed as latency.
type recorder struct {
	sentMu sync.Mutex
	sent   map[writeKey]*sentWrite
	// latest is the newest write of each marker, and under "" the newest
	// create, whose URL names no marker: the probe sends one write at a
	// time, so the transport's next request of a marker is that write.
	latest  map[string]writeKey
	deletes map[string]uint64 // marker -> seq of its delete

	mu      sync.Mutex
	arrived map[string]map[writeKey]time.Time // by client
	// deleted holds the reference clients' delete events by client and
	// marker until the end, when each is matched to its marker's delete:
	// a deleted object carries the seq of the write before.
	deleted map[string]map[string]time.Time
}

func newRecorder() *recorder {
	return &recorder{sent: map[writeKey]*sentWrite{}, latest: map[string]writeKey{}, deletes: map[string]uint64{},
		arrived: map[string]map[writeKey]time.Time{}, deleted: map[string]map[string]time.Time{}}
}

// sentBy notes a write as the probe makes it, at its write call.
func (r *recorder) sentBy(k writeKey, event string, at time.Time) {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	r.sent[k] = &sentWrite{event: event, called: at}
	r.latest[k.name] = k
	switch event {
	case metrics.EventAdded:
		r.latest[""] = k
	case metrics.EventDeleted:
		r.deletes[k.name] = k.seq
	}
}

// onWire wraps the probe's transport, innermost, and stamps each marker
// write as it reaches it: just after the exporter's own stamp.
func (r *recorder) onWire(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		at := time.Now()
		marker := ""
		switch req.Method {
		case http.MethodPut, http.MethodDelete:
			marker = path.Base(req.URL.Path)
		case http.MethodPost:
		default:
			return rt.RoundTrip(req)
		}
		r.sentMu.Lock()
		if w := r.sent[r.latest[marker]]; w != nil && w.wire.IsZero() {
			w.wire = at
		}
		r.sentMu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// arrivedAt notes the first arrival of write k on client.
func (r *recorder) arrivedAt(client string, k writeKey, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first(r.arrived, client, k, at)
}

// first sets m[client][k] to at unless it is set.
func first[K comparable](m map[string]map[K]time.Time, client string, k K, at time.Time) {
	if m[client] == nil {
		m[client] = map[K]time.Time{}
	}
	if _, seen := m[client][k]; !seen {
		m[client][k] = at
	}
}

// arrivedObject notes an object seen by a reference client: by its
// sequence number, or, deleted, by its name until matchDeletes.
func (r *recorder) arrivedObject(client string, deleted bool, obj metav1.Object, at time.Time) {
	if !deleted {
		if seq, err := strconv.ParseUint(obj.GetAnnotations()[probe.AnnotationSeq], 10, 64); err == nil {
			r.arrivedAt(client, writeKey{obj.GetName(), seq}, at)
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	first(r.deleted, client, obj.GetName(), at)
}

// matchDeletes files the reference clients' delete events under their
// markers' deletes, once writing has stopped.
func (r *recorder) matchDeletes() {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for client, byName := range r.deleted {
		for name, at := range byName {
			if seq, ok := r.deletes[name]; ok {
				first(r.arrived, client, writeKey{name, seq}, at)
			}
		}
	}
}

// eventTypes are the groups every table shows: all writes ("") first,
// then each event type.
var eventTypes = []string{"", metrics.EventAdded, metrics.EventModified, metrics.EventDeleted}

// delay is a distribution of a delay inside the exporter.
type delay struct {
	Event      string  `json:"event,omitempty"`
	Writes     int     `json:"writes"`
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
}

// preSend is, by event type, how long writes took from the probe's write
// call to the HTTP transport.
func (r *recorder) preSend() []delay {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	var out []delay
	for _, event := range eventTypes {
		var ds []float64
		for _, w := range r.sent {
			if !w.wire.IsZero() && (event == "" || w.event == event) {
				ds = append(ds, w.wire.Sub(w.called).Seconds())
			}
		}
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		out = append(out, delay{Event: event, Writes: len(ds), P50Seconds: ds[len(ds)/2], P99Seconds: ds[len(ds)*99/100], MaxSeconds: ds[len(ds)-1]})
	}
	return out
}

// seen counts the writes sent and, by client, those it saw; common lists
// those every client saw, so that all are judged on the same writes.
func (r *recorder) seen(clients []string) (sent int, byClient map[string]int, common []writeKey) {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	byClient = map[string]int{}
	for k := range r.sent {
		all := true
		for _, c := range clients {
			_, ok := r.arrived[c][k]
			if ok {
				byClient[c]++
			}
			all = all && ok
		}
		if all {
			common = append(common, k)
		}
	}
	return len(r.sent), byClient, common
}

// latencies are, for each client, the sorted latencies of writes of event
// (all for "") among keys, from their send time.
func (r *recorder) latencies(clients []string, keys []writeKey, event string) map[string][]float64 {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]float64{}
	for _, k := range keys {
		w := r.sent[k]
		if event != "" && w.event != event {
			continue
		}
		for _, c := range clients {
			out[c] = append(out[c], r.arrived[c][k].Sub(w.sendTime()).Seconds())
		}
	}
	for _, ds := range out {
		slices.Sort(ds)
	}
	return out
}
