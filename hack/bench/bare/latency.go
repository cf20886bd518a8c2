package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
)

// lat, when the bench asks for it, times the bare client's own writes on its
// raw watches: an independent client's view of the same apiserver at the
// same moment, from its own send stamps, beside the exporter's.
var lat *latencies

type sentKey struct {
	name string
	seq  uint64 // 0 for a delete: its event carries the last update's seq
}

type latencies struct {
	mu      sync.Mutex
	pending map[sentKey]time.Time
	seconds map[watch.EventType][]float64
}

func newLatencies() *latencies {
	return &latencies{pending: map[sentKey]time.Time{}, seconds: map[watch.EventType][]float64{}}
}

// sent stamps a write just before it is sent. The stamp is taken once the
// lock is held: a wait for the lock, which the watch holds while it files
// an arrival, must not count as the apiserver's time.
func (l *latencies) sent(name string, seq uint64, _ watch.EventType) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[sentKey{name, seq}] = time.Now()
}

// arrived times the first arrival of a write; every probe's raw watch sees
// only its own markers, so each write arrives once.
func (l *latencies) arrived(ev watch.Event, at time.Time) {
	if l == nil {
		return
	}
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		return
	}
	key := sentKey{name: m.GetName()}
	if ev.Type != watch.Deleted {
		if key.seq, err = strconv.ParseUint(m.GetAnnotations()[annotationSeq], 10, 64); err != nil {
			return
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if sent, ok := l.pending[key]; ok {
		delete(l.pending, key)
		l.seconds[ev.Type] = append(l.seconds[ev.Type], at.Sub(sent).Seconds())
	}
}

func (l *latencies) reset() {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.seconds)
}

// summary is " p50_added=S n_added=N ..." for the counts line.
func (l *latencies) summary() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, t := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted} {
		ds := slices.Sorted(slices.Values(l.seconds[t]))
		p50 := 0.0
		if len(ds) > 0 {
			p50 = ds[len(ds)/2]
		}
		fmt.Fprintf(&b, " p50_%s=%g n_%s=%d", strings.ToLower(string(t)), p50, strings.ToLower(string(t)), len(ds))
	}
	return b.String()
}
