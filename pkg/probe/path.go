package probe

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// path is one way of receiving marker events from the apiserver.
type path interface {
	// run receives events until ctx ends, calling its observe function for
	// each marker event with the instant it arrived.
	run(ctx context.Context)
	// synced reports whether the path has received its initial state and is
	// now waiting for new events.
	synced() bool
}

// observeFunc receives one marker event (added, modified or deleted).
type observeFunc func(event string, obj metav1.Object, arrival time.Time)

var errNotSynced = errors.New("has not received its initial state yet")

// timeoutSlack absorbs the rounding of the requested timeout to whole
// seconds and the instants at which client and server start their clocks.
const timeoutSlack = 500 * time.Millisecond

// requestTimeout picks a watch's requested lifetime, between base and twice
// base, as client-go's reflector does, so that watches do not all end at once.
func requestTimeout(base time.Duration) time.Duration {
	return (base + rand.N(base+1)).Truncate(time.Second)
}

// pathBase is what every path does the same way: its list and watch
// requests, tagged so the transport can count throttling and observe the
// stream's body, and the bookkeeping of relists and stream ends.
type pathBase struct {
	api          markerAPI
	selector     string
	idx          int
	tracker      *tracker
	series       *metrics.PathSeries
	watchTimeout time.Duration
	logger       *slog.Logger
	// failed, if set, hears every list or watch request that failed.
	failed func(error)

	mu         sync.Mutex
	listed     bool      // the initial relist has begun
	relisting  bool      // a relist has begun and not completed
	relistFrom time.Time // when it began
	nextReason string    // why the next relist happens
}

func newPathBase(api markerAPI, selector string, idx int, tr *tracker, watchTimeout time.Duration, logger *slog.Logger) *pathBase {
	return &pathBase{
		api: api, selector: selector, idx: idx, tracker: tr, series: tr.state[idx].series,
		watchTimeout: watchTimeout, logger: logger, nextReason: metrics.RelistError,
	}
}

// list sends one LIST of the path's markers.
func (p *pathBase) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	opts.LabelSelector = p.selector
	list, err := p.api.list(withTag(ctx, &requestTag{throttled: p.series.Throttled}), opts)
	if err != nil && ctx.Err() == nil {
		p.requestFailed(metrics.RequestList, err)
	}
	return list, err
}

// errNoStream stands for a watch request that ended without a response:
// client-go then hands out an empty watch rather than the error.
var errNoStream = errors.New("the watch request got no response: connection reset, EOF or timeout")

// watch sends one watch request. A request that fails before a stream
// exists is not a stream: it is counted apart and has no lifetime. When
// client-go answers a connection lost before any response with an empty
// watch and no error, the stream is nil and the empty watch is returned
// for the caller to hand on or stop.
func (p *pathBase) watch(ctx context.Context, opts metav1.ListOptions) (*stream, watch.Interface, error) {
	requested := requestTimeout(p.watchTimeout)
	secs := int64(requested.Seconds())
	opts.LabelSelector = p.selector
	opts.AllowWatchBookmarks = true
	opts.TimeoutSeconds = &secs
	s := &stream{path: p, requested: requested}
	w, err := p.api.watch(withTag(ctx, &requestTag{throttled: p.series.Throttled, stream: &s.body}), opts)
	if err != nil {
		if ctx.Err() == nil {
			p.requestFailed(metrics.RequestWatch, err)
		}
		return nil, nil, err
	}
	opened, start := s.body.started()
	if !opened {
		if ctx.Err() == nil {
			p.requestFailed(metrics.RequestWatch, errNoStream)
		}
		return nil, w, nil
	}
	s.start = start
	return s, w, nil
}

func (p *pathBase) requestFailed(request string, err error) {
	p.tracker.requestFailed(p.idx, request, err, time.Now())
	if p.failed != nil {
		p.failed(err)
	}
}

// synced reports whether the path has been live once: a stream open and
// caught up. The informer path answers with its informer's own sync.
func (p *pathBase) synced() bool { return p.tracker.wasLive(p.idx) }

// relistAttempt records an attempt at fetching the whole state. Only the
// first attempt of a relist counts as one: retries after failures, and
// client-go's fallback from WatchList to LIST, are the same relist.
func (p *pathBase) relistAttempt(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.relisting {
		return
	}
	reason := p.nextReason
	if !p.listed {
		reason, p.listed = metrics.RelistInitial, true
	}
	p.nextReason = metrics.RelistError
	p.relisting, p.relistFrom = true, time.Now()
	p.tracker.relisted(p.idx, reason, mode, p.relistFrom)
}

// relistCompleted records that the whole state has arrived, by mode.
func (p *pathBase) relistCompleted(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.relisting {
		p.relisting = false
		p.nextReason = metrics.RelistError
		p.series.RelistDone(mode, time.Since(p.relistFrom))
	}
}

// setNextReason says why the next relist will happen. During a relist it
// changes nothing: an expiry inside a relist is part of that relist, and
// must not label the next one.
func (p *pathBase) setNextReason(reason string) {
	p.mu.Lock()
	if !p.relisting {
		p.nextReason = reason
	}
	p.mu.Unlock()
}

// stream is one watch stream of a path, from its request to its end.
type stream struct {
	path      *pathBase
	requested time.Duration
	start     time.Time
	body      streamBody
	status    error // the Status of an ERROR event the server sent
}

// errorEvent records an ERROR event. It is the server's word on why the
// stream ends, unless client-go's StreamWatcher made it up to report a read
// error or the client's own cancellation: then the body had already failed
// or been closed by the client, and the Status names ClientWatchDecoding as
// its cause. An expired stream is followed by a relist for that reason, set
// here, before the event reaches the client, which may relist at once.
func (s *stream) errorEvent(ev watch.Event) error {
	status := apierrors.FromObject(ev.Object)
	if end, _ := s.body.state(); end == bodyReadError || end == bodyClosed || clientReported(status) {
		return status
	}
	if s.status == nil {
		s.status = status
	}
	if apierrors.IsTooManyRequests(status) {
		// A 429 the server sent inside the stream: throttled all the same.
		s.path.series.Throttled[metrics.RequestWatch].Inc()
	}
	if isExpired(status) {
		s.path.setNextReason(metrics.RelistExpired)
	}
	return status
}

// clientReported tells a Status that client-go's StreamWatcher made up from
// a read or decode error of its own.
func clientReported(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Type == "ClientWatchDecoding" {
			return true
		}
	}
	return false
}

// end classifies and records the stream's end. shutdown is true when the
// exporter itself is stopping the path.
func (s *stream) end(shutdown bool) string {
	end, err := s.body.state()
	lifetime := time.Since(s.start)
	reason := endReason(s.status, end, shutdown, lifetime, s.requested)
	if err == nil {
		err = s.status
	}
	if reason == metrics.EndExpired {
		s.path.setNextReason(metrics.RelistExpired)
	}
	s.path.tracker.streamEnded(s.path.idx, reason, lifetime, err, time.Now())
	return reason
}

// endReason classifies the end of a watch stream from what the stream
// itself showed: the Status of an ERROR event the server sent; else how the
// response body ended (cleanly by the server, with a read error, or closed
// by the client first); requested is the timeout the client asked for.
func endReason(status error, body bodyEnd, shutdown bool, lifetime, requested time.Duration) string {
	switch {
	case status != nil:
		return statusReason(status)
	case body == bodyEOF && lifetime >= requested-timeoutSlack:
		return metrics.EndTimeout
	case body == bodyEOF:
		return metrics.EndClosedEarly
	case body == bodyReadError:
		return metrics.EndEOF
	case shutdown:
		return metrics.EndClient
	default:
		// The client stopped a stream the server had not ended, and not
		// for the exporter's shutdown: it gave up on it.
		return metrics.EndError
	}
}

func statusReason(status error) string {
	switch {
	case isExpired(status):
		return metrics.EndExpired
	case apierrors.IsTooManyRequests(status):
		return metrics.EndTooManyRequests
	default:
		return metrics.EndError
	}
}

// isExpired reports the "410 Gone / too old resource version" answer that
// means the stream cannot be resumed and the path must relist.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// statusCode is the HTTP status of an apiserver error, 0 when no response
// arrived.
func statusCode(err error) int {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return int(status.Status().Code)
	}
	return 0
}
