package freshness

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

const bound, timeout, queuedAfter = 3 * time.Second, 5 * time.Second, 300 * time.Millisecond

var lim = limits{bound: bound, timeout: timeout, queuedAfter: queuedAfter}

// apf is API Priority and Fairness's refusal (k8s.io/apiserver
// pkg/server/filters: tooManyRequests), in plain text.
var apf = Answer{Status: 429, Message: "Too many requests, please try again later."}

func TestJudgeCheck(t *testing.T) {
	ms := time.Millisecond
	// quick is a baseline as on a quiet apiserver.
	quick := Answer{Status: 200, Took: ms}
	for _, tc := range []struct {
		name    string
		a, base Answer
		want    Verdict
	}{
		{"fresh: the wait is the time over the baseline's", Answer{Status: 200, Took: 10 * ms}, quick, Verdict{Outcome: Fresh, Timed: true, Wait: 9 * ms}},
		{"just under the bound", Answer{Status: 200, Took: bound}, quick, Verdict{Outcome: Fresh, Timed: true, Wait: bound - ms}},
		{"at the bound: from etcd", Answer{Status: 200, Took: bound + ms}, quick, Verdict{Outcome: FellBack, Reason: metrics.FallbackBound, Timed: true, Wait: bound}},
		{"a baseline slower than the consistent LIST: no wait", Answer{Status: 200, Took: 2 * ms}, Answer{Status: 200, Took: 5 * ms}, Verdict{Outcome: Fresh, Timed: true}},
		// Without an answered baseline there is no wait: the round trip is
		// more than it, so within the bound the cache was fresh, past it
		// nothing can be told by time.
		{"no baseline answered, answered within the bound: fresh, not timed", Answer{Status: 200, Took: bound - ms}, Answer{Status: 500, Took: ms}, Verdict{Outcome: Fresh}},
		{"no baseline answered, answered past the bound: not judged by time", Answer{Status: 200, Took: bound}, Answer{Err: errors.New("connection reset by peer")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		// Both waited in the priority level's queue: the bound's time is
		// the queue's as much as the cache's.
		{"past the bound beside a queued baseline", Answer{Status: 200, Took: bound + time.Second}, Answer{Status: 200, Took: time.Second}, Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}},
		{"fresh beside a queued baseline", Answer{Status: 200, Took: time.Second}, Answer{Status: 200, Took: queuedAfter}, Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}},
		{"a baseline just under queued_after", Answer{Status: 200, Took: time.Second}, Answer{Status: 200, Took: queuedAfter - ms}, Verdict{Outcome: Fresh, Timed: true, Wait: 701 * ms}},
		{"priority and fairness refused the consistent LIST", apf, quick, Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}},
		{"priority and fairness refused the baseline", Answer{Status: 200, Took: bound + time.Second}, apf, Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}},
		// A LIST that ran out its timeout was admitted: priority and
		// fairness refuses one still queued at a quarter of it. Its time
		// went to the cache and etcd, whatever the baseline's queue.
		{"timed out beside a refused baseline", Answer{Err: context.DeadlineExceeded, Took: timeout}, apf, Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}},
		{"504 beside a queued baseline", Answer{Status: 504, Took: timeout}, Answer{Status: 200, Took: time.Second}, Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}},
		{"stream reset at the timeout beside a queued baseline", Answer{Err: errors.New("stream error: stream ID 63; INTERNAL_ERROR; received from peer"), Took: timeout}, Answer{Status: 200, Took: time.Second},
			Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}},
		{"skip-timeout fallback (a 429 timeout) beside a queued baseline", Answer{Status: 429, Message: "Timeout: Too large resource version: 42, current: 41"}, Answer{Status: 200, Took: time.Second},
			Verdict{Outcome: FellBack, Reason: metrics.FallbackTooManyRequests}},
		// What the apiserver states of the cache holds, however the
		// baseline fared.
		{"skip-timeout fallback", Answer{Status: 429, Message: "Too large resource version: 42, current: 41"}, quick, Verdict{Outcome: FellBack, Reason: metrics.FallbackTooManyRequests}},
		{"skip-timeout fallback beside a refused baseline", Answer{Status: 429, Message: "Too large resource version: 42, current: 41"}, apf, Verdict{Outcome: FellBack, Reason: metrics.FallbackTooManyRequests}},
		{"apiserver shutting down", Answer{Status: 429, Message: "apiserver cacher is stopped"}, quick, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"cache not ready", Answer{Status: 429, Message: "storage is (re)initializing"}, Answer{Status: 429, Message: "storage is (re)initializing"}, Verdict{Outcome: Failed, Reason: metrics.FreshnessCacheNotReady, Uncached: true}},
		// kube-apiserver 1.37's answer to a consistent LIST of a CRD's
		// version whose watch cache cannot convert an object stored in
		// another version (its conversion webhook answers 500; the object is
		// in another namespace): the cacher's last list error follows. It
		// names the webhook, but the cache is what failed the check.
		{"cache not ready behind a failing conversion webhook: the webhook named", Answer{Status: 429, Message: `storage is (re)initializing: failed to list <unspecified>: failed to read one or more gadgets.example.com from the storage: StorageError: corrupt object, Code: 7, Key: /registry/example.com/gadgets/elsewhere/g1, ResourceVersion: 0, AdditionalErrorMsg: object not decodable revision=221: conversion webhook for example.com/v1, Kind=Gadget failed: an error on the server ("conversion is broken") has prevented the request from succeeding`}, quick,
			Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Uncached: true}},
		{"apiserver timeout", Answer{Status: 504, Message: "Timeout: request did not complete within the allotted timeout"}, quick, Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}},
		{"client timeout", Answer{Err: context.DeadlineExceeded}, quick, Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}},
		{"timed out beside an unanswered baseline", Answer{Err: context.DeadlineExceeded, Took: timeout}, Answer{Err: context.DeadlineExceeded, Took: timeout},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"504 beside a baseline with no connection", Answer{Status: 504, Took: timeout}, Answer{Err: errors.New("dial tcp: connection refused")},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"refused", Answer{Err: errors.New("connect: connection refused")}, apf, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"stream reset before the timeout", Answer{Err: errors.New("stream error: stream ID 63; INTERNAL_ERROR; received from peer"), Took: timeout - ms}, quick, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"stream reset at the timeout", Answer{Err: errors.New("stream error: stream ID 63; INTERNAL_ERROR; received from peer"), Took: timeout}, quick, Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}},
		{"forbidden", Answer{Status: 403}, Answer{Status: 403}, Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}},
		{"forbidden beside a queued baseline", Answer{Status: 403}, Answer{Status: 200, Took: time.Second}, Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}},
		{"unauthorized", Answer{Status: 401}, quick, Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}},
		{"not served", Answer{Status: 404}, Answer{Status: 404}, Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}},
		{"conversion webhook, no cache: at once from etcd", Answer{Status: 500, Message: `conversion webhook for example.com/v1, Kind=Widget failed: Post "https://x": EOF`}, quick, Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed}},
		{"conversion webhook, from etcd after the wait at the bound", Answer{Status: 500, Message: `conversion webhook for example.com/v1, Kind=Widget failed: Post "https://x": EOF`, Took: bound + ms}, quick,
			Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Uncached: true}},
		{"conversion webhook, its round trip past the bound but its wait not", Answer{Status: 500, Message: `conversion webhook for example.com/v1, Kind=Widget failed: Post "https://x": EOF`, Took: bound + ms}, Answer{Status: 200, Took: 2 * ms},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed}},
		{"unavailable", Answer{Status: 503}, quick, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"other", Answer{Status: 500, Message: "etcdserver: request timed out"}, quick, Verdict{Outcome: Failed, Reason: metrics.FreshnessOther}},
	} {
		if got := judgeCheck(tc.a, tc.base, lim); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// Every reason is a value of its label: the series exist at zero.
	for _, s := range []int{0, 200, 401, 403, 404, 429, 500, 502, 503, 504, 418} {
		for _, base := range []Answer{quick, {Status: 200, Took: time.Second}, apf} {
			v := judgeCheck(Answer{Status: s, Took: time.Duration(s) * 10 * time.Millisecond}, base, lim)
			labels := map[Outcome][]string{FellBack: metrics.FallbackReasons, Failed: metrics.FreshnessErrorReasons, Queued: metrics.QueuedReasons}[v.Outcome]
			if v.Outcome != Fresh && !slices.Contains(labels, v.Reason) {
				t.Errorf("%d beside %+v: %s reason %q is not a label value", s, base, v.Outcome, v.Reason)
			}
		}
	}
}

func TestIsStuck(t *testing.T) {
	f, b, to, nr, fb := Verdict{Outcome: Fresh}, Verdict{Outcome: FellBack, Reason: metrics.FallbackBound},
		Verdict{Outcome: FellBack, Reason: metrics.FallbackTimeout}, Verdict{Outcome: Failed, Reason: metrics.FreshnessCacheNotReady, Uncached: true},
		Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}
	cf, quick := Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Uncached: true}, Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed}
	q, r := Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}, Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}
	for _, tc := range []struct {
		w    []Verdict
		want bool
	}{
		{nil, false},
		{[]Verdict{b, b}, false}, // too few to say
		{[]Verdict{b, b, b}, true},
		{[]Verdict{b, to, f}, true},
		{[]Verdict{b, f, f}, false},
		{[]Verdict{b, b, f, f}, false},          // half is not most
		{[]Verdict{nr, nr, nr}, true},           // a cache that never initializes
		{[]Verdict{cf, cf, nr}, true},           // nor can convert what it stores
		{[]Verdict{quick, quick, quick}, false}, // no cache: etcd's answer, at once
		{[]Verdict{fb, fb, b, b}, false},
		{[]Verdict{fb, b, b, b}, true}, // forbidden says nothing either way
		{[]Verdict{q, r, q, q}, false}, // a saturated priority level, a fresh cache
		{[]Verdict{q, q, b, f}, false}, // queued checks say nothing either way
		{[]Verdict{q, b, q, b, r, b}, true},
	} {
		if got := isStuck(tc.w); got != tc.want {
			t.Errorf("%v: stuck %v, want %v", tc.w, got, tc.want)
		}
	}
}

func TestJudgeRead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lost := time.Minute
	later := t0.Add(2 * lost)
	for _, tc := range []struct {
		name    string
		st      readState
		list    Listing
		markers []Marker
		now     time.Time
		want    map[string]int
		names   []string
	}{
		{name: "healthy: a live marker listed, a deleted one gone", list: Listing{RV: 20, Names: []string{"a"}},
			markers: []Marker{{Name: "a", Created: t0, RV: 20, RVAt: t0}, {Name: "b", Created: t0, RV: 10, RVAt: t0, Deleted: t0}}, now: later, want: map[string]int{}},
		{name: "back in time", st: readState{highest: 30}, list: Listing{RV: 25}, now: later, want: map[string]int{metrics.StaleBackInTime: 1}},
		{name: "stale: behind a write older than lost_after", list: Listing{RV: 19, Names: []string{"a"}},
			markers: []Marker{{Name: "a", Created: t0, RV: 20, RVAt: t0}}, now: later, want: map[string]int{metrics.StaleBehind: 1}},
		{name: "behind an update acknowledged a moment ago, of a marker created long ago, is not stale", list: Listing{RV: 19, Names: []string{"a"}},
			markers: []Marker{{Name: "a", Created: t0, RV: 20, RVAt: later.Add(-time.Second)}}, now: later, want: map[string]int{}},
		{name: "behind a recent write is not stale", list: Listing{RV: 19, Names: []string{"a"}},
			markers: []Marker{{Name: "a", Created: t0, RV: 20, RVAt: t0}}, now: t0.Add(lost), want: map[string]int{}},
		{name: "ghost", list: Listing{RV: 40, Names: []string{"b"}},
			markers: []Marker{{Name: "b", Created: t0, RV: 10, RVAt: t0, Deleted: t0}}, now: later, want: map[string]int{metrics.StaleGhost: 1}, names: []string{"b"}},
		{name: "a recently deleted marker still listed is no ghost", list: Listing{RV: 40, Names: []string{"b"}},
			markers: []Marker{{Name: "b", Created: t0, RV: 10, RVAt: t0, Deleted: t0}}, now: t0.Add(lost), want: map[string]int{}},
		{name: "missing", list: Listing{RV: 40},
			markers: []Marker{{Name: "c", Created: t0, RV: 10, RVAt: t0}}, now: later, want: map[string]int{metrics.StaleMissing: 1}, names: []string{"c"}},
		{name: "listed once, then gone (deleted by cleanup): not missing", st: readState{seen: map[string]bool{"c": true}}, list: Listing{RV: 40},
			markers: []Marker{{Name: "c", Created: t0, RV: 10, RVAt: t0}}, now: later, want: map[string]int{}},
		{name: "counted once", st: readState{counted: map[string]string{"b": metrics.StaleGhost}}, list: Listing{RV: 40, Names: []string{"b"}},
			markers: []Marker{{Name: "b", Created: t0, RV: 10, RVAt: t0, Deleted: t0}}, now: later, want: map[string]int{}},
	} {
		st := tc.st
		if st.seen == nil {
			st.seen = map[string]bool{}
		}
		if st.counted == nil {
			st.counted = map[string]string{}
		}
		v := judgeRead(&st, tc.list, tc.markers, tc.now, lost)
		for _, k := range metrics.StaleKinds {
			if got := findings(v, k); got != tc.want[k] {
				t.Errorf("%s: %s %d, want %d", tc.name, k, got, tc.want[k])
			}
		}
		var names []string
		for _, n := range v.Names {
			if n != "" {
				names = append(names, n)
			}
		}
		if !slices.Equal(names, tc.names) {
			t.Errorf("%s: markers %v, want %v", tc.name, names, tc.names)
		}
		if st.highest < tc.list.RV {
			t.Errorf("%s: highest %d below the list's %d", tc.name, st.highest, tc.list.RV)
		}
	}
	// A ghost is counted once however many lists still show it.
	st := newReadState()
	m := []Marker{{Name: "b", Created: t0, RV: 10, RVAt: t0, Deleted: t0}}
	total := 0
	for i := range 3 {
		total += findings(judgeRead(st, Listing{RV: uint64(40 + i), Names: []string{"b"}}, m, later, lost), metrics.StaleGhost)
	}
	if total != 1 {
		t.Errorf("ghost counted %d times over three lists, want once", total)
	}
}

// findings is how many findings of kind v has.
func findings(v ReadVerdict, kind string) int {
	n := 0
	for _, k := range v.Kinds {
		if k == kind {
			n++
		}
	}
	return n
}
