package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

type writeKey struct {
	name string
	seq  uint64
}

// recorder collects, for each marker write, when it was sent and when each
// client received it. Sends and arrivals have locks of their own: the
// writer calls Sent between its send stamp and the request, so that a wait
// there, behind the five clients' arrivals, would be timed as latency.
type recorder struct {
	sentMu  sync.Mutex
	sent    map[writeKey]time.Time
	events  map[writeKey]string // the event each write is expected as
	deletes map[string]uint64   // marker -> seq of its delete
	// wire is when each write's request entered the HTTP transport, below
	// every wrapper of the probe's, just after the exporter stamped it: the
	// instant every client's latency counts from. The time from sent (the
	// probe's write call) to there is the client's before anything is
	// sent, part of no latency. latest is the
	// newest write of each marker, and of any marker for a create, whose
	// URL names none: the writer sends one write at a time.
	wire   map[writeKey]time.Time
	latest map[string]writeKey

	mu      sync.Mutex
	arrived map[string]map[writeKey]time.Time
	// deleted holds the reference clients' delete events by marker, until
	// the end, when each is matched to its marker's delete.
	deleted map[string]map[string]time.Time
}

func newRecorder() *recorder {
	return &recorder{sent: map[writeKey]time.Time{}, events: map[writeKey]string{}, deletes: map[string]uint64{},
		wire: map[writeKey]time.Time{}, latest: map[string]writeKey{},
		arrived: map[string]map[writeKey]time.Time{}, deleted: map[string]map[string]time.Time{}}
}

func (r *recorder) Sent(marker string, seq uint64, event string, at time.Time) {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	r.sent[writeKey{marker, seq}] = at
	r.events[writeKey{marker, seq}] = event
	r.latest[marker] = writeKey{marker, seq}
	if event == metrics.EventAdded {
		r.latest[""] = writeKey{marker, seq}
	}
	if event == metrics.EventDeleted {
		r.deletes[marker] = seq
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
		if k, ok := r.latest[marker]; ok {
			if _, seen := r.wire[k]; !seen {
				r.wire[k] = at
			}
		}
		r.sentMu.Unlock()
		return rt.RoundTrip(req)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sendTime is when write k left, as the exporter times it: when its request
// reached the transport, or, failing that stamp, the probe's own. Under
// sentMu or once writing has stopped.
func (r *recorder) sendTime(k writeKey) time.Time {
	if at, ok := r.wire[k]; ok {
		return at
	}
	return r.sent[k]
}

// preSend is, by event type, how long writes took from their send stamp to
// the HTTP transport.
func (r *recorder) preSend() []delay {
	r.sentMu.Lock()
	defer r.sentMu.Unlock()
	var out []delay
	for _, event := range []string{"", metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		var ds []float64
		for k, at := range r.wire {
			if event == "" || r.events[k] == event {
				ds = append(ds, at.Sub(r.sent[k]).Seconds())
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

// delay is a distribution of a delay inside the exporter.
type delay struct {
	Event      string  `json:"event,omitempty"`
	Writes     int     `json:"writes"`
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
	MaxSeconds float64 `json:"max_seconds"`
}

func (r *recorder) Arrived(client, marker string, seq uint64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.arrivedLocked(client, writeKey{marker, seq}, at)
}

func (r *recorder) arrivedLocked(client string, k writeKey, at time.Time) {
	m := r.arrived[client]
	if m == nil {
		m = map[writeKey]time.Time{}
		r.arrived[client] = m
	}
	if _, seen := m[k]; !seen {
		m[k] = at
	}
}

// arrivedObject records an object seen by a reference client: by its
// sequence number, or, deleted, by its name until matchDeletes.
func (r *recorder) arrivedObject(client string, deleted bool, obj metav1.Object, at time.Time) {
	if deleted {
		r.mu.Lock()
		defer r.mu.Unlock()
		m := r.deleted[client]
		if m == nil {
			m = map[string]time.Time{}
			r.deleted[client] = m
		}
		if _, seen := m[obj.GetName()]; !seen {
			m[obj.GetName()] = at
		}
		return
	}
	if seq, err := strconv.ParseUint(obj.GetAnnotations()[probe.AnnotationSeq], 10, 64); err == nil {
		r.Arrived(client, obj.GetName(), seq, at)
	}
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
				r.arrivedLocked(client, writeKey{name, seq}, at)
			}
		}
	}
}

// overheadInterval is the interval of the probe whose writes the overhead
// runs time: a create, an update and a delete, back to back, every 200 ms.
const overheadInterval = 200 * time.Millisecond

// overheadRun is what one overhead run measured.
type overheadRun struct {
	Latency []latency `json:"latency"`
	// PreSend is how long writes spent in the exporter and client-go from
	// the probe's write call to the HTTP transport, before their send
	// stamp: part of no latency.
	PreSend []delay `json:"pre_send"`
	// Reported is the p50 the exporter's own histograms give.
	Reported []reportedP50 `json:"reported_p50"`
	// Writes is the writes sent; Seen, by client, how many of them it saw:
	// the latency rows hold only writes every client saw, so a write an
	// exporter path missed is counted here and in Anomalies, not hidden.
	Writes int            `json:"writes"`
	Seen   map[string]int `json:"seen"`
	// Anomalies are the probe's anomaly counters that rose, by series.
	Anomalies map[string]float64 `json:"anomalies"`
}

// overhead writes markers into namespace ns for d with one probe on all its
// paths, and times each write's arrival on every path and on the bare
// reference clients, all from the instant its request reached the HTTP
// transport: the same writes, judged from the same instant. It returns p50
// and p99 per client over all writes, then per event type.
func overhead(ctx context.Context, cluster *localcluster.Cluster, d time.Duration, ns string) (overheadRun, error) {
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	if err := createNamespace(ctx, client, ns); err != nil {
		return overheadRun{}, err
	}
	rec := newRecorder()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The floor: etcd's own watch on the markers' keys, decoded only after
	// the arrival instant is taken.
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{cluster.EtcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return overheadRun{}, err
	}
	defer etcd.Close()
	etcdWatch := etcd.Watch(ctx, "/registry/configmaps/"+ns+"/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	go func() {
		decoder := scheme.Codecs.UniversalDeserializer()
		for resp := range etcdWatch {
			at := time.Now()
			for _, ev := range resp.Events {
				value := ev.Kv.Value
				if ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil {
					value = ev.PrevKv.Value
				}
				obj, _, err := decoder.Decode(value, nil, nil)
				if err != nil {
					continue
				}
				if m, err := meta.Accessor(obj); err == nil {
					rec.arrivedObject("etcd watch (floor)", ev.Type == clientv3.EventTypeDelete, m, at)
				}
			}
		}
	}()

	// A bare apiserver watch: no informer, no FIFO, no handler.
	apiWatch, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return overheadRun{}, err
	}
	go func() {
		for ev := range apiWatch.ResultChan() {
			at := time.Now()
			if m, err := meta.Accessor(ev.Object); err == nil && ev.Type != watch.Bookmark && ev.Type != watch.Error {
				rec.arrivedObject("bare apiserver watch", ev.Type == watch.Deleted, m, at)
			}
		}
	}()

	cfg := probe.DefaultConfig()
	cfg.Name, cfg.Namespace = "bench", ns
	cfg.Interval = model.Duration(overheadInterval)
	cfg.Paths = probe.KnownPaths // the exporter's etcd path beside the bare etcd watch
	cfg.Etcd.Endpoints = []string{cluster.EtcdURL}
	if resumeChecks {
		cfg.Resume = probe.DefaultResumeConfig()
		cfg.Resume.Every = model.Duration(10 * time.Second)
	}
	reg := prometheus.NewRegistry()
	pm := metrics.NewProbe(reg)
	config := cluster.AdminConfig()
	config.Wrap(rec.onWire) // the probe's own wrappers go around it
	p, err := probe.New(cfg, probe.Options{
		Config: config, Metrics: pm, Recorder: rec,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Replica: "bench", OrphanAge: time.Hour,
	})
	if err != nil {
		return overheadRun{}, err
	}
	probeCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	p.Run(probeCtx)
	time.Sleep(time.Second) // the last arrivals
	cancel()                // the reference clients stop
	rec.matchDeletes()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	clients := []string{"etcd watch (floor)", "bare apiserver watch", "exporter: " + metrics.PathEtcd, "exporter: " + metrics.PathWatch, "exporter: " + metrics.PathInformer}
	for _, path := range probe.KnownPaths {
		rec.arrived["exporter: "+path] = rec.arrived[path]
	}
	// Only writes every client saw, so that all are judged on the same ones.
	var common []writeKey
	for k := range rec.sent {
		all := true
		for _, c := range clients {
			_, ok := rec.arrived[c][k]
			all = all && ok
		}
		if all {
			common = append(common, k)
		}
	}
	if len(common) < 100 {
		return overheadRun{}, fmt.Errorf("only %d writes were seen by every client", len(common))
	}
	var out []latency
	for _, event := range []string{"", metrics.EventAdded, metrics.EventModified, metrics.EventDeleted} {
		var keys []writeKey
		for _, k := range common {
			if event == "" || rec.events[k] == event {
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			continue
		}
		group := make([]latency, 0, len(clients))
		for _, c := range clients {
			ds := make([]float64, 0, len(keys))
			for _, k := range keys {
				ds = append(ds, rec.arrived[c][k].Sub(rec.sendTime(k)).Seconds())
			}
			slices.Sort(ds)
			group = append(group, latency{Client: c, Event: event, Writes: len(ds), P50Seconds: ds[len(ds)/2], P99Seconds: ds[len(ds)*99/100],
				P50OldClassicSeconds: sampleClassicQuantile(0.5, oldLatencyBuckets, ds)})
		}
		for i := range group {
			group[i].P50VsBare = group[i].P50Seconds / group[1].P50Seconds
			group[i].P50MinusBareSeconds = group[i].P50Seconds - group[1].P50Seconds
			group[i].P50VsEtcd = group[i].P50Seconds / group[0].P50Seconds
		}
		out = append(out, group...)
	}
	run := overheadRun{Latency: out, PreSend: rec.preSend(), Writes: len(rec.sent), Seen: map[string]int{}}
	for _, c := range clients {
		for k := range rec.sent {
			if _, ok := rec.arrived[c][k]; ok {
				run.Seen[c]++
			}
		}
	}
	if run.Anomalies, err = anomalies(pm.Anomalies()); err != nil {
		return run, err
	}
	run.Reported, err = reported(reg, out)
	return run, err
}

// anomalies reads the anomaly counters of g that count a fault and are not
// zero, as series.
func anomalies(g prometheus.Gatherer) (map[string]float64, error) {
	mfs, err := g.Gather()
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			var pairs []string
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
				if l.GetName() != "probe" && l.GetValue() != "" {
					pairs = append(pairs, l.GetName()+"="+strconv.Quote(l.GetValue()))
				}
			}
			if v := m.GetCounter().GetValue(); v != 0 && metrics.Fault(mf.GetName(), labels) {
				out[mf.GetName()+"{"+strings.Join(pairs, ",")+"}"] = v
			}
		}
	}
	return out, err
}
