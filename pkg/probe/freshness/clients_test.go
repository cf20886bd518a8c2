package freshness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/pkg/config"
	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// dials records every connection a config's Dial opens, in order, and
// which are closed.
type dials struct {
	mu    sync.Mutex
	conns []*dialedConn
}

type dialedConn struct {
	net.Conn
	d      *dials
	closed bool
}

func (c *dialedConn) Close() error {
	c.d.mu.Lock()
	c.closed = true
	c.d.mu.Unlock()
	return c.Conn.Close()
}

func (d *dials) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dc := &dialedConn{Conn: conn, d: d}
	d.conns = append(d.conns, dc)
	return dc, nil
}

// open says which of conns[from:to] are still open.
func (d *dials) open(from, to int) []bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []bool
	for _, c := range d.conns[from:to] {
		out = append(out, !c.closed)
	}
	return out
}

func (d *dials) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

// testConnections: the checks of a round share one connection, however
// many resources; the load-balanced target opens a new one each round, so
// that the load balancer chooses an apiserver anew, and the previous one is
// closed; each load-balanced read has a connection of its own; the
// connection of another client of the same settings is never the checks',
// nor closed by their reads or rotation; Close leaves nothing open.
func testConnections(t *testing.T, c *localcluster.Cluster) {
	ctx := context.Background()
	var d dials
	rc := c.AdminConfig()
	rc.Dial = d.dial
	f := settings([]string{"configmaps", "pods"}, nil)
	f.Reads = true
	// The connections dialled by the time each check was judged.
	var mu sync.Mutex
	var atCheck []int
	chk, err := New(Options{Probe: "p", Namespace: "fresh", LoadBalanced: rc, Metrics: metrics.NewProbe(prometheus.NewRegistry()), Config: f,
		MarkerKind: config.KindConfigMap, MarkerSelector: "watchprobe.test/marker=yes", LostAfter: time.Minute, Retain: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: time.Now,
		Observe: func(e Event) {
			if e.Read != nil {
				return
			}
			if e.Verdict.Outcome != Fresh {
				t.Errorf("%s: %+v (%+v), want fresh", e.Resource, e.Verdict, e.Answer)
			}
			mu.Lock()
			atCheck = append(atCheck, d.count())
			mu.Unlock()
		}})
	if err != nil {
		t.Fatal(err)
	}

	// Round one dials the checks' connection (discovery's requests go
	// over it too; more than one should the first requests race to dial)
	// and makes the series; it neither checks nor reads.
	chk.Round(ctx)
	before := d.count()
	const rounds = 4
	for i := 2; i <= rounds; i++ {
		mu.Lock()
		atCheck = nil
		mu.Unlock()
		chk.Round(ctx)
		mu.Lock()
		for _, n := range atCheck {
			if n != before+1 {
				t.Errorf("round %d: a check found %d connections dialled, %d before the round: want the round's own one more, shared by its checks", i, n, before)
			}
		}
		if len(atCheck) != 2 {
			t.Errorf("round %d: %d checks, want 2", i, len(atCheck))
		}
		mu.Unlock()
		n := d.count() - before
		if n != 2 {
			t.Errorf("round %d dialled %d connections, want two: the checks' and the read's", i, n)
		}
		// The checks' connection stays open until the next round; every
		// earlier one (the previous round's checks', its read's) and this
		// round's read's are closed.
		checks := before
		localcluster.EventuallyShows(t, 10*time.Second, "every connection closed but this round's checks'", func() bool {
			open := d.open(0, d.count())
			for j, o := range open {
				if o != (j == checks) {
					return false
				}
			}
			return true
		}, func() string {
			return fmt.Sprintf("round %d, the checks' connection %d, open: %v", i, checks, d.open(0, d.count()))
		})
		before = d.count()
	}
	chk.Close()
	localcluster.EventuallyShows(t, 10*time.Second, "every connection closed after Close", func() bool {
		return fmt.Sprint(d.open(0, d.count())) == fmt.Sprint(make([]bool, d.count()))
	}, func() string { return fmt.Sprintf("open: %v", d.open(0, d.count())) })

	// Another client of a checker's settings, from client-go's transport
	// cache: one connection, kept while a checker of the same settings runs
	// its rounds. Settings of their own (a user's certificate) keep
	// transports made earlier in the test process out of the cache entry.
	rc = readers.Config(t, c, "fresh-conns")
	other, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	reused := func() bool {
		var info httptrace.GotConnInfo
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { info = i },
		}), http.MethodGet, c.APIServerURL+"/version", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := other.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return info.Reused
	}
	reused()

	shared, rec := newChecker(t, Options{Namespace: "fresh", LoadBalanced: rc, Metrics: metrics.NewProbe(prometheus.NewRegistry()), Config: f,
		MarkerKind: config.KindConfigMap, MarkerSelector: "watchprobe.test/marker=yes", LostAfter: time.Minute, Retain: time.Minute})
	defer shared.Close()
	for range 2 {
		shared.Round(ctx)
		rec.take()
	}
	if !reused() {
		t.Error("another client of the same settings lost its connection to the checker's rounds: the checks shared it, and a read closed it")
	}
}

// readers may list pods, configmaps and podtemplates in the namespace
// fresh.
var readers = localcluster.Readers{Group: "watchprobe-test:fresh-readers", Namespace: "fresh",
	Resources: []string{"pods", "configmaps", "podtemplates"}, Verbs: []string{"list"}}
