package main

import (
	"fmt"
	"slices"
	"time"
)

// startOnSchedule starts the bare client's probes on the exporter's
// schedule: each probe's cycles a whole number of intervals after those of
// the exporter's probe of the same number, as its creates come through the
// exporter's proxy. Each exporter probe begins once its own paths have
// synced, so its probes' writes are spread over part of the interval; a
// bare client beginning all at once would write in one burst per interval
// and pay less for the same writes (one wakeup serves every event pending),
// and the CPU ratio would then depend on how spread the exporter's start
// happened to be. The phases are read from each probe's second create,
// past the queue of start-up.
func startOnSchedule(bare *bareClient, proxy *countingProxy, ns string, load costLoad) error {
	phases := make([]time.Time, load.probes)
	within := 3*load.interval + time.Minute
	deadline := time.Now().Add(within)
	for i := range phases {
		for {
			if n, latest := proxy.Creates(probeNamespace(ns, i)); n >= 2 {
				phases[i] = latest
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("exporter probe p%d did not write twice within %s of being ready", i, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return bare.start(phases)
}

// scheduleCheck compares, at the end of a window, where in the interval
// each probe's latest create fell for the exporter and for the bare client,
// and says how far apart they were: the schedules match if the differences
// are small against the spread.
func scheduleCheck(c *cost, proxy, bareProxy *countingProxy, ns string, load costLoad) {
	var exporter, bare []time.Time
	var diffs []time.Duration
	for i := range load.probes {
		_, e := proxy.Creates(probeNamespace(ns, i))
		_, b := bareProxy.Creates(probeNamespace(ns+"-bare", i))
		if e.IsZero() || b.IsZero() {
			return
		}
		exporter, bare = append(exporter, e), append(bare, b)
		d := inInterval(b.Sub(e), load.interval)
		diffs = append(diffs, min(d, load.interval-d))
	}
	slices.Sort(diffs)
	c.phases = exporter
	c.ScheduleSpreadSeconds = spread(exporter, load.interval).Seconds()
	c.Bare.ScheduleSpreadSeconds = spread(bare, load.interval).Seconds()
	c.PhaseDiffMedianSeconds = diffs[len(diffs)/2].Seconds()
	c.PhaseDiffMaxSeconds = diffs[len(diffs)-1].Seconds()
	if c.PhaseDiffMaxSeconds > 0 || c.ScheduleSpreadSeconds > 0 {
		fmt.Printf("   %d probes: in the window the exporter's probes created their markers within %s of each interval, the bare client's within %s; each bare probe %s from the exporter's at the median, %s at most\n",
			load.probes, seconds(c.ScheduleSpreadSeconds), seconds(c.Bare.ScheduleSpreadSeconds), seconds(c.PhaseDiffMedianSeconds), seconds(c.PhaseDiffMaxSeconds))
	}
}

// inInterval is d modulo interval, in [0, interval).
func inInterval(d, interval time.Duration) time.Duration { return (d%interval + interval) % interval }

// spread is the shortest part of an interval that holds every phase: the
// interval less the longest gap between two phases in a row, around it.
func spread(phases []time.Time, interval time.Duration) time.Duration {
	if len(phases) < 2 {
		return 0
	}
	offsets := make([]time.Duration, len(phases))
	for i, t := range phases {
		offsets[i] = inInterval(t.Sub(phases[0]), interval)
	}
	slices.Sort(offsets)
	gap := offsets[0] + interval - offsets[len(offsets)-1]
	for i := 1; i < len(offsets); i++ {
		gap = max(gap, offsets[i]-offsets[i-1])
	}
	return (interval - gap).Round(time.Millisecond)
}
