// Package faultproxy is a TLS-terminating reverse proxy that sits between a
// test's client and the real kube-apiserver and breaks List-Watch on demand:
// it delays watch events, drops, duplicates or reorders chosen ones, stalls
// streams without closing them, and cuts live connections. The tests own
// the cluster's CA, so the proxy re-encrypts with a certificate the client
// already trusts, and the client cannot tell it is there.
//
// It can also answer requests itself: 429 Too Many Requests with
// Retry-After, as API Priority and Fairness does, or not at all after the
// apiserver has committed them, as a lost response does, or with a 500 and
// Retry-After after it has, as an etcd timeout does.
//
// Stalls, delays and cuts can be limited to the watch streams a
// RequestMatch chooses, so that a test whose client sends its writes and
// several watches through one proxy faults one watch and nothing else. Every
// fault applied is recorded (Records), with the event or request it hit, so
// that a test compares what it measured with what was done rather than with
// what it asked for.
//
// Watch streams are rewritten event by event, so the proxy asks the
// apiserver for JSON (one event per line) without compression: kube-apiserver
// 1.37 gzips WatchList responses when allowed, and a line reader would then
// wait for a newline that never comes. client-go decodes by the response's
// Content-Type, so the client is unaffected. Other requests pass untouched.
package faultproxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Event is what a rule sees of one watch event.
type Event struct {
	Type            string // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Namespace       string
	Name            string
	ResourceVersion string
	// InitialEventsEnd: a BOOKMARK annotated k8s.io/initial-events-end,
	// the end of a WatchList's initial events.
	InitialEventsEnd bool
}

// Match chooses the events a rule applies to.
type Match func(Event) bool

// Request is what a rule sees of one request.
type Request struct {
	Kind      string // list, watch, get, create, update, patch, delete
	Namespace string
	Name      string // the object's, for a request about one object
	// WatchList: a watch that asks for initial events (sendInitialEvents=true),
	// as client-go's informers list.
	WatchList bool
	// UserAgent is the request's User-Agent header.
	UserAgent string
}

// RequestMatch chooses the requests a rule applies to.
type RequestMatch func(Request) bool

// Fault is a kind of fault the proxy injects.
type Fault int

const (
	Drop Fault = iota
	Duplicate
	Reorder
	Expire
	Throttle
	Refuse
	LoseResponse
	CutAtEnd
	EndAfter
	Hold
	CommitThenRetry
	// Stall, Delay and Cut are recorded per event held (Stall, Delay) and
	// per stream cut (Cut); they are set with StallStreams, DelayStreams
	// and CutStreams (and Stall, SetDelay for every stream).
	Stall
	Delay
	Cut
)

var faultNames = [...]string{"drop", "duplicate", "reorder", "expire", "throttle", "refuse", "lose-response",
	"cut-at-end", "end-after", "hold", "commit-then-retry", "stall", "delay", "cut"}

func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("fault(%d)", int(f))
}

// Record is one fault the proxy applied.
type Record struct {
	Fault Fault
	At    time.Time
	// Request is the request the fault hit, or the watch request whose
	// stream carried the event it hit.
	Request Request
	// Event is the watch event the fault hit (Drop, Duplicate, Reorder,
	// Expire, EndAfter), or held (Stall, Delay); zero for request faults.
	Event Event
	// Held is how long a stalled or delayed event was kept from the
	// client, by the fault or behind an event it held: from its arrival
	// from the apiserver to its write towards the client, a part of its
	// delivery's latency. Every event so held is recorded; one that is not
	// was passed on as it came.
	Held time.Duration
}

type rule struct {
	fault    Fault
	left     int
	match    Match
	matchReq RequestMatch
	code     int // Refuse's status code
}

// Proxy is one running fault-injecting proxy.
type Proxy struct {
	// URL is the proxy's https://127.0.0.1:port address.
	URL string

	server   *http.Server
	listener net.Listener

	mu         sync.Mutex
	delay      time.Duration
	delayMatch RequestMatch  // the streams delay applies to; nil: every one
	stalled    chan struct{} // non-nil while stalled; closed on Resume
	stallMatch RequestMatch  // the streams stalled; nil: every one
	changed    chan struct{} // closed and replaced when a stall or delay changes
	rules      []*rule
	conns      map[net.Conn]struct{}
	streams    map[*stream]struct{} // watch responses being passed on
	applied    map[Fault]int
	records    []Record

	requests atomic.Int64

	released    chan struct{} // closed by Release
	releaseOnce sync.Once
}

// Upstream is what a proxy in front of an apiserver needs to reach it and
// to serve in its stead.
type Upstream struct {
	Target *url.URL
	// RootCAs trusts the apiserver's serving certificate.
	RootCAs *x509.CertPool
	// Cert is the proxy's own serving certificate.
	Cert tls.Certificate
}

// ParseUpstream reads upstream (an https URL served with a certificate
// signed by caPEM) and the proxy's own certPEM/keyPEM.
func ParseUpstream(upstream string, caPEM, certPEM, keyPEM []byte) (Upstream, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return Upstream{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Upstream{}, errors.New("no CA certificate in caPEM")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return Upstream{}, err
	}
	return Upstream{Target: target, RootCAs: pool, Cert: cert}, nil
}

// New starts a proxy in front of upstream (an https URL served with a
// certificate signed by caPEM), serving certPEM/keyPEM itself.
func New(upstream string, caPEM, certPEM, keyPEM []byte) (*Proxy, error) {
	return newProxy(upstream, caPEM, certPEM, keyPEM, []string{"http/1.1"})
}

// NewHTTP2 is New for a proxy that also serves HTTP/2, as kube-apiserver
// does: a client-go client then sends all its requests over one
// connection, its watches too, as it does to an apiserver. A cut (CutStreams,
// CutConnections) then ends every request of that connection.
func NewHTTP2(upstream string, caPEM, certPEM, keyPEM []byte) (*Proxy, error) {
	return newProxy(upstream, caPEM, certPEM, keyPEM, []string{"h2", "http/1.1"})
}

func newProxy(upstream string, caPEM, certPEM, keyPEM []byte, protos []string) (*Proxy, error) {
	up, err := ParseUpstream(upstream, caPEM, certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	target, pool, cert := up.Target, up.RootCAs, up.Cert
	p := &Proxy{conns: map[net.Conn]struct{}{}, streams: map[*stream]struct{}{}, applied: map[Fault]int{},
		changed: make(chan struct{}), released: make(chan struct{})}
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
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if errors.Is(err, errLoseResponse) {
				// Abort: the server closes the connection, no response.
				panic(http.ErrAbortHandler)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Request.Context().Value(loseKey{}) != nil {
				return errLoseResponse // the apiserver has done the work
			}
			if resp.Request.Context().Value(retryKey{}) != nil {
				// The apiserver has done the work; the client hears what
				// it answers when etcd does not answer in time.
				_ = resp.Body.Close()
				b := statusBody(http.StatusInternalServerError, "Timeout", "The request did not complete in time (faultproxy); please try again")
				resp.StatusCode, resp.Status = http.StatusInternalServerError, "500 Internal Server Error"
				resp.Header = http.Header{"Content-Type": {"application/json"}, "Retry-After": {"1"}}
				resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
				return nil
			}
			if isWatch(resp.Request) && resp.StatusCode == http.StatusOK {
				conn, _ := resp.Request.Context().Value(connKey{}).(net.Conn)
				resp.Body = p.rewrite(resp.Request.Context(), &stream{req: describe(resp.Request), conn: conn}, resp.Body)
			}
			return nil
		},
	}
	p.listener, err = tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   protos, // http/1.1 alone: one TCP connection per watch, so a cut is precise
	})
	if err != nil {
		return nil, err
	}
	p.URL = "https://" + p.listener.Addr().String()
	p.server = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.requests.Add(1)
			req := describe(r)
			if p.takeRequest(Hold, req) != nil {
				select {
				case <-p.released:
				case <-r.Context().Done():
					return
				}
			}
			if p.takeRequest(Throttle, req) != nil {
				// As API Priority and Fairness rejects a request.
				w.Header().Set("Retry-After", "1")
				writeStatus(w, http.StatusTooManyRequests, "TooManyRequests", "Too many requests, please try again later.")
				return
			}
			if r := p.takeRequest(Refuse, req); r != nil {
				writeStatus(w, r.code, "", "refused by faultproxy")
				return
			}
			if p.takeRequest(LoseResponse, req) != nil {
				r = r.WithContext(context.WithValue(r.Context(), loseKey{}, true))
			}
			if p.takeRequest(CommitThenRetry, req) != nil {
				r = r.WithContext(context.WithValue(r.Context(), retryKey{}, true))
			}
			rp.ServeHTTP(w, r)
		}),
		// A stream's connection, so that CutStreams can cut that one alone.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
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
func (p *Proxy) SetDelay(d time.Duration) { p.DelayStreams(d, nil) }

// DelayStreams is SetDelay for the watch streams whose requests m matches
// (nil: every stream); the others pass at once. A delay of 0 ends it: what
// is held is released at once, in order. Each event held is recorded
// (Delay).
func (p *Proxy) DelayStreams(d time.Duration, m RequestMatch) {
	p.mu.Lock()
	p.delay, p.delayMatch = d, m
	p.changeHold()
	p.mu.Unlock()
}

// Stall stops passing watch bytes on, holding every stream open and silent,
// until Resume releases what was held.
func (p *Proxy) Stall() { p.StallStreams(nil) }

// StallStreams is Stall for the watch streams whose requests m matches
// (nil: every stream), open now or opened until Resume; the others flow.
// Each event held is recorded (Stall) when it is released.
func (p *Proxy) StallStreams(m RequestMatch) {
	p.mu.Lock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
	p.stallMatch = m
	p.changeHold()
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

// CutStreams closes the client connection of every open watch stream whose
// request m matches, as CutConnections does to every connection, and
// returns how many it cut; each is recorded (Cut). Other requests, writes
// among them, run on connections of their own and are not touched: the
// proxy speaks HTTP/1.1 only, one request at a time per connection.
func (p *Proxy) CutStreams(m RequestMatch) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.streams {
		if s.conn == nil || !m(s.req) {
			continue
		}
		_ = s.conn.Close()
		delete(p.streams, s)
		p.applied[Cut]++
		p.records = append(p.records, Record{Fault: Cut, At: time.Now(), Request: s.req})
		n++
	}
	return n
}

// Drop swallows the next n watch events that match.
func (p *Proxy) Drop(n int, m Match) { p.addRule(&rule{fault: Drop, left: n, match: m}) }

// Duplicate sends each of the next n matching watch events twice.
func (p *Proxy) Duplicate(n int, m Match) { p.addRule(&rule{fault: Duplicate, left: n, match: m}) }

// Reorder holds each of the next n matching watch events back and sends it
// right after the event that follows it on the same stream.
func (p *Proxy) Reorder(n int, m Match) { p.addRule(&rule{fault: Reorder, left: n, match: m}) }

// Expire replaces each of the next n matching watch events with an ERROR
// event, a Status 410 Expired naming the event's resourceVersion, and ends
// the stream cleanly: exactly what kube-apiserver sends when a watcher's
// resourceVersion is too old.
func (p *Proxy) Expire(n int, m Match) { p.addRule(&rule{fault: Expire, left: n, match: m}) }

// Throttle answers the next n matching requests with 429 Too Many Requests
// and Retry-After: 1, without passing them on.
func (p *Proxy) Throttle(n int, m RequestMatch) {
	p.addRule(&rule{fault: Throttle, left: n, matchReq: m})
}

// Refuse answers the next n matching requests with the HTTP status code and
// a Status body, without passing them on.
func (p *Proxy) Refuse(n int, m RequestMatch, code int) {
	p.addRule(&rule{fault: Refuse, left: n, matchReq: m, code: code})
}

// LoseResponse passes the next n matching requests on, lets the apiserver
// answer them, then closes the client's connection without any response.
func (p *Proxy) LoseResponse(n int, m RequestMatch) {
	p.addRule(&rule{fault: LoseResponse, left: n, matchReq: m})
}

// CommitThenRetry passes the next n matching requests on, lets the
// apiserver answer them, then answers the client as kube-apiserver answers
// a write whose etcd request timed out (storage.NewServerTimeout): a 500
// with Retry-After, which client-go retries whatever the verb, though the
// write may have been committed.
func (p *Proxy) CommitThenRetry(n int, m RequestMatch) {
	p.addRule(&rule{fault: CommitThenRetry, left: n, matchReq: m})
}

// CutAtEnd makes the next n matching watch streams that the apiserver ends
// cleanly end with a cut instead: the connection closes without the
// response's end, as a reset would, at the moment the server ended it.
func (p *Proxy) CutAtEnd(n int, m RequestMatch) {
	p.addRule(&rule{fault: CutAtEnd, left: n, matchReq: m})
}

// EndAfter passes each of the next n matching watch events on, then ends
// its stream cleanly, as kube-apiserver ends a watcher it finds
// unresponsive: no ERROR event, the response simply ends.
func (p *Proxy) EndAfter(n int, m Match) { p.addRule(&rule{fault: EndAfter, left: n, match: m}) }

// Hold keeps each of the next n matching requests from the apiserver until
// Release (or until the client gives up on it).
func (p *Proxy) Hold(n int, m RequestMatch) {
	p.addRule(&rule{fault: Hold, left: n, matchReq: m})
}

// Release lets every held request, and every one held later, through.
func (p *Proxy) Release() { p.releaseOnce.Do(func() { close(p.released) }) }

// Requests counts the requests the proxy has received, so a benchmark can
// measure the load a client puts on the apiserver.
func (p *Proxy) Requests() int64 { return p.requests.Load() }

// Clear removes every rule whose faults are not used up: the faults stop.
func (p *Proxy) Clear() {
	p.mu.Lock()
	p.rules = nil
	p.mu.Unlock()
}

// Applied reports how many faults of a kind have been injected, so a test
// can wait until they really have been.
func (p *Proxy) Applied(f Fault) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.applied[f]
}

// Records returns every fault applied so far, in the order applied.
func (p *Proxy) Records() []Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.records)
}

func (p *Proxy) record(r Record) {
	p.mu.Lock()
	p.applied[r.Fault]++
	p.records = append(p.records, r)
	p.mu.Unlock()
}

func (p *Proxy) addRule(r *rule) {
	p.mu.Lock()
	p.rules = append(p.rules, r)
	p.mu.Unlock()
}

// take returns the fault of the first event rule with faults left that
// matches ev, on the stream of req, and uses one of its faults.
func (p *Proxy) take(req Request, ev Event) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.match != nil && r.left > 0 && r.match(ev) {
			r.left--
			p.applied[r.fault]++
			p.records = append(p.records, Record{Fault: r.fault, At: time.Now(), Request: req, Event: ev})
			return r.fault, true
		}
	}
	return 0, false
}

// takeRequest uses one fault of the first request rule of kind f with
// faults left that matches req, and returns that rule; nil if none.
func (p *Proxy) takeRequest(f Fault, req Request) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		if r.fault == f && r.matchReq != nil && r.left > 0 && r.matchReq(req) {
			r.left--
			p.applied[f]++
			p.records = append(p.records, Record{Fault: f, At: time.Now(), Request: req})
			return r
		}
	}
	return nil
}

// writeStatus answers with a Status object, as the apiserver does.
func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(statusBody(code, reason, message))
}

func statusBody(code int, reason, message string) []byte {
	b, _ := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "reason": reason, "message": message, "code": code,
	})
	return append(b, '\n')
}

type (
	loseKey  struct{}
	retryKey struct{}
	connKey  struct{}
)

// stream is a watch response being passed on, and the client connection
// it goes to.
type stream struct {
	req  Request
	conn net.Conn
}

// hold keeps an event of s that arrived at arrived for as long as a stall
// or a delay of s says, and reports which held it (Stall if both did) and
// whether one did. A change of either is heeded at once: an event waiting
// out a delay that ends is released then, not when the delay would have
// passed, so that nothing stays held when a test has ended the fault.
func (p *Proxy) hold(ctx context.Context, s *stream, arrived time.Time) (Fault, bool) {
	fault, held := Delay, false
	for {
		p.mu.Lock()
		stalled, changed := p.stalled, p.changed
		if stalled != nil && p.stallMatch != nil && !p.stallMatch(s.req) {
			stalled = nil
		}
		var delay time.Duration
		if p.delayMatch == nil || p.delayMatch(s.req) {
			delay = p.delay
		}
		p.mu.Unlock()
		var timer *time.Timer
		var wake <-chan time.Time
		switch wait := time.Until(arrived.Add(delay)); {
		case stalled != nil:
			fault = Stall
		case wait > 0:
			timer = time.NewTimer(wait)
			wake = timer.C
		default:
			return fault, held
		}
		held = true
		select {
		case <-stalled:
		case <-wake:
		case <-changed:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return fault, held
		}
	}
}

// changeHold wakes every event held, to heed a new stall or delay. Call
// with p.mu held.
func (p *Proxy) changeHold() {
	close(p.changed)
	p.changed = make(chan struct{})
}

var (
	errLoseResponse = errors.New("faultproxy: response lost on purpose")
	errCut          = errors.New("faultproxy: stream cut on purpose")
)

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1"
}

// describe names a request as rules see it, from its method and its path
// (/api/v1/namespaces/NS/configmaps[/NAME] and the like).
func describe(r *http.Request) Request {
	req := Request{UserAgent: r.UserAgent()}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	named := false
	for i, part := range parts {
		if part == "namespaces" && i+1 < len(parts) {
			req.Namespace = parts[i+1]
			named = i+3 < len(parts) // namespaces/NS/resource/NAME
			if named {
				req.Name = parts[i+3]
			}
		}
	}
	switch r.Method {
	case http.MethodGet:
		switch {
		case isWatch(r):
			req.Kind = "watch"
			req.WatchList = r.URL.Query().Get("sendInitialEvents") == "true"
		case named:
			req.Kind = "get"
		default:
			req.Kind = "list"
		}
	case http.MethodPost:
		req.Kind = "create"
	case http.MethodPut:
		req.Kind = "update"
	case http.MethodPatch:
		req.Kind = "patch"
	case http.MethodDelete:
		req.Kind = "delete"
	}
	return req
}

type timedLine struct {
	data    []byte
	ev      Event
	arrived time.Time
}

// rewrite returns the body the client reads instead of upstream: events go
// through the rules on one goroutine, and through delay and stall on another,
// so that a stalled or delayed writer never stops the reader from noticing
// the stream's end. The stream is open, for CutStreams, until the client's
// body ends.
func (p *Proxy) rewrite(ctx context.Context, s *stream, upstream io.ReadCloser) io.ReadCloser {
	req := s.req
	p.mu.Lock()
	p.streams[s] = struct{}{}
	p.mu.Unlock()
	pr, pw := io.Pipe()
	lines := make(chan timedLine, 4096)
	var endErr error // how the client's stream ends; nil is a clean end
	go func() {
		defer close(lines)
		defer upstream.Close()
		r := bufio.NewReaderSize(upstream, 64*1024)
		var held *timedLine
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				now := time.Now()
				ev := parseEvent(line)
				emit := func(b []byte, ev Event) { lines <- timedLine{b, ev, now} }
				if held != nil {
					// The object event after a held one passes untouched,
					// so each reorder is exactly one swap of two
					// neighbours; a bookmark in between passes and the
					// event stays held, or no object would be reordered.
					emit(line, ev)
					if ev.Type != "BOOKMARK" {
						emit(held.data, held.ev)
						held = nil
					}
				} else {
					f, ok := p.take(req, ev)
					switch {
					case !ok:
						emit(line, ev)
					case f == Drop:
					case f == Duplicate:
						emit(line, ev)
						emit(line, ev)
					case f == Reorder:
						held = &timedLine{data: line, ev: ev}
					case f == Expire:
						emit(expiredEvent(ev.ResourceVersion), Event{Type: "ERROR"})
						return
					case f == EndAfter:
						emit(line, ev)
						return
					}
				}
			}
			if err != nil {
				if held != nil {
					lines <- timedLine{held.data, held.ev, time.Now()}
				}
				if errors.Is(err, io.EOF) && p.takeRequest(CutAtEnd, req) != nil {
					endErr = errCut
				}
				return
			}
		}
	}()
	go func() {
		defer func() {
			p.mu.Lock()
			delete(p.streams, s)
			p.mu.Unlock()
		}()
		// An event that arrived while the one before it was held was held
		// too, behind it: recorded as held by the same fault.
		var behind Fault
		var heldUntil time.Time
		for l := range lines {
			fault, held := p.hold(ctx, s, l.arrived)
			if !held && l.arrived.Before(heldUntil) {
				fault, held = behind, true
			}
			if held && ctx.Err() == nil {
				now := time.Now()
				p.record(Record{Fault: fault, At: now, Request: req, Event: l.ev, Held: now.Sub(l.arrived)})
				behind, heldUntil = fault, now
			}
			if _, err := pw.Write(l.data); err != nil {
				break
			}
		}
		// endErr is written before lines is closed, and read after.
		// A copy error makes the ReverseProxy abort the response.
		pw.CloseWithError(endErr)
		for range lines { // let the reader finish
		}
	}()
	return pr
}

// expiredEvent is the ERROR event kube-apiserver sends to a watcher whose
// resourceVersion is too old.
func expiredEvent(rv string) []byte {
	status := map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "reason": "Expired", "code": 410,
		"message": fmt.Sprintf("too old resource version: %s (%s)", rv, rv),
	}
	b, _ := json.Marshal(map[string]any{"type": "ERROR", "object": status})
	return append(b, '\n')
}

func parseEvent(line []byte) Event {
	var ev struct {
		Type   string `json:"type"`
		Object struct {
			Metadata struct {
				Name            string            `json:"name"`
				Namespace       string            `json:"namespace"`
				ResourceVersion string            `json:"resourceVersion"`
				Annotations     map[string]string `json:"annotations"`
			} `json:"metadata"`
		} `json:"object"`
	}
	_ = json.Unmarshal(line, &ev)
	m := ev.Object.Metadata
	return Event{Type: ev.Type, Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion,
		InitialEventsEnd: ev.Type == "BOOKMARK" && m.Annotations["k8s.io/initial-events-end"] == "true"}
}
