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
	for _, tc := range []struct {
		name string
		sync Sync
		want Verdict
	}{
		{"end bookmark", Sync{Bookmark: true, Took: 3 * time.Millisecond}, Verdict{Outcome: Synced}},
		{"end bookmark after events", Sync{Bookmark: true, Events: 2}, Verdict{Outcome: Synced}},
		{"no answer by the bound", Sync{Err: context.DeadlineExceeded, BoundPassed: true, Took: 5 * time.Second},
			Verdict{Outcome: Missed, Reason: metrics.WatchListNoResponse, Blocks: true}},
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
		{"a proxy's 400", Sync{Status: status(400, "bad request")}, Verdict{Outcome: Refused, Reason: metrics.WatchListRejected}},
		{"storage without progress notifications", Sync{Status: status(500, "a watch stream was requested by the client but the required storage feature RequestWatchProgress is disabled"), ErrorEvent: true},
			Verdict{Outcome: Refused, Reason: metrics.WatchListStorage}},
		{"cache initializing", Sync{Status: status(429, "storage is (re)initializing")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessCacheNotReady, Blocks: true}},
		{"conversion webhook, cache initializing", Sync{Status: status(429, `storage is (re)initializing: conversion webhook for example.com/v2, Kind=Gadget failed`)},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed, Blocks: true}},
		{"conversion webhook from etcd", Sync{Status: status(500, "conversion webhook for example.com/v2, Kind=Gadget failed"), ErrorEvent: true},
			Verdict{Outcome: Failed, Reason: metrics.FreshnessConversionFailed}},
		{"priority and fairness", Sync{Status: status(429, "Too many requests, please try again later.")}, Verdict{Outcome: Failed, Reason: metrics.FreshnessUnavailable}},
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
		if got := judgeSync(tc.sync); got != tc.want {
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
	} {
		if got := isStuck(tc.window); got != tc.want {
			t.Errorf("%s: stuck %v, want %v", tc.name, got, tc.want)
		}
	}
}
