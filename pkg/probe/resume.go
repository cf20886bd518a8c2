package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	pathpkg "path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// Resume checks answer the question a controller asks after its watch
// broke: can it resume from the last resourceVersion it saw, or must it
// relist? Every round, on each path that reaches an apiserver (the load
// balanced one and each pinned apiserver) or etcd, the checker opens a
// fresh watch on the probe's markers from the resourceVersion of one of the
// probe's own writes at least `age` old, reads until it has either the 410
// or every event the probe wrote since, and closes it. The probe knows
// those events exactly, so the replay is judged, not only its start.
//
// The checks stay off the ordinary paths' way: their events never reach
// the tracker, and all they add to a write is one append to the ledger.

// replayKey names one marker event as both the probe and the watch see it:
// the marker, the event, and the writer's sequence number on the object (0
// for a delete, which writes none: a marker is deleted once).
type replayKey struct {
	marker, event string
	seq           uint64
}

// ledgerWrite is one of the probe's writes as the resume checks know it.
type ledgerWrite struct {
	key replayKey
	// rv is the resourceVersion of the write's response: 0 for a delete,
	// whose response is a Status, and for a write that failed.
	rv uint64
	at time.Time // when the response came
	// sure: the write was acknowledged, so its event is owed; a write that
	// failed other than by a refusal may have been committed, and its
	// event may come, once.
	sure bool
}

// describe names the event for a log line or report: its resourceVersion
// when known, else what it was.
func (w ledgerWrite) describe() string {
	if w.rv != 0 {
		return strconv.FormatUint(w.rv, 10)
	}
	return w.key.event + " " + w.key.marker
}

// replayEvent is one marker event a resume watch delivered.
type replayEvent struct {
	key replayKey
	rv  string
}

// replayEnd is how the reading of a resume watch ended.
type replayEnd uint8

const (
	// replayDone: every event owed arrived, and the checker closed the watch.
	replayDone replayEnd = iota
	// replayOpen: the stream stayed open past the bound without delivering
	// every event owed.
	replayOpen
	// replayClosed: the stream ended without a status: the server closed
	// it, or the connection was lost.
	replayClosed
	// replayExpired: the server answered 410 Gone (etcd: compacted).
	replayExpired
	// replayFailed: the request failed, or the stream ended with another
	// error status.
	replayFailed
)

// ResumeVerdict is the judgement of one resume check.
type ResumeVerdict struct {
	Path      string
	APIServer string
	// Age is the configured age; the write resumed from was at least
	// this old, and ResumedAfter says how old it was.
	Age          time.Duration
	ResumedAfter time.Duration
	// At is when the check began; From the resourceVersion it resumed from.
	At      time.Time
	From    string
	Outcome string // metrics.Resume*
	// The events involved in an inexact replay: their resourceVersion, or
	// the event and marker when it is not known (a delete's).
	Missing    []string
	Duplicated []string
	OutOfOrder []string
	// Err is the server's status or the request's error, for expired and
	// error.
	Err error
}

// judgeReplay judges a resume watch from what the probe wrote after the
// resourceVersion it resumed from (want, in the order written), what the
// watch delivered (got, in order; events of other writes are ignored: in
// flight when the check began, or another run's markers being cleaned up),
// and how the reading ended. A replay is exact when every acknowledged
// write's event arrived, once, in order; a gap is proven when a later
// event arrived without an earlier one. A 410 before any owed event is the
// history's end, not a fault.
func judgeReplay(want []ledgerWrite, got []replayEvent, end replayEnd, err error) ResumeVerdict {
	pos := make(map[replayKey]int, len(want))
	for i, w := range want {
		pos[w.key] = i
	}
	var v ResumeVerdict
	seen := make([]bool, len(want))
	latest, delivered := -1, false
	for _, ev := range got {
		i, ok := pos[ev.key]
		if !ok {
			continue
		}
		delivered = true
		switch {
		case seen[i]:
			v.Duplicated = append(v.Duplicated, ev.rv)
		case i < latest:
			v.OutOfOrder = append(v.OutOfOrder, ev.rv)
		}
		seen[i] = true
		latest = max(latest, i)
	}
	gap := false
	for i, w := range want {
		if w.sure && !seen[i] {
			v.Missing = append(v.Missing, w.describe())
			gap = gap || i < latest
		}
	}
	switch {
	case len(v.Duplicated) > 0 || len(v.OutOfOrder) > 0 || gap:
		v.Outcome = metrics.ResumeIncomplete
	case end == replayExpired && delivered:
		v.Outcome, v.Err = metrics.ResumeIncomplete, err
	case end == replayExpired:
		v.Outcome, v.Err, v.Missing = metrics.ResumeExpired, err, nil
	case len(v.Missing) == 0:
		v.Outcome = metrics.ResumeReplayed
	case end == replayOpen:
		// The stream was up and delivered nothing more within the bound
		// after which the ordinary paths count an event lost.
		v.Outcome = metrics.ResumeIncomplete
	default:
		v.Outcome, v.Err = metrics.ResumeError, err
		if v.Err == nil {
			v.Err = errors.New("the watch ended before it replayed every event")
		}
	}
	return v
}

// resumeLedger keeps the probe's writes, in the order they were sent (a
// probe writes one at a time), for as long as the largest age needs.
type resumeLedger struct {
	mu     sync.Mutex
	writes []ledgerWrite
	keep   time.Duration
}

// add records a write; refused writes, never committed, are not owed.
func (l *resumeLedger) add(w ledgerWrite) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, w)
	// The oldest write stays while the next one is too young to resume
	// from at the largest age.
	drop := 0
	for drop+1 < len(l.writes) && w.at.Sub(l.writes[drop+1].at) > l.keep {
		drop++
	}
	if drop > 0 {
		l.writes = slices.Delete(l.writes, 0, drop)
	}
}

// since returns the write to resume from for age: the newest acknowledged
// write with a resourceVersion whose response came at least age before
// now; and the writes after it. ok is false while the probe has no write
// that old, or none since.
func (l *resumeLedger) since(age time.Duration, now time.Time) (from ledgerWrite, after []ledgerWrite, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.writes) - 1; i >= 0; i-- {
		w := l.writes[i]
		if w.at.After(now.Add(-age)) || !w.sure || w.rv == 0 {
			continue
		}
		after = slices.Clone(l.writes[i+1:])
		return w, after, len(after) > 0
	}
	return ledgerWrite{}, nil, false
}

// resumeSource opens resume watches on one path.
type resumeSource struct {
	path, apiserver string
	series          *metrics.ResumeSeries
	// replay watches from rv until take says every owed event arrived,
	// the bound passes, or the stream ends.
	replay func(ctx context.Context, rv uint64, bound time.Duration, take func(replayEvent) bool) (replayEnd, error)
	close  func()
}

// resumeChecker runs a probe's resume checks.
type resumeChecker struct {
	probe  *Probe
	cfg    ResumeConfig
	ages   []time.Duration // ascending
	labels map[time.Duration]string
	bound  time.Duration
	ledger resumeLedger
	logger *slog.Logger

	fixed  []*resumeSource          // the load-balanced apiserver and etcd
	pinned map[string]*resumeSource // by apiserver address
}

// newResumeChecker prepares the probe's resume checks, nil when they are
// off.
func newResumeChecker(p *Probe) *resumeChecker {
	if !p.cfg.Resume.Enabled() {
		return nil
	}
	c := &resumeChecker{
		probe:  p,
		cfg:    p.cfg.Resume,
		labels: map[time.Duration]string{},
		bound:  p.cfg.lostAfter(),
		logger: p.logger.With("check", "resume"),
		pinned: map[string]*resumeSource{},
	}
	ages := map[string]time.Duration{}
	for _, a := range c.cfg.Ages {
		c.ages = append(c.ages, time.Duration(a))
		c.labels[time.Duration(a)] = a.String()
		ages[a.String()] = time.Duration(a)
	}
	slices.Sort(c.ages)
	// The oldest write kept must be old enough for the largest age at
	// the next round.
	c.ledger.keep = c.ages[len(c.ages)-1] + time.Duration(c.cfg.Every) + time.Minute
	p.opts.Metrics.SetResumeAges(p.cfg.Name, ages)

	// One check through the load balancer serves both API paths: the
	// informer's reflector resumes with the same request as the watch
	// path.
	label := metrics.PathWatch
	if !slices.Contains(p.cfg.Paths, metrics.PathWatch) {
		label = metrics.PathInformer
	}
	if slices.Contains(p.cfg.Paths, label) {
		if src, err := c.apiSource(label, "", p.opts.Config); err != nil {
			c.logger.Error("resume checks cannot reach the apiserver", "path", label, "err", err)
		} else {
			c.fixed = append(c.fixed, src)
		}
	}
	if slices.Contains(p.cfg.Paths, metrics.PathEtcd) {
		if src, err := c.etcdSource(); err != nil {
			c.logger.Error("resume checks cannot reach etcd", "err", err)
		} else {
			c.fixed = append(c.fixed, src)
		}
	}
	return c
}

// wrote records one of the probe's writes: its response's resourceVersion
// is what a later check resumes from. Nil-safe: resume checks off.
func (c *resumeChecker) wrote(marker string, seq uint64, verb string, out metav1.Object, err error, at time.Time) {
	if c == nil || refused(err) {
		return
	}
	w := ledgerWrite{key: replayKey{marker, verbEvent[verb], seq}, at: at, sure: err == nil}
	if verb == metrics.VerbDelete {
		w.key.seq = 0
	}
	if err == nil && out != nil {
		w.rv, _ = strconv.ParseUint(out.GetResourceVersion(), 10, 64)
	}
	c.ledger.add(w)
}

// run holds a round every cfg.Every until ctx ends.
func (c *resumeChecker) run(ctx context.Context) {
	defer func() {
		for _, s := range c.fixed {
			s.close()
		}
		for _, s := range c.pinned {
			s.close()
		}
	}()
	ticker := time.NewTicker(time.Duration(c.cfg.Every))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		var wg sync.WaitGroup
		for _, src := range c.sources() {
			wg.Go(func() { c.round(ctx, src) })
		}
		wg.Wait()
	}
}

// sources are the paths to check this round: the fixed ones and one per
// apiserver the probe has a path pinned to now.
func (c *resumeChecker) sources() []*resumeSource {
	srcs := slices.Clone(c.fixed)
	if c.probe.pinned == nil {
		return srcs
	}
	addrs := c.probe.pinned.addrs()
	for addr, s := range c.pinned {
		if !slices.Contains(addrs, addr) {
			s.close()
			delete(c.pinned, addr)
		}
	}
	for _, addr := range addrs {
		s, ok := c.pinned[addr]
		if !ok {
			var err error
			config := pinnedConfig(c.probe.opts.Config, addr, c.probe.cfg.APIServers.ServerName)
			if s, err = c.apiSource(metrics.PathAPIServer, addr, config); err != nil {
				c.logger.Error("resume checks cannot reach the apiserver", "apiserver", addr, "err", err)
				continue
			}
			c.pinned[addr] = s
		}
		srcs = append(srcs, s)
	}
	return srcs
}

// round checks every age on one path, youngest first, and sets the path's
// window when every age was judged.
func (c *resumeChecker) round(ctx context.Context, src *resumeSource) {
	judged, window := 0, time.Duration(0)
	for _, age := range c.ages {
		v, ok := c.check(ctx, src, age)
		if ctx.Err() != nil {
			return // the probe is stopping: not a result
		}
		if !ok {
			continue
		}
		src.series.Checked(c.labels[age], v.Outcome)
		c.probe.tracker.resumed(v)
		switch v.Outcome {
		case metrics.ResumeReplayed:
			window = age
			judged++
		case metrics.ResumeExpired, metrics.ResumeIncomplete:
			judged++
		}
		c.log(v)
	}
	if judged == len(c.ages) {
		src.series.SetWindow(window)
		c.probe.tracker.resumeWindow(src.path, src.apiserver, window)
	}
}

// check runs one resume check at age on src; ok is false when the probe
// has no write old enough yet.
func (c *resumeChecker) check(ctx context.Context, src *resumeSource, age time.Duration) (ResumeVerdict, bool) {
	now := time.Now()
	from, want, ok := c.ledger.since(age, now)
	if !ok {
		return ResumeVerdict{}, false
	}
	owed := map[replayKey]bool{}
	var last replayKey // the newest write owed
	for _, w := range want {
		if w.sure {
			owed[w.key], last = true, w.key
		}
	}
	var got []replayEvent
	var done time.Time
	// Reading stops once everything owed arrived, or the newest write
	// owed did: the stream is in order, so anything still missing then is
	// a gap, not late.
	take := func(ev replayEvent) bool {
		got = append(got, ev)
		if owed[ev.key] {
			delete(owed, ev.key)
			if len(owed) == 0 {
				done = time.Now()
			}
		}
		return len(owed) == 0 || ev.key == last
	}
	if len(owed) == 0 {
		// Only failed writes since: nothing is owed, so nothing can be
		// judged but the 410.
		return ResumeVerdict{}, false
	}
	start := time.Now()
	end, err := src.replay(ctx, from.rv, c.bound, take)
	v := judgeReplay(want, got, end, err)
	v.Path, v.APIServer, v.Age, v.At, v.ResumedAfter = src.path, src.apiserver, age, now, now.Sub(from.at)
	v.From = strconv.FormatUint(from.rv, 10)
	if v.Outcome == metrics.ResumeReplayed {
		src.series.Replayed(done.Sub(start))
	}
	return v, true
}

func (c *resumeChecker) log(v ResumeVerdict) {
	args := []any{"path", v.Path, "age", model.Duration(v.Age).String(), "from", v.From, "written", v.ResumedAfter.Round(time.Millisecond)}
	if v.APIServer != "" {
		args = append(args, "apiserver", v.APIServer)
	}
	switch v.Outcome {
	case metrics.ResumeIncomplete:
		args = append(args, "missing", v.Missing, "duplicated", v.Duplicated, "out_of_order", v.OutOfOrder)
		if v.Err != nil {
			args = append(args, "err", v.Err)
		}
		c.logger.Warn("a resumed watch did not replay exactly what was written", args...)
	case metrics.ResumeError:
		c.logger.Warn("a resume check failed", append(args, "err", v.Err)...)
	case metrics.ResumeExpired:
		c.logger.Debug("a resume check expired", append(args, "err", v.Err)...)
	default:
		c.logger.Debug("a resume check replayed", args...)
	}
}

// apiSource resumes through an apiserver with config: the load balancer's
// or one pinned apiserver's.
func (c *resumeChecker) apiSource(path, apiserver string, config *rest.Config) (*resumeSource, error) {
	p := c.probe
	// Connections of its own: client-go shares one transport, and so one
	// HTTP/2 connection per apiserver, between configs with equal TLS
	// settings, and a replay must not queue with the paths' events. A
	// dialer of its own makes the transport the source's alone, and lets
	// close end its connections.
	conns := &ownConns{open: map[net.Conn]struct{}{}}
	config = rest.CopyConfig(config)
	config.Dial = conns.dial
	client, err := NewClient(config)
	if err != nil {
		return nil, err
	}
	api, err := newMarkerAPI(client, p.cfg.Kind, p.cfg.Namespace)
	if err != nil {
		return nil, err
	}
	selector := markerSelector(p.cfg.Name, p.opts.Replica)
	src := &resumeSource{
		path: path, apiserver: apiserver,
		series: p.opts.Metrics.ForResume(p.cfg.Name, path, apiserver, slices.Collect(maps.Values(c.labels))),
		close:  conns.closeAll,
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
func replayAPI(ctx context.Context, api markerAPI, selector string, rv uint64, bound time.Duration, take func(replayEvent) bool) (replayEnd, error) {
	runCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	// The server ends the watch by itself too, should the client not.
	secs := int64((bound + time.Second - 1) / time.Second)
	w, err := api.watch(ctx, metav1.ListOptions{
		LabelSelector:   selector,
		ResourceVersion: strconv.FormatUint(rv, 10),
		TimeoutSeconds:  &secs,
	})
	switch {
	case err != nil && isExpired(err):
		return replayExpired, err
	case err != nil:
		return replayFailed, err
	}
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			if runCtx.Err() != nil {
				return replayFailed, runCtx.Err()
			}
			return replayOpen, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			if ctx.Err() != nil && runCtx.Err() == nil {
				return replayOpen, nil
			}
			return replayClosed, nil
		}
		if ev.Type == watch.Error {
			status := apierrors.FromObject(ev.Object)
			switch {
			case clientReported(status):
				// client-go's own report of a read error: the stream
				// broke, the server said nothing.
				return replayClosed, status
			case isExpired(status):
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
		k.seq, _ = seqOf(m)
	}
	return k
}

// etcdSource resumes on the etcd path: an etcd watch from the revision
// after the write's, on the keys of this run's markers.
func (c *resumeChecker) etcdSource() (*resumeSource, error) {
	p := c.probe
	tlsConfig, err := etcdTLS(p.cfg.Etcd)
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   p.cfg.Etcd.Endpoints,
		DialTimeout: time.Duration(p.cfg.Etcd.DialTimeout),
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	prefix := markerKeyPrefix(p.cfg, p.opts.Replica, p.run)
	decoder := codecs.UniversalDeserializer()
	src := &resumeSource{
		path:   metrics.PathEtcd,
		series: p.opts.Metrics.ForResume(p.cfg.Name, metrics.PathEtcd, "", slices.Collect(maps.Values(c.labels))),
		close:  func() { client.Close() },
	}
	created := time.Duration(p.cfg.Etcd.DialTimeout) + 5*time.Second
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
				if bytes.HasPrefix(ev.Kv.Value, encryptedPrefix) {
					return replayFailed, errEncrypted
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
func markerKeyPrefix(cfg Config, replica, run string) string {
	_, resource := MarkerResource(cfg.Kind)
	name := fmt.Sprintf(markerNamePattern, cfg.Name, replica, run, 0)
	return fmt.Sprintf("%s/%s/%s/%s", trimSlash(cfg.Etcd.Prefix), resource, cfg.Namespace, strings.TrimSuffix(name, "0"))
}
