package probe

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/metrics"
	"github.com/watchprobe/watchprobe/pkg/probe/judge"
	"github.com/watchprobe/watchprobe/pkg/probe/kube"
	"github.com/watchprobe/watchprobe/pkg/probe/paths"
)

// freshConnections is how many fresh connections a check of a refusal
// sends the refused request over, one after another. Through a load
// balancer that spreads connections uniformly over n apiservers, all of
// them reach the one apiserver that refuses with probability (1/n)^3; one
// that spreads them in turn reaches another within n, unless other
// clients' connections fall between them in step. docs/alerts.md
// (WatchprobePathRefused) says what that leaves.
const freshConnections = 3

// checkEvery spaces the checks of one request while their answers
// change, and the first check of a run of refusals from the one before;
// checkBackoff, once the latest two answers were the same refusal or
// failure. Served answers are never backed off: a path refused while
// another apiserver serves is the control plane's fault, and the misses
// a served answer could not settle wait for the next check (judge's
// held misses), which must come before their lost horizon. A path refused
// for as long as the exporter's configuration lasts asks again on each
// retry, and each check opens connections anew: backing off bounds that
// to freshConnections connections a minute per request (list, watch) and
// probe, while a run of refusals that began since the latest check, or an
// answer that changed, is checked again within checkEvery: the misses held
// for a check wait for it (judge.Tracker.RefusalChecked).
const (
	checkEvery   = 10 * time.Second
	checkBackoff = time.Minute
)

// refusalChecker checks a path's refusal over fresh connections when the
// judgement asks (judge.ConfirmRefusal): the path's retries go over
// client-go's one cached connection, so the apiserver that refused is the
// only one they reach, and only new connections, which a load balancer
// spreads, can reach the others. It sends the refused request, as the
// paths send it (the marker kind, namespace and selector), over up to
// freshConnections connections of its own, each closed after its request,
// and tells the judgement whether an apiserver served it, every one
// refused it (judge.Tracker.RefusalChecked), or neither
// (RefusalCheckFailed).
type refusalChecker struct {
	config          *rest.Config
	kind, namespace string
	selector        string
	tracker         *judge.Tracker
	logger          *slog.Logger

	poke chan struct{}
	mu   sync.Mutex
	// wanted are the requests to check next, each with the start of the
	// latest run of refusals asked about.
	wanted map[string]time.Time
	// checks are the requests' checks so far; only run's goroutine
	// touches them.
	checks map[string]checkState
}

// checkState is what the checks of one request have found so far.
type checkState struct {
	// began is when the latest check began; last, its answer; repeated,
	// whether the check before it answered the same.
	began    time.Time
	last     answer
	answered bool
	repeated bool
}

// due is when the next check of the request may begin, asked about a run
// of refusals that began at since.
func (s checkState) due(since time.Time) time.Time {
	if s.repeated && s.last != answerServed && !since.After(s.began) {
		return s.began.Add(checkBackoff)
	}
	return s.began.Add(checkEvery)
}

// record records a check begun at began that answered a.
func (s *checkState) record(began time.Time, a answer) {
	s.repeated = s.answered && s.last == a
	s.began, s.last, s.answered = began, a, true
}

func newRefusalChecker(config *rest.Config, kind, namespace, selector string, tracker *judge.Tracker, logger *slog.Logger) *refusalChecker {
	return &refusalChecker{config: config, kind: kind, namespace: namespace, selector: selector,
		tracker: tracker, logger: logger, poke: make(chan struct{}, 1),
		wanted: map[string]time.Time{}, checks: map[string]checkState{}}
}

// Outcome hears the judgement ask for a check. Asked again while a check
// of the same request is under way, it checks once more after it: the
// refusal asked about may have begun after that check did.
func (c *refusalChecker) Outcome(o judge.Outcome) {
	if o.Kind != judge.ConfirmRefusal {
		return
	}
	c.mu.Lock()
	c.wanted[o.Request] = judge.Later(c.wanted[o.Request], o.Since)
	c.mu.Unlock()
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// run checks what is asked, one check at a time, each when it is due
// (checkState.due), until ctx ends.
func (c *refusalChecker) run(ctx context.Context) {
	asked := map[string]time.Time{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		for request, since := range c.wanted {
			asked[request] = judge.Later(asked[request], since)
		}
		clear(c.wanted)
		c.mu.Unlock()
		next, at := "", time.Time{}
		for request, since := range asked {
			if due := c.checks[request].due(since); next == "" || due.Before(at) {
				next, at = request, due
			}
		}
		if next == "" {
			select {
			case <-ctx.Done():
				return
			case <-c.poke:
			}
			continue
		}
		timer.Reset(time.Until(at))
		select {
		case <-ctx.Done():
			return
		case <-c.poke:
			// Asked again: a run begun since may be due sooner. Stopped,
			// the timer delivers nothing stale after its next Reset.
			timer.Stop()
			continue
		case <-timer.C:
		}
		delete(asked, next)
		began := time.Now()
		a := c.check(ctx, next, began)
		if ctx.Err() != nil {
			return
		}
		s := c.checks[next]
		s.record(began, a)
		c.checks[next] = s
	}
}

// answer is what one request over a fresh connection got.
type answer int

const (
	answerFailed  answer = iota // no answer, or one that is neither: a 5xx, a 429, a 401
	answerServed                // an apiserver served it
	answerRefused               // 403 or 404 (judge.PathRefusal)
)

// check sends request over fresh connections until one is served, and
// tells the judgement: served, refused on every connection, or neither (a
// connection failed otherwise: no evidence about the refusal, but an
// answer to the check, which the misses held for it wait for). It returns
// the answer.
func (c *refusalChecker) check(ctx context.Context, request string, began time.Time) answer {
	refused := 0
	var failed error
	for range freshConnections {
		a, err := c.attempt(ctx, request)
		if ctx.Err() != nil {
			return answerFailed
		}
		switch a {
		case answerServed:
			c.tracker.RefusalChecked(request, began, true, time.Now())
			c.answered(request, answerServed, nil)
			return answerServed
		case answerRefused:
			refused++
		default:
			failed = err
		}
	}
	if refused == freshConnections {
		c.tracker.RefusalChecked(request, began, false, time.Now())
		c.answered(request, answerRefused, nil)
		return answerRefused
	}
	c.tracker.RefusalCheckFailed(request, began, failed, time.Now())
	c.answered(request, answerFailed, failed)
	return answerFailed
}

// answered logs, once per change of a request's answer, what its check
// found when that is not the judgement's to say: served over a fresh
// connection (the refusal is one apiserver's), or neither served nor
// refused on every connection (the refusal is unconfirmed). A refusal
// confirmed is the judgement's to log (judge.Refused).
func (c *refusalChecker) answered(request string, a answer, err error) {
	s := c.checks[request]
	known, was := s.answered, s.last
	if known && was == a {
		return
	}
	switch a {
	case answerServed:
		c.logger.Warn("a refused "+request+" was served over a fresh connection: one apiserver refuses what another serves (a stale authorization cache, version skew), the control plane's fault, not the exporter's permissions; the refused paths are down", "request", request)
	case answerFailed:
		c.logger.Warn("refusal unconfirmed: the check of a refused "+request+" over fresh connections failed otherwise (no answer, a 5xx, a 429), so it cannot tell the exporter's permissions from one apiserver's fault; the refused paths are down, and checked again", "request", request, "err", err)
	case answerRefused:
		if known {
			c.logger.Info("the check of a refused "+request+" over fresh connections was refused on every one", "request", request)
		}
	}
}

// refusalCheckAgent is the User-Agent of a refusal check made by a client
// whose User-Agent is agent.
func refusalCheckAgent(agent string) string {
	if agent == "" {
		agent = rest.DefaultKubernetesUserAgent()
	}
	return agent + refusalCheckSuffix
}

const refusalCheckSuffix = " (refusal check)"

// attempt sends request once over a connection of its own, closed after
// it, and says what it got, with the error.
func (c *refusalChecker) attempt(ctx context.Context, request string) (answer, error) {
	var conns connections
	config := kube.OwnConnection(c.config)
	// Named apart in the apiserver's audit log and in a proxy's rules.
	config.UserAgent = refusalCheckAgent(config.UserAgent)
	dial := config.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	config.Dial = conns.dialing(dial)
	config.Wrap(kube.Instrument) // to see whether a watch opened
	defer conns.close()
	client, err := kube.NewClient(config)
	if err != nil {
		return answerFailed, err
	}
	api, err := kube.NewMarkerAPI(client, c.kind, c.namespace)
	if err != nil {
		return answerFailed, err
	}
	ctx, cancel := context.WithTimeout(ctx, kube.ListTimeout)
	defer cancel()
	opts := metav1.ListOptions{LabelSelector: c.selector}
	if request == metrics.RequestList {
		opts.Limit = 1
		_, err = api.List(ctx, opts)
	} else {
		one := int64(1)
		opts.TimeoutSeconds = &one
		var body kube.StreamBody
		var w watch.Interface
		if w, err = api.Watch(kube.WithTag(ctx, &kube.RequestTag{Stream: &body}), opts); err == nil {
			w.Stop()
			if opened, _ := body.Started(); !opened {
				return answerFailed, paths.ErrNoStream
			}
		}
	}
	switch {
	case err == nil:
		return answerServed, nil
	case judge.PathRefusal(err) != "":
		return answerRefused, err
	}
	return answerFailed, err
}

// connections are those a transport of a check dialled, to close after it.
type connections struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (cs *connections) dialing(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err == nil {
			cs.mu.Lock()
			cs.conns = append(cs.conns, conn)
			cs.mu.Unlock()
		}
		return conn, err
	}
}

func (cs *connections) close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.conns {
		_ = c.Close()
	}
	cs.conns = nil
}
