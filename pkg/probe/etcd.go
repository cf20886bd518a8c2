package probe

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
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// etcdPath watches the markers' keys in etcd itself, under the apiserver:
// what etcd delivers, and when, before the apiserver's watch cache and its
// fan-out add their share. It is a path like the others: the same tracker,
// relists (a range read), stream ends and bookmarks (progress
// notifications).
type etcdPath struct {
	*pathBase
	client  *clientv3.Client
	prefix  string // the keys of this probe's and replica's markers
	observe observeFunc
	decoder runtime.Decoder
	ready   atomic.Bool
	// listTimeout bounds a range read: the etcd client waits for a
	// connection rather than failing, and a refused handshake must show up
	// as an error, not as a wait.
	listTimeout time.Duration
	endpoints   []string
	tlsConfig   *tls.Config
}

// encryptedPrefix starts every value that kube-apiserver encrypted at rest.
var encryptedPrefix = []byte("k8s:enc:")

// errEncrypted: the etcd path cannot read what it watches.
var errEncrypted = errors.New("the markers are encrypted at rest in etcd (values start with k8s:enc:); the etcd path needs encryption at rest off for the marker resource")

// errConnectionLost ends an etcd watch whose connection went away: the etcd
// client would reconnect and resume in silence, which would hide the end.
var errConnectionLost = errors.New("the connection to etcd was lost")

func newEtcdPath(base *pathBase, cfg Config, replica string, observe observeFunc) (*etcdPath, error) {
	var tlsConfig *tls.Config
	if cfg.Etcd.CertFile != "" || cfg.Etcd.CAFile != "" {
		info := transport.TLSInfo{CertFile: cfg.Etcd.CertFile, KeyFile: cfg.Etcd.KeyFile, TrustedCAFile: cfg.Etcd.CAFile}
		var err error
		if tlsConfig, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd client certificates: %w", err)
		}
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Etcd.Endpoints,
		DialTimeout: time.Duration(cfg.Etcd.DialTimeout),
		TLS:         tlsConfig,
		// The path's own log lines say what matters; the client's are noise.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	resource := "configmaps"
	if cfg.Kind == KindLease {
		resource = "leases"
	}
	// Marker names start with watchprobe-<probe>-<replica>-, so the watch
	// sees this replica's markers and nothing else of the namespace.
	prefix := fmt.Sprintf("%s/%s/%s/%s", trimSlash(cfg.Etcd.Prefix), resource, cfg.Namespace, fmt.Sprintf(markerNamePattern, cfg.Name, replica, "", 0))
	prefix = prefix[:len(prefix)-len("-0")]
	return &etcdPath{
		pathBase: base, client: client, prefix: prefix, observe: observe,
		decoder:     scheme.Codecs.UniversalDeserializer(),
		listTimeout: time.Duration(cfg.Etcd.DialTimeout) + 5*time.Second,
		endpoints:   cfg.Etcd.Endpoints,
		tlsConfig:   tlsConfig,
	}, nil
}

func trimSlash(s string) string {
	for len(s) > 1 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

func (p *etcdPath) synced() bool { return p.ready.Load() }

func (p *etcdPath) run(ctx context.Context) {
	defer p.client.Close()
	var rev int64 // the last revision seen; the watch resumes after it
	retry := newBackoff()
	for ctx.Err() == nil {
		if rev == 0 {
			p.relistAttempt(metrics.ModeList)
			listRev, err := p.list(ctx)
			if err != nil {
				if ctx.Err() == nil {
					p.tracker.requestFailed(p.idx, metrics.RequestList, err, time.Now())
				}
				retry.wait(ctx)
				continue
			}
			p.relistCompleted(metrics.ModeList)
			rev = listRev
		}
		var reason string
		rev, reason = p.watchOnce(ctx, rev)
		switch reason {
		case metrics.EndExpired:
			rev = 0
		case "":
			retry.wait(ctx) // the watch did not start: not a stream
			continue
		}
		retry.reset()
		if reason != metrics.EndClient && reason != metrics.EndTimeout {
			retry.wait(ctx)
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
		if bytes.HasPrefix(kv.Value, encryptedPrefix) {
			return 0, errEncrypted
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
	for _, ep := range p.endpoints {
		if cause := dialEndpoint(ep, p.tlsConfig, 2*time.Second); cause != nil {
			return fmt.Errorf("etcd did not answer within %s: %s: %w", p.listTimeout, ep, cause)
		}
	}
	return fmt.Errorf("etcd did not answer within %s: %w", p.listTimeout, err)
}

// dialEndpoint connects to an etcd client URL as the client would, and
// returns why that fails, or nil. With TLS 1.3 a server that refuses the
// client's certificate says so only after the handshake, on the first read.
func dialEndpoint(endpoint string, tlsConfig *tls.Config, timeout time.Duration) error {
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
func (p *etcdPath) watchOnce(ctx context.Context, rev int64) (int64, string) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	start := time.Now()
	events := p.client.Watch(wctx, p.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	lost := p.connectionLost(wctx)
	started := false
	end := func(reason string, err error) (int64, string) {
		if !started {
			if ctx.Err() == nil {
				p.tracker.requestFailed(p.idx, metrics.RequestWatch, err, time.Now())
			}
			return rev, ""
		}
		p.tracker.streamEnded(p.idx, reason, time.Since(start), err, time.Now())
		return rev, reason
	}
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-lost:
			return end(metrics.EndEOF, errConnectionLost)
		case resp, ok = <-events:
		}
		arrival := time.Now()
		switch {
		case !ok && ctx.Err() != nil:
			return end(metrics.EndClient, nil)
		case !ok:
			return end(metrics.EndError, errors.New("the etcd watch channel closed"))
		case resp.CompactRevision != 0:
			p.setNextReason(metrics.RelistExpired)
			started = true // etcd answered: a stream that ended at once
			return end(metrics.EndExpired, resp.Err())
		case resp.Canceled:
			return end(metrics.EndError, resp.Err())
		case resp.Created:
			started = true
			p.ready.Store(true)
			p.tracker.live(p.idx, arrival)
			continue
		case resp.IsProgressNotify():
			rev = max(rev, resp.Header.Revision)
			p.tracker.bookmark(p.idx, arrival)
			continue
		}
		for _, ev := range resp.Events {
			rev = max(rev, ev.Kv.ModRevision)
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
			if bytes.HasPrefix(value, encryptedPrefix) {
				// Unreadable: the path is failing, not silent. It relists,
				// and its list or next watch finds the same.
				p.setNextReason(metrics.RelistError)
				_, reason := end(metrics.EndError, errEncrypted)
				p.tracker.requestFailed(p.idx, metrics.RequestWatch, errEncrypted, arrival)
				return 0, reason
			}
			p.observe(event, p.decode(string(ev.Kv.Key), value), arrival)
		}
	}
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
		p.logger.Warn("etcd delivered a value that does not decode", "key", key, "err", err)
	}
	return &metav1.ObjectMeta{Name: pathpkg.Base(key)}
}

// connectionLost is closed when the etcd client's connection leaves the
// ready state while ctx lasts.
func (p *etcdPath) connectionLost(ctx context.Context) <-chan struct{} {
	lost := make(chan struct{})
	conn := p.client.ActiveConnection()
	go func() {
		wasReady := false
		for state := conn.GetState(); ; state = conn.GetState() {
			switch {
			case state == connectivity.Ready:
				wasReady = true
			case wasReady:
				close(lost)
				return
			}
			if !conn.WaitForStateChange(ctx, state) {
				return
			}
		}
	}()
	return lost
}
