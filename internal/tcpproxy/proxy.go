// Package tcpproxy is a test-only TCP forwarder on this machine. Put in front
// of etcd (or anything) for one client, it lets a test cut, refuse or stall
// that client's connections while every other client of the same server is
// untouched: the faults a network does to one peer, which stopping the
// server cannot imitate.
package tcpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards each connection accepted on Addr to the target, bytes
// unchanged in both directions (TLS passes through end to end).
type Proxy struct {
	// targets lists the addresses a new connection may go to; one for New
	// and NewOn, whichever are up for NewBalancer.
	targets  func() []string
	next     atomic.Uint64 // where the next connection starts in targets
	listener net.Listener
	// ctx ends with Close, aborting dials to the target still in flight.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	mu      sync.Mutex
	closed  bool
	refuse  bool
	pairs   map[*pair]struct{}
	flowing chan struct{} // closed while bytes may flow; open while stalled
	// delay holds back each chunk from the target to the client this many
	// nanoseconds (Delay).
	delay atomic.Int64
}

// pair is one client connection and its connection to the target.
type pair struct {
	client, upstream *net.TCPConn
	once             sync.Once
	done             chan struct{} // closed when the pair is torn down
}

// dialTimeout bounds the connection to the target; on loopback it either
// succeeds at once or is refused, so this only guards against a stuck test.
const dialTimeout = 5 * time.Second

// New listens on 127.0.0.1:0 and forwards to target (host:port).
func New(target string) (*Proxy, error) {
	return NewOn("127.0.0.1:0", target)
}

// NewOn listens on listen (host:port; port 0 picks a free one) and forwards
// to target, for a client that cannot reach the proxy on this host's
// loopback, such as a process in a network namespace of its own.
func NewOn(listen, target string) (*Proxy, error) {
	targets := []string{target}
	return listenAndServe(listen, target, func() []string { return targets })
}

// NewBalancer listens on listen and sends each new connection to one of the
// addresses targets returns at that moment, starting one further along the
// list each time, as a TCP load balancer in front of several servers does.
// A target that refuses the dial is skipped for the next; a client is reset
// only when all do, or when targets returns none. Fault injection (Cut,
// Refuse, Stall) acts on the balancer as a whole.
func NewBalancer(listen string, targets func() []string) (*Proxy, error) {
	return listenAndServe(listen, "balanced targets", targets)
}

func listenAndServe(listen, what string, targets func() []string) (*Proxy, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("tcpproxy to %s: listening on %s: %w", what, listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	flowing := make(chan struct{})
	close(flowing)
	p := &Proxy{
		targets:  targets,
		listener: l,
		ctx:      ctx,
		cancel:   cancel,
		pairs:    map[*pair]struct{}{},
		flowing:  flowing,
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's host:port, to give the client instead of the target.
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Cut resets every live connection, both sides, as a dropped link or a
// middlebox timeout does: the client sees "connection reset", not a clean
// close. New connections are still accepted and forwarded.
func (p *Proxy) Cut() {
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		pairs = append(pairs, pr)
	}
	p.mu.Unlock()
	for _, pr := range pairs {
		pr.reset()
	}
}

// Refuse, while on, resets each new connection as soon as it is accepted,
// without dialling the target: the peer looks unreachable to a client that
// reconnects. Connections already forwarded are left alone (Cut ends them).
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Stall stops forwarding in both directions without closing anything, as a
// partition that drops packets does: writes soon stop completing and reads
// wait, until Resume or a timeout of the client's own. At most one read
// buffer per direction is held back, never lost; a chunk already being
// written when Stall is called may still arrive. New connections stall too.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
		p.flowing = make(chan struct{})
	default: // already stalled
	}
}

// Delay holds back each chunk the target sends before passing it on to
// the client, d at a time (0 ends it): a slow link to one peer, bytes in
// order and none lost. The client's own bytes go at once.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Resume forwards again, held-back bytes first.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.flowing:
	default:
		close(p.flowing)
	}
}

// Close stops accepting, resets every connection and returns once every
// goroutine of the proxy has ended. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	err := p.listener.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		conn, err := p.listener.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return
			}
			// Out of file descriptors, say: the client waits in the backlog,
			// as it would for a busy server, and the proxy tries again.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		client := conn.(*net.TCPConn)
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		if !refuse && !closed {
			p.wg.Add(1) // under mu, so Close's Wait cannot miss it
		}
		p.mu.Unlock()
		if refuse || closed {
			resetConn(client)
			continue
		}
		go p.forward(client)
	}
}

// forward dials the target for one accepted client and copies both ways
// until either side ends or the pair is reset.
func (p *Proxy) forward(client *net.TCPConn) {
	defer p.wg.Done()
	conn, err := p.dial()
	if err != nil {
		// The client sees its connection reset, as if the target refused it.
		resetConn(client)
		return
	}
	pr := &pair{client: client, upstream: conn, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.reset()
		return
	}
	p.pairs[pr] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.pairs, pr)
		p.mu.Unlock()
		pr.close()
	}()

	upDone := make(chan struct{})
	go func() {
		defer close(upDone)
		p.copy(pr, pr.upstream, pr.client)
	}()
	p.copy(pr, pr.client, pr.upstream)
	<-upDone
}

// dial connects to the first target that accepts, starting one further along
// the list than the previous connection did.
func (p *Proxy) dial() (*net.TCPConn, error) {
	targets := p.targets()
	if len(targets) == 0 {
		return nil, errors.New("no target")
	}
	start := p.next.Add(1) - 1
	var err error
	for i := range targets {
		target := targets[(start+uint64(i))%uint64(len(targets))]
		dialCtx, cancel := context.WithTimeout(p.ctx, dialTimeout)
		var conn net.Conn
		conn, err = (&net.Dialer{}).DialContext(dialCtx, "tcp", target)
		cancel()
		if err == nil {
			return conn.(*net.TCPConn), nil
		}
	}
	return nil, err
}

// copy moves bytes from src to dst, waiting at each chunk while the proxy is
// stalled. A clean end of src is passed on as a half-close, so protocols that
// finish sending before they finish reading still work; any error tears the
// whole pair down, as a broken link would.
func (p *Proxy) copy(pr *pair, dst, src *net.TCPConn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 && dst == pr.client {
				select {
				case <-pr.done:
					return
				case <-time.After(d):
				}
			}
			if !p.waitFlowing(pr) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				pr.reset()
				return
			}
		}
		if errors.Is(err, net.ErrClosed) {
			return // torn down by reset or close
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = dst.CloseWrite()
				return
			}
			pr.reset()
			return
		}
	}
}

// waitFlowing blocks while the proxy is stalled; false means the pair was
// torn down meanwhile.
func (p *Proxy) waitFlowing(pr *pair) bool {
	for {
		p.mu.Lock()
		flowing := p.flowing
		p.mu.Unlock()
		select {
		case <-pr.done:
			return false
		case <-flowing:
			// Stall may have come and gone and come again while waking up;
			// look once more so a byte never slips through a stall.
			p.mu.Lock()
			still := flowing == p.flowing
			p.mu.Unlock()
			if still {
				return true
			}
		}
	}
}

// reset ends both connections with a TCP RST (linger 0) rather than a FIN,
// so each peer learns of the cut on its next read or write.
func (pr *pair) reset() {
	pr.once.Do(func() {
		resetConn(pr.client)
		resetConn(pr.upstream)
		close(pr.done)
	})
}

// close ends both connections normally, after both directions finished.
func (pr *pair) close() {
	pr.once.Do(func() {
		pr.client.Close()
		pr.upstream.Close()
		close(pr.done)
	})
}

func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
