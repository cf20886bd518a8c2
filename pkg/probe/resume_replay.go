package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	pathpkg "path"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/paths"
	"github.com/watchprobe/watchprobe/pkg/probe/paths/etcdpath"
)

// The resumed watches themselves: through an apiserver (the load balanced
// one or a pinned one) and from etcd.

// apiSource resumes through an apiserver with config: the load balancer's
// or one pinned apiserver's.
func (c *resumeChecker) apiSource(path, apiserver string, config *rest.Config) (*resumeSource, error) {
	// Connections of its own: client-go shares one transport, and so one
	// HTTP/2 connection per apiserver, between configs with equal TLS
	// settings, and a replay must not queue with the paths' events. A
	// dialer of its own makes the transport the source's alone, and lets
	// close end its connections.
	conns := &ownConns{open: map[net.Conn]struct{}{}}
	config = rest.CopyConfig(config)
	config.Dial = conns.dial
	client, err := kube.NewClient(config)
	if err != nil {
		return nil, err
	}
	api, err := kube.NewMarkerAPI(client, c.probe.Kind, c.probe.Namespace)
	if err != nil {
		return nil, err
	}
	selector := markerSelector(c.probe.Name, c.replica)
	src := &resumeSource{
		path: path, apiserver: apiserver,
		close: conns.closeAll,
	}
	src.replay = func(ctx context.Context, rv uint64, bound time.Duration, take func(replayEvent) bool) (replayEnd, error) {
		return replayAPI(ctx, api, selector, rv, bound, take)
	}
	return src, nil
}

// ownConns dials a source's connections and closes them when it goes.
type ownConns struct {
	mu   sync.Mutex
	open map[net.Conn]struct{}
}

func (o *ownConns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open == nil { // closed
		conn.Close()
		return nil, net.ErrClosed
	}
	tracked := &ownConn{Conn: conn, owner: o}
	o.open[tracked] = struct{}{}
	return tracked, nil
}

func (o *ownConns) closeAll() {
	o.mu.Lock()
	open := o.open
	o.open = nil
	o.mu.Unlock()
	for conn := range open {
		conn.Close()
	}
}

type ownConn struct {
	net.Conn
	owner *ownConns
}

func (c *ownConn) Close() error {
	c.owner.mu.Lock()
	delete(c.owner.open, c)
	c.owner.mu.Unlock()
	return c.Conn.Close()
}

// replayAPI reads one resume watch through an apiserver.
func replayAPI(ctx context.Context, api kube.MarkerAPI, selector string, rv uint64, bound time.Duration, take func(replayEvent) bool) (replayEnd, error) {
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	// The server ends the watch by itself too, should the client not.
	secs := int64((bound + time.Second - 1) / time.Second)
	w, err := api.Watch(ctx, metav1.ListOptions{
		LabelSelector:   selector,
		ResourceVersion: strconv.FormatUint(rv, 10),
		TimeoutSeconds:  &secs,
	})
	switch {
	case err != nil && paths.IsExpired(err):
		return replayExpired, err
	case err != nil:
		return replayFailed, err
	}
	defer w.Stop()
	for {
		ev, ok := paths.Next(ctx.Done(), w)
		switch {
		case ok:
		case runCtx.Err() != nil:
			return replayFailed, runCtx.Err()
		case ctx.Err() != nil:
			// Open until the bound: the check's own end, not the server's.
			return replayOpen, nil
		default:
			return replayClosed, nil
		}
		if ev.Type == watch.Error {
			status := apierrors.FromObject(ev.Object)
			switch {
			case paths.ClientReported(status):
				// client-go's own report of a read error: the stream
				// broke, the server said nothing.
				return replayClosed, status
			case paths.IsExpired(status):
				return replayExpired, status
			}
			return replayFailed, status
		}
		event, ok := markerEvents[ev.Type]
		if !ok {
			continue
		}
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			continue
		}
		if take(replayEvent{key: eventKey(event, m), rv: m.GetResourceVersion()}) {
			return replayDone, nil
		}
	}
}

// markerEvents names the watch events that carry a marker's change.
var markerEvents = map[watch.EventType]string{
	watch.Added:    metrics.EventAdded,
	watch.Modified: metrics.EventModified,
	watch.Deleted:  metrics.EventDeleted,
}

// eventKey is the replayKey of a marker event.
func eventKey(event string, m metav1.Object) replayKey {
	k := replayKey{marker: m.GetName(), event: event}
	if event != metrics.EventDeleted {
		k.seq, _ = judge.Seq(m)
	}
	return k
}

// etcdSource resumes on the etcd path: an etcd watch from the revision
// after the write's, on the keys of this run's markers.
func (c *resumeChecker) etcdSource() (*resumeSource, error) {
	tlsConfig, err := c.probe.Etcd.TLS()
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   c.probe.Etcd.Endpoints,
		DialTimeout: time.Duration(c.probe.Etcd.DialTimeout),
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	prefix := markerKeyPrefix(c.probe, c.replica, c.runID)
	decoder := kube.Codecs.UniversalDeserializer()
	src := &resumeSource{
		path:  metrics.PathEtcd,
		close: func() { client.Close() },
	}
	created := time.Duration(c.probe.Etcd.DialTimeout) + 5*time.Second
	src.replay = func(ctx context.Context, rv uint64, bound time.Duration, take func(replayEvent) bool) (replayEnd, error) {
		return replayEtcd(ctx, client, prefix, decoder, rv, bound, created, take)
	}
	return src, nil
}

// replayEtcd reads one resume watch on etcd. createdWithin bounds the wait
// for etcd to accept the watch: the etcd client waits for a connection
// rather than failing, and an unreachable etcd must be an error, not a
// replay that delivered nothing.
func replayEtcd(ctx context.Context, client *clientv3.Client, prefix string, decoder runtime.Decoder, rv uint64, bound, createdWithin time.Duration, take func(replayEvent) bool) (replayEnd, error) {
	runCtx := ctx
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), bound)
	defer cancel()
	events := client.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(int64(rv)+1), clientv3.WithCreatedNotify())
	created := false
	createdBy := time.NewTimer(createdWithin)
	defer createdBy.Stop()
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-createdBy.C:
			if !created {
				return replayFailed, errors.New("etcd did not accept the watch in time")
			}
			continue
		case resp, ok = <-events:
		}
		switch {
		case !ok && runCtx.Err() != nil:
			return replayFailed, runCtx.Err()
		case !ok && !created:
			return replayFailed, errors.New("etcd did not accept the watch before the bound")
		case !ok && ctx.Err() != nil:
			return replayOpen, nil
		case !ok:
			return replayClosed, nil
		case resp.CompactRevision != 0:
			return replayExpired, resp.Err()
		case resp.Canceled:
			return replayFailed, resp.Err()
		case resp.Created:
			created = true
			continue
		}
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			e := replayEvent{rv: strconv.FormatInt(ev.Kv.ModRevision, 10)}
			switch {
			case ev.Type == clientv3.EventTypeDelete:
				e.key = replayKey{marker: pathpkg.Base(key), event: metrics.EventDeleted}
			default:
				event := metrics.EventModified
				if ev.Kv.CreateRevision == ev.Kv.ModRevision {
					event = metrics.EventAdded
				}
				if bytes.HasPrefix(ev.Kv.Value, etcdpath.EncryptedPrefix) {
					return replayFailed, etcdpath.ErrEncrypted
				}
				obj, _, err := decoder.Decode(ev.Kv.Value, nil, nil)
				if err != nil {
					continue // not a marker the probe wrote
				}
				m, err := meta.Accessor(obj)
				if err != nil {
					continue
				}
				e.key = eventKey(event, m)
			}
			if take(e) {
				return replayDone, nil
			}
		}
	}
}

// markerKeyPrefix is the etcd key prefix of one run's markers:
// <etcd prefix>/<resource>/<namespace>/watchprobe-<probe>-<replica>-<run>-.
func markerKeyPrefix(cfg config.Config, replica, run string) string {
	_, resource := MarkerResource(cfg.Kind)
	return fmt.Sprintf("%s/%s/%s/%s", trimSlash(cfg.Etcd.Prefix), resource, cfg.Namespace, markerNamePrefix(cfg.Name, replica, run))
}

func trimSlash(s string) string {
	for len(s) > 1 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}
