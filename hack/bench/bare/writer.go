package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// writer runs probe i's cycles: create, updates, delete, every interval,
// each write carrying the next sequence number as the exporter's do.
func (c *client) writer(ctx context.Context, i int, runID string) {
	cms := c.configMaps(i)
	ticker := time.NewTicker(c.o.interval)
	defer ticker.Stop()
	var seq uint64
	lbls := map[string]string{labelManagedBy: managedBy, labelProbe: probeName(i), labelReplica: "bare"}
	for n := 1; ctx.Err() == nil; n++ {
		seq++
		name := fmt.Sprintf("bare-%s-%s-%d", probeName(i), runID, n)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: name, Labels: lbls, Annotations: map[string]string{annotationSeq: strconv.FormatUint(seq, 10)},
		}}
		err := c.write(i, watch.Added, name, seq, func() (err error) {
			cm, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			return err
		})
		if err == nil {
			for range c.o.updates {
				seq++
				cm.Annotations[annotationSeq] = strconv.FormatUint(seq, 10)
				err := c.write(i, watch.Modified, name, seq, func() error {
					updated, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
					if err == nil {
						cm = updated
					}
					return err
				})
				if err != nil {
					break
				}
			}
			seq++
			_ = c.write(i, watch.Deleted, name, 0, func() error {
				return cms.Delete(ctx, name, metav1.DeleteOptions{})
			})
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
}

// write makes one write of probe's, stamped for the series if kept, and
// counts it. A delete is stamped with seq 0: its event carries the seq of
// the write before.
func (c *client) write(probe int, ev watch.EventType, name string, seq uint64, do func() error) error {
	var sent time.Time
	if c.series != nil {
		sent = c.series.sent(probe, name, seq)
	}
	err := do()
	if c.series != nil {
		c.series.wrote(probe, ev, time.Since(sent), err)
	}
	c.writes.Add(1)
	return err
}
