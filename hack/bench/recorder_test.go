package main

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe"
)

// Every client is timed from the instant a write reached the transport,
// on the writes every client saw; a reference client's delete, which
// carries the seq of the write before, counts for the marker's delete.
func TestRecorderTimesTheSameWritesFromTheWire(t *testing.T) {
	rec := newRecorder()
	wire := rec.onWire(roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, nil }))
	t0 := time.Unix(1000, 0)
	send := func(method, path string, k writeKey, event string) time.Time {
		rec.sentBy(k, event, t0)
		req, _ := http.NewRequest(method, "https://apiserver"+path, nil)
		before := time.Now()
		_, _ = wire.RoundTrip(req)
		return before
	}
	obj := func(seq uint64) metav1.Object {
		return &metav1.ObjectMeta{Name: "m", Annotations: map[string]string{probe.AnnotationSeq: strconv.FormatUint(seq, 10)}}
	}
	var wired []time.Time
	for _, w := range []struct {
		method, path string
		k            writeKey
		event        string
	}{
		{http.MethodPost, "/api/v1/namespaces/ns/configmaps", writeKey{"m", 1}, metrics.EventAdded},
		{http.MethodPut, "/api/v1/namespaces/ns/configmaps/m", writeKey{"m", 2}, metrics.EventModified},
		{http.MethodDelete, "/api/v1/namespaces/ns/configmaps/m", writeKey{"m", 3}, metrics.EventDeleted},
	} {
		wired = append(wired, send(w.method, w.path, w.k, w.event))
	}
	for i, c := range overheadClients {
		at := func(n int) time.Time { return wired[n].Add(time.Duration(10*(i+1)) * time.Second) }
		if c == etcdFloor || c == bareWatch {
			rec.arrivedObject(c, false, obj(1), at(0))
			rec.arrivedObject(c, false, obj(2), at(1))
			rec.arrivedObject(c, true, obj(2), at(2))
		} else {
			rec.arrivedAt(c, writeKey{"m", 1}, at(0))
			rec.arrivedAt(c, writeKey{"m", 2}, at(1))
			rec.arrivedAt(c, writeKey{"m", 3}, at(2))
			rec.arrivedAt(c, writeKey{"m", 2}, at(2).Add(time.Hour)) // again: not timed again
		}
	}
	rec.arrivedAt(bareWatch, writeKey{"other", 1}, t0) // never sent
	rec.matchDeletes()

	sent, seen, common := rec.seen(overheadClients)
	if sent != 3 || len(common) != 3 {
		t.Fatalf("%d writes sent, %d seen by all, want 3 and 3 (seen: %v)", sent, len(common), seen)
	}
	for i, c := range overheadClients {
		want := float64(10 * (i + 1))
		for _, event := range eventTypes {
			ds := rec.latencies(overheadClients, common, event)[c]
			wantN := 1 // each event type once
			if event == "" {
				wantN = 3
			}
			if len(ds) != wantN {
				t.Fatalf("%s, %q: %d latencies, want %d", c, event, len(ds), wantN)
			}
			for _, d := range ds {
				// From the wire stamp, taken within the round trip after before.
				if d > want || d < want-1 {
					t.Errorf("%s, %q: latency %gs, want just under %gs", c, event, d, want)
				}
			}
		}
	}
	if pre := rec.preSend(); len(pre) != 4 || pre[0].Writes != 3 {
		t.Errorf("pre-send delays %+v, want all 3 writes, then one per event type", pre)
	}
}
