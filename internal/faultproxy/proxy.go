// Package faultproxy is a TLS-terminating reverse proxy that sits between a
// test's client and the real kube-apiserver and breaks List-Watch on demand:
// it delays watch events, drops, duplicates or reorders chosen ones, stalls
// streams without closing them, and cuts live connections. The tests own
// the cluster's CA, so the proxy re-encrypts with a certificate the client
// already trusts, and the client cannot tell it is there.
//
// Watch streams are rewritten event by event, so the proxy asks the
// apiserver for JSON (one event per line) without compression: kube-apiserver
// 1.37 gzips WatchList responses when allowed, and a line reader would then
// wait for a newline that never comes. client-go decodes by the response's
// Content-Type, so the client is unaffected. Other requests pass untouched.
package faultproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Event is what a rule sees of one watch event.
type Event struct {
	Type      string // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Namespace string
	Name      string
}

// Match chooses the events a rule applies to.
type Match func(Event) bool

type action int

const (
	drop action = iota
	duplicate
	reorder
)

type rule struct {
	action action
	left   int
	match  Match
}

// Proxy is one running fault-injecting proxy.
type Proxy struct {
	// URL is the proxy's https://127.0.0.1:port address.
	URL string

	server   *http.Server
	listener net.Listener

	mu      sync.Mutex
	delay   time.Duration
	stalled chan struct{} // non-nil while stalled; closed on Resume
	rules   []*rule
	conns   map[net.Conn]struct{}
	applied map[action]int

	requests atomic.Int64
}

// New starts a proxy in front of upstream (an https URL served with a
// certificate signed by caPEM), serving certPEM/keyPEM itself.
func New(upstream string, caPEM, certPEM, keyPEM []byte) (*Proxy, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("faultproxy: no CA certificate in caPEM")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	p := &Proxy{conns: map[net.Conn]struct{}{}, applied: map[action]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
			if isWatch(r.In) {
				r.Out.Header.Set("Accept", "application/json")
				r.Out.Header.Del("Accept-Encoding")
			}
		},
		Transport: &http.Transport{
			TLSClientConfig:    &tls.Config{RootCAs: pool},
			DisableCompression: true,
			// One upstream connection per client request keeps a cut on the
			// client side from leaving a live upstream stream behind.
			DisableKeepAlives: true,
		},
		FlushInterval: -1, // every write reaches the client at once
		// A cut or an upstream restart is the point of this proxy; the
		// client sees the failure, so the default logging is noise.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
		ModifyResponse: func(resp *http.Response) error {
			if isWatch(resp.Request) && resp.StatusCode == http.StatusOK {
				resp.Body = p.rewrite(resp.Request.Context(), resp.Body)
			}
			return nil
		},
	}
	p.listener, err = tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"}, // one TCP connection per watch, so a cut is precise
	})
	if err != nil {
		return nil, err
	}
	p.URL = "https://" + p.listener.Addr().String()
	p.server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.requests.Add(1)
			rp.ServeHTTP(w, r)
		}),
		ConnState: func(c net.Conn, s http.ConnState) {
			p.mu.Lock()
			defer p.mu.Unlock()
			switch s {
			case http.StateNew:
				p.conns[c] = struct{}{}
			case http.StateClosed, http.StateHijacked:
				delete(p.conns, c)
			}
		},
	}
	go func() { _ = p.server.Serve(p.listener) }()
	return p, nil
}

// Config returns a copy of base that talks to the apiserver through the proxy.
func (p *Proxy) Config(base *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Host = p.URL
	return cfg
}

// Close stops the proxy and ends every connection through it.
func (p *Proxy) Close() error {
	p.Resume()
	return p.server.Close()
}

// SetDelay holds every watch event for d before passing it on. Events keep
// their order and spacing: each is released d after it arrived.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Stall stops passing watch bytes on, holding every stream open and silent,
// until Resume releases what was held.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume ends a Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
	p.mu.Unlock()
}

// CutConnections closes every client connection, as a network fault or a
// restarted load balancer would, without any HTTP goodbye.
func (p *Proxy) CutConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Drop swallows the next n watch events that match.
func (p *Proxy) Drop(n int, m Match) { p.addRule(drop, n, m) }

// Duplicate sends each of the next n matching watch events twice.
func (p *Proxy) Duplicate(n int, m Match) { p.addRule(duplicate, n, m) }

// Reorder holds each of the next n matching watch events back and sends it
// right after the event that follows it on the same stream.
func (p *Proxy) Reorder(n int, m Match) { p.addRule(reorder, n, m) }

// Requests counts the requests the proxy has received, so a benchmark can
// measure the load a client puts on the apiserver.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Applied reports how many drops, duplicates and reorders have been done,
// so a test can wait until its faults have really been injected.
func (p *Proxy) Applied() (drops, duplicates, reorders int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied[drop], p.applied[duplicate], p.applied[reorder]
}

func (p *Proxy) addRule(a action, n int, m Match) {
	p.mu.Lock()
	p.rules = append(p.rules, &rule{action: a, left: n, match: m})
	p.mu.Unlock()
}

// take returns the action of the first rule with faults left that matches
// ev, and uses one of its faults.
func (p *Proxy) take(ev Event) (action, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.left > 0 && r.match(ev) {
			r.left--
			p.applied[r.action]++
			return r.action, true
		}
	}
	return 0, false
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

type timedLine struct {
	data    []byte
	arrived time.Time
}

// rewrite returns the body the client reads instead of upstream: events go
// through the rules on one goroutine, and through delay and stall on another,
// so that a stalled or delayed writer never stops the reader from noticing
// the stream's end.
func (p *Proxy) rewrite(ctx context.Context, upstream io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	lines := make(chan timedLine, 4096)
	go func() {
		defer close(lines)
		defer upstream.Close()
		r := bufio.NewReaderSize(upstream, 64*1024)
		var held []byte
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				now := time.Now()
				emit := func(b []byte) { lines <- timedLine{b, now} }
				if held != nil {
					// The event after a held one passes untouched, so each
					// reorder is exactly one swap of two neighbours.
					emit(line)
					emit(held)
					held = nil
				} else if a, ok := p.take(parseEvent(line)); !ok {
					emit(line)
				} else {
					switch a {
					case drop:
					case duplicate:
						emit(line)
						emit(line)
					case reorder:
						held = line
					}
				}
			}
			if err != nil {
				if held != nil {
					lines <- timedLine{held, time.Now()}
				}
				return
			}
		}
	}()
	go func() {
		for l := range lines {
			p.mu.Lock()
			delay, stalled := p.delay, p.stalled
			p.mu.Unlock()
			if stalled != nil {
				select {
				case <-stalled:
				case <-ctx.Done():
				}
			}
			if wait := time.Until(l.arrived.Add(delay)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
				}
			}
			if _, err := pw.Write(l.data); err != nil {
				break
			}
		}
		pw.Close()
		for range lines { // let the reader finish
		}
	}()
	return pr
}

func parseEvent(line []byte) Event {
	var ev struct {
		Type   string `json:"type"`
		Object struct {
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		} `json:"object"`
	}
	_ = json.Unmarshal(line, &ev)
	return Event{Type: ev.Type, Namespace: ev.Object.Metadata.Namespace, Name: ev.Object.Metadata.Name}
}
