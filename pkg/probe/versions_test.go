package probe

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// What differs between the kube-apiserver releases of the supported range
// (docs/compatibility.md), each pinned to the releases it holds for. `make
// compat` runs these against every release; `make test` against 1.37.

// kubeMinor is the minor release of c's kube-apiserver: 34 for v1.34.4.
func kubeMinor(t *testing.T, c *localcluster.Cluster) int {
	t.Helper()
	v, err := c.KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		t.Fatalf("kube-apiserver version %q", v)
	}
	minor, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("kube-apiserver version %q: %v", v, err)
	}
	return minor
}

// servesWatchList says whether c's kube-apiserver serves WatchList with
// its defaults (kube.ServerVersion.WatchListByDefault), as the clusters
// the tests start leave every feature gate.
func servesWatchList(t *testing.T, c *localcluster.Cluster) bool {
	t.Helper()
	return kube.ServerVersion{Major: 1, Minor: kubeMinor(t, c)}.WatchListByDefault()
}

// kube-apiserver 1.37 compresses a WatchList stream when the client accepts
// gzip (its WatchListCompression gate, on from 1.37); 1.34 to 1.36 never do.
// The exporter reads either: Go's transport asks for gzip and inflates the
// body below client-go, and the exporter's own stream observer sees only
// how the body ends (TestEveryWriteObservedOnEveryPath, WatchList by
// default, passes on every release). What this changes is anything that
// reads a watch stream's bytes in between, as the tests' fault proxy does:
// it must strip Accept-Encoding, or it waits on compressed bytes for a
// newline from 1.37 on.
func TestWatchListCompressedFrom137(t *testing.T) {
	ns := "watchlist-encoding"
	inNamespace(t, ns)
	want := ""
	if kubeMinor(t, cluster) >= 37 {
		want = "gzip"
	}
	hc, err := rest.HTTPClientFor(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := cluster.APIServerURL + "/api/v1/namespaces/" + ns + "/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Set by hand, Accept-Encoding turns off the transport's transparent
	// inflation, so the answer's Content-Encoding is what the server sent.
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !servesWatchList(t, cluster) {
		// 1.31 and 1.33 refuse WatchList by default, before any stream.
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(body), "WatchList feature gate") {
			t.Errorf("kube-apiserver 1.%d, its WatchList gate off by default: answered %s: %s; want 422 naming the gate", kubeMinor(t, cluster), resp.Status, body)
		}
		return
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("WatchList answered %s: %s", resp.Status, body)
	}
	if got := resp.Header.Get("Content-Encoding"); got != want {
		t.Errorf("kube-apiserver 1.%d: WatchList Content-Encoding %q, want %q", kubeMinor(t, cluster), got, want)
	}
}

// From 1.36 kube-apiserver's /readyz waits for its watch caches (the
// storage-readiness post-start hook, WatchCacheInitializationPostStartHook,
// on from 1.36); 1.34 and 1.35 report ready before them. A watch or list
// that reaches a cache still initializing is answered 429 ("storage is
// (re)initializing", with Retry-After) on every release, and the exporter
// counts every 429 in watchprobe_requests_throttled_total. So on 1.34 and
// 1.35, behind a load balancer that follows /readyz, the probe can meet
// such 429s right after an apiserver restarts, where from 1.36 the balancer
// holds it back: a limit docs/compatibility.md states.
func TestReadyzWaitsForWatchCachesFrom136(t *testing.T) {
	adminClient(t)
	hc, err := rest.HTTPClientFor(cluster.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cluster.APIServerURL + "/readyz?verbose")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	minor := kubeMinor(t, cluster)
	waits := strings.Contains(string(body), "[+]poststarthook/storage-readiness ok")
	if want := minor >= 36; waits != want {
		t.Errorf("kube-apiserver 1.%d: /readyz checks storage-readiness: %t, want %t\n%s", minor, waits, want, body)
	}
}
