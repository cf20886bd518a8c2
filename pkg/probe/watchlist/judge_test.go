package watchlist

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

func TestJudge(t *testing.T) {
	status := func(code int32, msg string) *metav1.Status { return &metav1.Status{Code: code, Message: msg} }
	tooLarge := &metav1.Status{Code: 504, Reason: metav1.StatusReasonTimeout, Message: "Too large resource version: 120, current: 118",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}}}
	apfStatus := &metav1.Status{Code: 429, Reason: metav1.StatusReasonTooManyRequests, Message: "the server has received too many requests and has asked us to try again later",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "Too many requests, please try again later."}}}}
	for _, tc := range []struct {
		name string
		sync Sync
		want Verdict
	}{
		{"end bookmark", Sync{Bookmark: true, Took: 3 * time.Millisecond}, Verdict{Outcome: Synced}},
		{"end bookmark after events", Sync{Bookmark: true, Events: 2}, Verdict{Outcome: Synced}},
		{"no answer by the bound", Sync{Err: context.DeadlineExceeded, BoundPassed: true, Sent: true, Took: 5 * time.Second},
			Verdict{Outcome: Missed, Reason: metrics.WatchListNoResponse, Blocks: true}},
		// No connection took the request: no apiserver was asked.
		{"not sent by the bound", Sync{Err: context.DeadlineExceeded, BoundPassed: true, Took: 5 * time.Second},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"stream open, no end bookmark by the bound", Sync{Took: 5 * time.Second}, Verdict{Outcome: Missed, Reason: metrics.WatchListNoBookmark, Blocks: true}},
		{"stream open, events but no end bookmark", Sync{Events: 3, Took: 5 * time.Second}, Verdict{Outcome: Missed, Reason: metrics.WatchListNoBookmark, Blocks: true}},
		{"ended after a second", Sync{Ended: true, Took: 2 * time.Second}, Verdict{Outcome: Missed, Reason: metrics.WatchListEnded, Blocks: true}},
		{"ended at once after an event", Sync{Ended: true, Events: 1, Took: time.Millisecond}, Verdict{Outcome: Missed, Reason: metrics.WatchListEnded, Blocks: true}},
		// client-go's "very short watch": informers list instead.
		{"ended at once, empty", Sync{Ended: true, Took: 10 * time.Millisecond}, Verdict{Outcome: Refused, Reason: metrics.WatchListClosed}},
		{"cache not fresh in the apiserver's 3s", Sync{Status: tooLarge, ErrorEvent: true, Took: 3 * time.Second},
			Verdict{Outcome: Missed, Reason: metrics.WatchListCacheBehind, Blocks: true}},
		{"too large resource version by message alone", Sync{Status: status(504, "Too large resource version: 5, current: 4"), ErrorEvent: true},
			Verdict{Outcome: Missed, Reason: metrics.WatchListCacheBehind, Blocks: true}},
		{"WatchList gate off", Sync{Status: status(422, `ListOptions.meta.k8s.io "" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled`)},
			Verdict{Outcome: Refused, Reason: metrics.WatchListRejected}},
		{"before 1.27", Sync{Status: status(422, `ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch`)},
			Verdict{Outcome: Refused, Reason: metrics.WatchListRejected}},
		// A 400 that names no WatchList option says nothing of WatchList.
		{"a proxy's 400", Sync{Status: status(400, "bad request")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessOther}},
		{"field selector refused", Sync{Status: status(400, `"metadata.name" is not a known field selector: only "spec.node"`)}, Verdict{Outcome: Failed, Reason: metrics.FreshnessOther}},
		{"storage without progress notifications", Sync{Status: status(500, "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled"), ErrorEvent: true},
			Verdict{Outcome: Refused, Reason: metrics.WatchListStorage}},
		{"cache initializing", Sync{Status: status(429, "storage is (re)initializing")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessCacheNotReady, Blocks: true}},
		{"conversion webhook, cache initializing", Sync{Status: status(429, `storage is (re)initializing: conversion webhook for example.com/v2, Kind=Gadget failed`)},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Blocks: true}},
		{"conversion webhook from etcd", Sync{Status: status(500, "conversion webhook for example.com/v2, Kind=Gadget failed"), ErrorEvent: true},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed}},
		{"priority and fairness", Sync{Status: status(429, "Too many requests, please try again later.")}, Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}},
		// As client-go reports the plain-text 429: a generic message, the
		// text as the cause.
		{"priority and fairness through client-go", Sync{Status: apfStatus}, Verdict{Outcome: Queued, Reason: metrics.QueuedRejected}},
		{"another 429", Sync{Status: status(429, "apiserver cacher is stopped")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"forbidden", Sync{Status: status(403, "forbidden")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}},
		{"unauthorized", Sync{Status: status(401, "Unauthorized")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}},
		{"not served", Sync{Status: status(404, "the server could not find the requested resource")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessNotFound}},
		{"an ERROR event 500", Sync{Status: status(500, "etcdserver: request timed out"), ErrorEvent: true}, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		// Only an answer's 422 is the request refused; in a stream it is
		// something else.
		{"an ERROR event 422", Sync{Status: status(422, "invalid"), ErrorEvent: true}, Verdict{Outcome: Failed, Reason: metrics.FreshnessOther}},
		{"a 504 answer", Sync{Status: status(504, "gateway timeout")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"a 410 event", Sync{Status: status(410, "too old resource version"), ErrorEvent: true}, Verdict{Outcome: Failed, Reason: metrics.FreshnessOther}},
		{"connection refused", Sync{Err: errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
	} {
		if got := judgeWatchList(tc.sync); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// The baseline sent before each sync tells the exporter's own queue: a
// baseline held or refused makes the sync queued (its WatchList not sent),
// one that reached no apiserver makes it unavailable, and a slow one makes
// a verdict that rests on the sync's time queued; a verdict the apiserver
// states holds.
func TestJudgeBaseline(t *testing.T) {
	const queuedAfter = 300 * time.Millisecond
	fast := Baseline{Answered: true, Sent: true, Took: time.Millisecond}
	slow := Baseline{Answered: true, Sent: true, Took: 2 * time.Second}
	apf := &metav1.Status{Code: 429, Message: "the server has received too many requests and has asked us to try again later",
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{Type: metav1.CauseTypeUnexpectedServerResponse, Message: "Too many requests, please try again later."}}}}
	synced := Sync{Bookmark: true, Sent: true, Took: 4 * time.Second}
	noResponse := Sync{Err: context.DeadlineExceeded, BoundPassed: true, Sent: true, Took: 5 * time.Second}
	queued := func(reason string) Verdict { return Verdict{Outcome: Queued, Reason: reason} }
	for _, tc := range []struct {
		name string
		sync Sync
		base Baseline
		want Verdict
	}{
		{"fast baseline, synced", synced, fast, Verdict{Outcome: Synced}},
		{"fast baseline, no response", noResponse, fast, missed(metrics.WatchListNoResponse)},
		{"fast baseline, no bookmark", Sync{Sent: true, Took: 5 * time.Second}, fast, missed(metrics.WatchListNoBookmark)},
		{"slow baseline, synced", synced, slow, queued(metrics.QueuedWaited)},
		{"slow baseline, no response", noResponse, slow, queued(metrics.QueuedWaited)},
		{"slow baseline, no bookmark", Sync{Sent: true, Took: 5 * time.Second}, slow, queued(metrics.QueuedWaited)},
		{"baseline just under queued_after", noResponse, Baseline{Answered: true, Sent: true, Took: queuedAfter - time.Millisecond}, missed(metrics.WatchListNoResponse)},
		// What the apiserver states holds, whatever the queue.
		{"slow baseline, cache behind", Sync{Sent: true, ErrorEvent: true, Status: &metav1.Status{Code: 504, Message: "Too large resource version: 5, current: 4"}}, slow,
			missed(metrics.WatchListCacheBehind)},
		{"slow baseline, gate off", Sync{Sent: true, Status: &metav1.Status{Code: 422, Message: "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}}, slow,
			Verdict{Outcome: Refused, Reason: metrics.WatchListRejected}},
		{"slow baseline, stream ended", Sync{Sent: true, Ended: true, Events: 1, Took: 2 * time.Second}, slow, missed(metrics.WatchListEnded)},
		// The WatchList not sent.
		{"baseline refused by priority and fairness", Sync{}, Baseline{Answered: true, Sent: true, Status: apf}, queued(metrics.QueuedRejected)},
		{"baseline held past the bound", Sync{}, Baseline{Err: context.DeadlineExceeded, BoundPassed: true, Sent: true, Took: 5 * time.Second}, queued(metrics.QueuedWaited)},
		{"baseline without a connection by the bound", Sync{}, Baseline{Err: context.DeadlineExceeded, BoundPassed: true, Took: 5 * time.Second},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		{"baseline connection refused", Sync{}, Baseline{Err: errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
		// A baseline answered with another failure: the WatchList is judged.
		{"baseline forbidden", Sync{Sent: true, Status: &metav1.Status{Code: 403, Message: "forbidden"}}, Baseline{Answered: true, Sent: true, Status: &metav1.Status{Code: 403}},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}},
	} {
		if got := judgeSync(tc.sync, tc.base, queuedAfter); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestIsStuck(t *testing.T) {
	ok := Verdict{Outcome: Synced}
	miss := Verdict{Outcome: Missed, Reason: metrics.WatchListNoBookmark, Blocks: true}
	notReady := Verdict{Outcome: Failed, Reason: metrics.FreshnessCacheNotReady, Blocks: true}
	refused := Verdict{Outcome: Refused, Reason: metrics.WatchListRejected}
	forbidden := Verdict{Outcome: Failed, Reason: metrics.FreshnessForbidden}
	queued := Verdict{Outcome: Queued, Reason: metrics.QueuedWaited}
	for _, tc := range []struct {
		name   string
		window []Verdict
		want   bool
	}{
		{"empty", nil, false},
		{"two misses are too few", []Verdict{miss, miss}, false},
		{"three misses", []Verdict{miss, miss, miss}, true},
		{"two of three", []Verdict{ok, miss, miss}, true},
		{"half is not most", []Verdict{ok, ok, miss, miss}, false},
		{"a cache that cannot initialize counts", []Verdict{ok, notReady, miss}, true},
		// Refusals and other failures say nothing either way.
		{"refused left out", []Verdict{refused, refused, refused, miss, miss, ok}, true},
		{"refused alone is not stuck", []Verdict{refused, refused, refused}, false},
		{"forbidden left out", []Verdict{forbidden, miss, forbidden, miss}, false},
		{"forbidden does not dilute", []Verdict{forbidden, miss, forbidden, miss, miss, ok}, true},
		// The exporter's own queue says nothing either way.
		{"queued alone is not stuck", []Verdict{queued, queued, queued}, false},
		{"queued does not dilute", []Verdict{queued, miss, queued, miss, miss, ok}, true},
	} {
		if got := isStuck(tc.window); got != tc.want {
			t.Errorf("%s: stuck %v, want %v", tc.name, got, tc.want)
		}
	}
}
