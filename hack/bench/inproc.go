package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// inProcessBare is a bare client inside the bench's own process: it writes
// markers in the probe's shape, at its interval, and times them on a raw
// watch from its own send stamps. Beside the probe, in the same process, it
// meets the same contention for the process's CPU; beside the bare client in
// a process of its own, it tells whether what the exporter's writes read
// above an independent client's is the exporter's code or only a busier
// process.
func inProcessBare(ctx context.Context, client kubernetes.Interface, ns string, interval time.Duration) (func() map[string]float64, error) {
	if err := localcluster.CreateNamespaces(ctx, client, ns); err != nil {
		return nil, err
	}
	cms := client.CoreV1().ConfigMaps(ns)
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	type key struct {
		name string
		seq  string // "" for a delete
	}
	var mu sync.Mutex
	sent := map[key]time.Time{}
	got := map[watch.EventType][]float64{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			at := time.Now()
			m, err := meta.Accessor(ev.Object)
			if err != nil || ev.Type == watch.Bookmark || ev.Type == watch.Error {
				continue
			}
			k := key{name: m.GetName()}
			if ev.Type != watch.Deleted {
				k.seq = m.GetAnnotations()["seq"]
			}
			mu.Lock()
			if s, ok := sent[k]; ok {
				delete(sent, k)
				got[ev.Type] = append(got[ev.Type], at.Sub(s).Seconds())
			}
			mu.Unlock()
		}
	}()
	stamp := func(k key) {
		mu.Lock()
		sent[k] = time.Now()
		mu.Unlock()
	}
	go func() {
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			name := fmt.Sprintf("inproc-%d", n)
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"seq": "1"}}}
			stamp(key{name, "1"})
			cm, err := cms.Create(ctx, cm, metav1.CreateOptions{})
			if err != nil {
				continue
			}
			cm.Annotations["seq"] = "2"
			stamp(key{name, "2"})
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				continue
			}
			stamp(key{name, ""})
			_ = cms.Delete(ctx, name, metav1.DeleteOptions{})
		}
	}()
	return func() map[string]float64 {
		mu.Lock()
		defer mu.Unlock()
		p50 := map[string]float64{}
		for t, ds := range got {
			slices.Sort(ds)
			p50[strings.ToLower(string(t))] = ds[len(ds)/2]
		}
		return p50
	}, nil
}
