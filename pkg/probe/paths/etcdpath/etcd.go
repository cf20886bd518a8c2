package etcdpath

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	pathpkg "path"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/paths"
)

// etcdPath watches the markers' keys in etcd itself, under the apiserver:
// what etcd delivers, and when, before the apiserver's watch cache and its
// fan-out add their share. It is a path like the others: the same tracker,
// relists (a range read), stream ends and bookmarks (progress
// notifications).
type etcdPath struct {
	*paths.Base
	client  *clientv3.Client
	prefix  string // the keys of this probe's and replica's markers
	decoder runtime.Decoder
	// listTimeout bounds a range read: the etcd client waits for a
	// connection rather than failing, and a refused handshake must show up
	// as an error, not as a wait.
	listTimeout time.Duration
	endpoints   []string
	tlsConfig   *tls.Config
	// broken hears of each break of a watch stream (see interceptWatch).
	broken chan struct{}
	// encrypted is set while the values read are encrypted at rest.
	encrypted bool
}

// EncryptedPrefix starts every value that kube-apiserver encrypted at rest.
var EncryptedPrefix = []byte("k8s:enc:")

// ErrEncrypted: the etcd path cannot read what it watches.
var ErrEncrypted = errors.New("the markers are encrypted at rest in etcd (values start with k8s:enc:); the etcd path needs encryption at rest off for the marker resource")

// errConnectionLost ends an etcd watch whose connection went away: the etcd
// client would reconnect and resume in silence, which would hide the end.
var errConnectionLost = errors.New("the connection to etcd was lost")

func New(env paths.Env) (paths.Path, error) {
	cfg := env.Etcd
	tlsConfig, err := cfg.TLS()
	if err != nil {
		return nil, err
	}
	p := &etcdPath{
		Base:        paths.NewBase(env),
		decoder:     kube.Codecs.UniversalDeserializer(),
		listTimeout: time.Duration(cfg.DialTimeout) + 5*time.Second,
		endpoints:   cfg.Endpoints,
		tlsConfig:   tlsConfig,
		broken:      make(chan struct{}, 1),
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: time.Duration(cfg.DialTimeout),
		TLS:         tlsConfig,
		// Pings find a connection that stopped forwarding without closing.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// The etcd client resumes a broken watch stream by itself, on the
		// same member or another one; the path sees each break here.
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(p.interceptWatch)},
		// The path's own log lines say what matters; the client's are noise.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	p.client = client
	// Marker names are watchprobe-<probe>-<replica>-<run>-<cycle>: the
	// watch sees this process's markers and nothing else of the namespace.
	p.prefix = env.EtcdPrefix
	return p, nil
}

// Close releases the etcd client.
func (p *etcdPath) Close() { p.client.Close() }

// interceptWatch tells the path when a watch stream of its client breaks:
// a receive error other than a cancellation (the path's own).
func (p *etcdPath) interceptWatch(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/etcdserverpb.Watch/Watch" {
		return cs, err
	}
	return &watchStream{ClientStream: cs, broken: p.broken}, nil
}

type watchStream struct {
	grpc.ClientStream
	broken chan struct{}
}

func (s *watchStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	// grpc cancels the stream's context on any error, so the code is what
	// tells the path's own cancellation from a break.
	if err != nil && status.Code(err) != codes.Canceled {
		select {
		case s.broken <- struct{}{}:
		default:
		}
	}
	return err
}

func (p *etcdPath) Run(ctx context.Context) {
	var rev int64 // the last revision seen; the watch resumes after it
	retry := paths.NewBackoff()
	expiredAgain := false // as on the watch path
	for ctx.Err() == nil {
		if rev == 0 {
			p.RelistAttempt(metrics.ModeList)
			listRev, err := p.list(ctx)
			if err != nil {
				if ctx.Err() == nil {
					p.RequestFailed(metrics.RequestList, err, time.Now())
				}
				retry.Wait(ctx)
				continue
			}
			p.RelistCompleted(metrics.ModeList)
			rev = listRev
		}
		var end string
		var ok bool
		rev, end, ok = p.watchOnce(ctx, rev)
		if ok {
			retry.Reset()
			expiredAgain = false
		}
		relist, wait := paths.AfterStream(end, expiredAgain)
		if relist {
			rev = 0
			expiredAgain = true
		}
		if wait {
			retry.Wait(ctx)
		}
	}
}

// list reads the markers' keys, for the revision to watch from and to find
// out early that values are encrypted.
func (p *etcdPath) list(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.listTimeout)
	defer cancel()
	resp, err := p.client.Get(clientv3.WithRequireLeader(ctx), p.prefix, clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err != nil {
		return 0, p.explain(err)
	}
	for _, kv := range resp.Kvs {
		if bytes.HasPrefix(kv.Value, EncryptedPrefix) {
			p.encrypted = true
			return 0, ErrEncrypted
		}
	}
	return resp.Header.Revision, nil
}

// explain adds what a direct connection to each endpoint shows when the
// etcd client gave up at its deadline: it waits for a usable connection and
// then reports only the deadline, which hides a refused client certificate
// or an unreachable address.
func (p *etcdPath) explain(err error) error {
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var causes []error
	for _, ep := range p.endpoints {
		if cause := dialEndpoint(ep, p.tlsConfig, 2*time.Second); cause != nil {
			causes = append(causes, fmt.Errorf("%s: %w", ep, cause))
		}
	}
	if len(causes) == 0 {
		return fmt.Errorf("etcd did not answer within %s: %w", p.listTimeout, err)
	}
	return fmt.Errorf("etcd did not answer within %s: %w", p.listTimeout, errors.Join(causes...))
}

// dialEndpoint connects to an etcd client URL as the client would, and
// returns why that fails, or nil. With TLS 1.3 a server that refuses the
// client's certificate says so only after the handshake, on the first read.
func dialEndpoint(endpoint string, tlsConfig *tls.Config, timeout time.Duration) error {
	if !strings.Contains(endpoint, "://") {
		// The etcd client takes host:port too, with TLS when configured.
		scheme := "http://"
		if tlsConfig != nil {
			scheme = "https://"
		}
		endpoint = scheme + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	dialer := &net.Dialer{Timeout: timeout}
	if u.Scheme != "https" {
		conn, err := dialer.Dial("tcp", u.Host)
		if err == nil {
			conn.Close()
		}
		return err
	}
	cfg := &tls.Config{}
	if tlsConfig != nil {
		cfg = tlsConfig.Clone()
	}
	cfg.ServerName, cfg.NextProtos = u.Hostname(), []string{"h2"}
	conn, err := tls.DialWithDialer(dialer, "tcp", u.Host, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	if _, err := conn.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil // the server waits for the client to speak: it accepted us
}

// watchOnce runs one etcd watch from after rev until it ends, and returns
// the last revision seen and why it ended ("" when it never started).
func (p *etcdPath) watchOnce(ctx context.Context, rev int64) (int64, string, bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	select { // a break of an earlier stream is not this one's
	case <-p.broken:
	default:
	}
	start := time.Now()
	events := p.client.Watch(wctx, p.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	// The etcd client waits for a connection rather than failing: a watch
	// that is not created in time is a failed request.
	created := time.NewTimer(p.listTimeout)
	defer created.Stop()
	started, delivered := false, false
	end := func(reason string, err error) (int64, string, bool) {
		if !started {
			if ctx.Err() == nil {
				p.RequestFailed(metrics.RequestWatch, err, time.Now())
			}
			return rev, "", false
		}
		lifetime := time.Since(start)
		p.StreamEnded(reason, lifetime, err, time.Now())
		return rev, reason, paths.Healthy(delivered, lifetime)
	}
	// handle takes one response; it returns the stream's end reason, or ""
	// while the stream goes on.
	handle := func(resp clientv3.WatchResponse, arrival time.Time) (string, error) {
		if len(resp.Events) == 0 {
			p.Handed() // nothing that judges a write
		}
		switch {
		case resp.CompactRevision != 0:
			p.SetNextReason(metrics.RelistExpired)
			started = true // etcd answered: a stream that ended at once
			return metrics.EndExpired, resp.Err()
		case resp.Canceled:
			return metrics.EndError, resp.Err()
		case resp.Created:
			started = true
			if !p.encrypted {
				p.Live(arrival)
			}
			return "", nil
		case resp.IsProgressNotify():
			delivered = true
			rev = max(rev, resp.Header.Revision)
			p.Bookmark(arrival)
			return "", nil
		}
		delivered = true
		batch := make([]judge.PathEvent, 0, len(resp.Events))
		for _, ev := range resp.Events {
			rev = max(rev, ev.Kv.ModRevision)
			if e, ok := p.event(ev, arrival); ok {
				batch = append(batch, e)
			}
		}
		p.Events(arrival, batch...) // judged under one lock: one stamp
		return "", nil
	}
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-created.C:
			if !started {
				return end("", p.explain(context.DeadlineExceeded))
			}
			continue
		case <-p.broken:
			// What the stream delivered before it broke still counts.
			for drained := false; !drained; {
				select {
				case resp, ok := <-events:
					if ok {
						handle(resp, p.Stamp())
						p.Handed()
					}
					drained = !ok
				default:
					drained = true
				}
			}
			return end(metrics.EndEOF, errConnectionLost)
		case resp, ok = <-events:
		}
		switch {
		case !ok && ctx.Err() != nil:
			return end(metrics.EndClient, nil)
		case !ok:
			return end(metrics.EndError, errors.New("the etcd watch channel closed"))
		}
		reason, err := handle(resp, p.Stamp())
		p.Handed()
		if reason != "" {
			return end(reason, err)
		}
	}
}

// event makes one etcd event the tracker's; false for none. Values
// encrypted at rest cannot be read: the path is failing, not silent, until
// a value reads again.
func (p *etcdPath) event(ev *clientv3.Event, arrival time.Time) (judge.PathEvent, bool) {
	event, value := metrics.EventModified, ev.Kv.Value
	switch {
	case ev.Type == clientv3.EventTypeDelete:
		event, value = metrics.EventDeleted, nil
		if ev.PrevKv != nil {
			value = ev.PrevKv.Value
		}
	case ev.Kv.CreateRevision == ev.Kv.ModRevision:
		event = metrics.EventAdded
	}
	if bytes.HasPrefix(value, EncryptedPrefix) {
		if !p.encrypted {
			p.encrypted = true
			p.RequestFailed(metrics.RequestWatch, ErrEncrypted, arrival)
		}
		return judge.PathEvent{}, false
	}
	if p.encrypted && value != nil {
		p.encrypted = false
		p.Live(arrival)
	}
	obj := p.decode(string(ev.Kv.Key), value)
	// kube-apiserver stores objects without their resourceVersion: it is
	// the revision of the change, as every apiserver watch reports it.
	obj.SetResourceVersion(strconv.FormatInt(ev.Kv.ModRevision, 10))
	return judge.PathEvent{Event: event, Obj: obj}, true
}

// decode reads the object kube-apiserver stored (its protobuf envelope, or
// JSON) with apimachinery's serializers. A delete without its previous value
// is still matched: deletes are matched by name, which is in the key.
func (p *etcdPath) decode(key string, value []byte) metav1.Object {
	if value != nil {
		obj, _, err := p.decoder.Decode(value, nil, nil)
		if err == nil {
			if m, err := meta.Accessor(obj); err == nil {
				return m
			}
		}
		p.Logger().Warn("etcd delivered a value that does not decode", "key", key, "err", err)
	}
	return &metav1.ObjectMeta{Name: pathpkg.Base(key)}
}
