package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// overheadInterval is the interval of the probe whose writes the overhead
// runs time: a create, an update and a delete, back to back, every 200 ms.
const overheadInterval = 200 * time.Millisecond

// The clients an overhead run times, the two references first: each row
// is compared to them.
const (
	etcdFloor = "etcd watch (floor)"
	bareWatch = "bare apiserver watch"
)

// exporterClient names the exporter's path as a client of the tables.
func exporterClient(path string) string { return "exporter: " + path }

var overheadClients = []string{etcdFloor, bareWatch,
	exporterClient(metrics.PathEtcd), exporterClient(metrics.PathWatch), exporterClient(metrics.PathInformer)}

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

type latency struct {
	Client string `json:"client"`
	// Event is the event type the writes were expected as, or empty for
	// all of them.
	Event               string  `json:"event,omitempty"`
	Writes              int     `json:"writes"`
	P50Seconds          float64 `json:"p50_seconds"`
	P99Seconds          float64 `json:"p99_seconds"`
	P50VsBare           float64 `json:"p50_vs_bare_apiserver_watch"`
	P50MinusBareSeconds float64 `json:"p50_minus_bare_apiserver_watch_seconds"`
	P50VsEtcd           float64 `json:"p50_vs_etcd_floor"`
}

// overhead writes markers into namespace ns for d with one probe on all its
// paths, and times each write's arrival on every path and on the bare
// reference clients, all from the instant its request reached the HTTP
// transport: the same writes, judged from the same instant.
func overhead(ctx context.Context, cluster *localcluster.Cluster, d time.Duration, ns string, resume bool) (overheadRun, error) {
	client := kubernetes.NewForConfigOrDie(cluster.AdminConfig())
	if err := localcluster.CreateNamespaces(ctx, client, ns); err != nil {
		return overheadRun{}, err
	}
	rec := newRecorder()
	references, stopReferences := context.WithCancel(ctx)
	defer stopReferences()
	if err := watchEtcd(references, cluster.EtcdURL, ns, rec); err != nil {
		return overheadRun{}, err
	}
	if err := watchAPIServer(references, client, ns, rec); err != nil {
		return overheadRun{}, err
	}
	probed, err := runProbe(ctx, cluster, ns, d, rec, resume)
	if err != nil {
		return overheadRun{}, err
	}
	time.Sleep(time.Second) // the last arrivals
	stopReferences()
	rec.matchDeletes()
	run, err := summarise(rec)
	if err != nil {
		return run, err
	}
	run.Anomalies = probed.anomalies
	run.Reported, err = reported(probed.registry, run.Latency)
	return run, err
}

// watchEtcd is the floor: etcd's own watch on the markers' keys, decoded
// only after the arrival instant is taken.
func watchEtcd(ctx context.Context, url, ns string, rec *recorder) error {
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	events := etcd.Watch(ctx, "/registry/configmaps/"+ns+"/", clientv3.WithPrefix(), clientv3.WithPrevKV())
	go func() {
		defer etcd.Close()
		decoder := scheme.Codecs.UniversalDeserializer()
		for resp := range events {
			at := time.Now()
			for _, ev := range resp.Events {
				deleted := ev.Type == clientv3.EventTypeDelete
				value := ev.Kv.Value
				if deleted && ev.PrevKv != nil {
					value = ev.PrevKv.Value
				}
				if obj, _, err := decoder.Decode(value, nil, nil); err == nil {
					if m, err := meta.Accessor(obj); err == nil {
						rec.arrivedObject(etcdFloor, deleted, m, at)
					}
				}
			}
		}
	}()
	return nil
}

// watchAPIServer is a bare apiserver watch: no informer, no FIFO, no
// handler.
func watchAPIServer(ctx context.Context, client kubernetes.Interface, ns string, rec *recorder) error {
	w, err := client.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	go func() {
		for ev := range w.ResultChan() {
			at := time.Now()
			if m, err := meta.Accessor(ev.Object); err == nil && ev.Type != watch.Bookmark && ev.Type != watch.Error {
				rec.arrivedObject(bareWatch, ev.Type == watch.Deleted, m, at)
			}
		}
	}()
	return nil
}

// summarise gives p50 and p99 per client over the writes every client saw,
// all of them, then per event type, each row against the references.
func summarise(rec *recorder) (overheadRun, error) {
	sent, seen, common := rec.seen(overheadClients)
	if len(common) < 100 {
		return overheadRun{}, fmt.Errorf("only %d writes were seen by every client", len(common))
	}
	run := overheadRun{PreSend: rec.preSend(), Writes: sent, Seen: seen}
	for _, event := range eventTypes {
		byClient := rec.latencies(overheadClients, common, event)
		if len(byClient[etcdFloor]) == 0 {
			continue
		}
		p50 := func(ds []float64) float64 { return ds[len(ds)/2] }
		floor, bare := p50(byClient[etcdFloor]), p50(byClient[bareWatch])
		for _, c := range overheadClients {
			ds := byClient[c]
			run.Latency = append(run.Latency, latency{Client: c, Event: event, Writes: len(ds), P50Seconds: p50(ds), P99Seconds: ds[len(ds)*99/100],
				P50VsBare: p50(ds) / bare, P50MinusBareSeconds: p50(ds) - bare, P50VsEtcd: p50(ds) / floor})
		}
	}
	return run, nil
}
