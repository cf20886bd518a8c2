package main

import (
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
)

// countingProxy stands between one client and the apiserver and counts the
// client's requests. Unlike faultproxy, which speaks HTTP/1.1 so that it can
// cut one watch's connection, it speaks HTTP/2 as kube-apiserver does, so
// that a client holds all its watches as streams of one connection, as it
// does in a cluster: over HTTP/1.1 each watch is a TLS connection of its
// own, with two goroutines and its buffers, which a real client never pays.
type countingProxy struct {
	URL      string
	server   *http.Server
	requests atomic.Int64

	mu sync.Mutex
	// creates counts the ConfigMap creates in each namespace and keeps
	// when the latest came through: with a namespace per probe, one per
	// cycle, so the latest tells where the probe's cycles fall in the
	// interval.
	creates map[string]*createLog
}

type createLog struct {
	n      int
	latest time.Time
}

func newCountingProxy(upstream string, caPEM, certPEM, keyPEM []byte) (*countingProxy, error) {
	up, err := faultproxy.ParseUpstream(upstream, caPEM, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	target, pool := up.Target, up.RootCAs
	listener, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{up.Cert}, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		return nil, err
	}
	p := &countingProxy{URL: "https://" + listener.Addr().String(), creates: map[string]*createLog{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			ForceAttemptHTTP2: true,
			MaxIdleConns:      100,
		},
		FlushInterval: -1, // every watch event reaches the client at once
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.server = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		if r.Method == http.MethodPost {
			p.noteCreate(r.URL.Path)
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.server.Serve(listener) }()
	return p, nil
}

// Config returns a copy of base that talks to the apiserver through p.
func (p *countingProxy) Config(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Host = p.URL
	return cfg
}

func (p *countingProxy) Requests() int64 { return p.requests.Load() }

// noteCreate notes a create of a ConfigMap in its namespace, from a POST to
// /api/v1/namespaces/<ns>/configmaps.
func (p *countingProxy) noteCreate(path string) {
	ns, ok := strings.CutPrefix(path, "/api/v1/namespaces/")
	if !ok {
		return
	}
	if ns, ok = strings.CutSuffix(ns, "/configmaps"); !ok || strings.Contains(ns, "/") {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.creates[ns]
	if l == nil {
		l = &createLog{}
		p.creates[ns] = l
	}
	l.n++
	l.latest = now
}

// Creates is how many ConfigMap creates in ns came through, and when the
// latest did.
func (p *countingProxy) Creates(ns string) (int, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.creates[ns]; l != nil {
		return l.n, l.latest
	}
	return 0, time.Time{}
}

func (p *countingProxy) Close() error { return p.server.Close() }
