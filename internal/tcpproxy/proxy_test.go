package tcpproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/internal/exportertest"
)

// echoServer is a real loopback TCP server that echoes what it reads and
// lets a test write from the server side too, so each direction of the
// proxy can be watched on its own.
type echoServer struct {
	l        net.Listener
	accepted atomic.Int64
	received atomic.Int64 // bytes read from clients
	conns    chan net.Conn
	wg       sync.WaitGroup
	mu       sync.Mutex
	live     []net.Conn
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{l: l, conns: make(chan net.Conn, 16)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.live = append(s.live, conn)
			s.mu.Unlock()
			select {
			case s.conns <- conn:
			default:
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					n, err := conn.Read(buf)
					s.received.Add(int64(n))
					if n > 0 {
						if _, err := conn.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.live {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// checkGoroutines fails t if goroutines started during it outlive it. Called
// first, its cleanup runs last, after the proxy and server are closed.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// throughProxy is a connection through a new proxy to a new echo server,
// for a test that also checks that nothing is left running after it.
func throughProxy(t *testing.T) (*echoServer, *Proxy, *net.TCPConn) {
	t.Helper()
	checkGoroutines(t)
	srv := newEchoServer(t)
	p := newProxy(t, srv.l.Addr().String())
	return srv, p, dial(t, p.Addr())
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn.(*net.TCPConn)
}

// roundTrip writes msg and reads its echo within a generous bound.
func roundTrip(t *testing.T, conn net.Conn, msg string) {
	t.Helper()
	if _, err := conn.Write([]byte(msg)); err != nil {
		t.Fatalf("writing %q: %v", msg, err)
	}
	got := make([]byte, len(msg))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("reading the echo of %q: %v", msg, err)
	}
	if string(got) != msg {
		t.Fatalf("echo %q, want %q", got, msg)
	}
}

// readErr is the error of the next read, which must come well before the
// deadline: a fault must be seen, not timed out on.
func readErr(t *testing.T, conn net.Conn) error {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := conn.Read(make([]byte, 64))
	if err == nil {
		t.Fatal("read data from a connection that should have ended")
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection was still open after 5 s")
	}
	return err
}

// refusedErr is how a connection to addr ends when the proxy resets it on
// arrival: the reset can beat the end of connect, so it may fail the dial
// itself or the first read.
func refusedErr(t *testing.T, addr string) error {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	return readErr(t, conn)
}

// Cut resets the live connections of one proxy, and only those: another
// proxy to the same server keeps its connection, and the cut proxy forwards
// new connections at once.
func TestCut(t *testing.T) {
	checkGoroutines(t)
	srv := newEchoServer(t)
	p, other := newProxy(t, srv.l.Addr().String()), newProxy(t, srv.l.Addr().String())
	a, b, c := dial(t, p.Addr()), dial(t, p.Addr()), dial(t, other.Addr())
	for _, conn := range []net.Conn{a, b, c} {
		roundTrip(t, conn, "before the cut")
	}

	p.Cut()
	for _, conn := range []net.Conn{a, b} {
		if err := readErr(t, conn); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("a cut connection ended with %v, want a reset", err)
		}
	}
	roundTrip(t, c, "the other proxy's client is untouched")
	roundTrip(t, dial(t, p.Addr()), "a new connection after the cut")
}

// While refusing, a connection is reset on arrival and never reaches the
// target; afterwards the proxy forwards again.
func TestRefuse(t *testing.T) {
	srv, p, live := throughProxy(t)
	roundTrip(t, live, "before refusing")

	p.Refuse(true)
	err := refusedErr(t, p.Addr())
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Errorf("a refused connection ended with %v, want a reset or EOF", err)
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("the target accepted %d connections, want 1: a refused one reached it", n)
	}
	roundTrip(t, live, "a connection from before Refuse is left alone")

	p.Refuse(false)
	roundTrip(t, dial(t, p.Addr()), "after refusing")
}

// Stall holds bytes in both directions without closing; Resume delivers
// them, none lost.
func TestStallResume(t *testing.T) {
	srv, p, conn := throughProxy(t)
	roundTrip(t, conn, "hello")
	serverSide := <-srv.conns
	receivedBefore := srv.received.Load()

	p.Stall()
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := serverSide.Write([]byte("push")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := conn.Read(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes, %v through a stalled proxy; want nothing and the connection open", n, err)
	}
	if got := srv.received.Load() - receivedBefore; got != 0 {
		t.Fatalf("the server received %d bytes through a stalled proxy", got)
	}

	p.Resume()
	got := make([]byte, 8)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	// "push" went server to client, "ping" client to server and back: the
	// order between them is not the proxy's to keep.
	if s := string(got); !strings.Contains(s, "ping") || !strings.Contains(s, "push") {
		t.Fatalf("after Resume read %q, want ping and push", s)
	}
	roundTrip(t, conn, "flowing again")
}

// A client that finishes sending still gets every byte of the answer: the
// end of one direction is a half-close, not a teardown.
func TestHalfClose(t *testing.T) {
	_, _, conn := throughProxy(t)
	msg := strings.Repeat("0123456789", 10000) // more than one copy buffer
	if _, err := conn.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	if err := conn.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the answer after a half-close: %v", err)
	}
	if string(got) != msg {
		t.Fatalf("got %d bytes back, want %d", len(got), len(msg))
	}
}

// A target that refuses shows as a reset connection; Close ends every
// connection and stops listening.
func TestUnreachableTargetAndClose(t *testing.T) {
	checkGoroutines(t)
	deadTarget, err := exportertest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dead := newProxy(t, deadTarget)
	if err := refusedErr(t, dead.Addr()); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a connection to an unreachable target ended with %v, want a reset", err)
	}

	srv := newEchoServer(t)
	p := newProxy(t, srv.l.Addr().String())
	conn := dial(t, p.Addr())
	roundTrip(t, conn, "before Close")
	p.Stall() // Close must not wait for a stalled copy
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := readErr(t, conn); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a connection ended by Close ended with %v, want a reset", err)
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Error("the proxy still accepts after Close")
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// NewOn listens where it is told, here another loopback address than
// 127.0.0.1, as a proxy on the host end of a veth does for a client in a
// network namespace.
func TestNewOn(t *testing.T) {
	checkGoroutines(t)
	srv := newEchoServer(t)
	p, err := NewOn("127.0.0.2:0", srv.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if host, _, _ := net.SplitHostPort(p.Addr()); host != "127.0.0.2" {
		t.Fatalf("listening on %s, want 127.0.0.2", p.Addr())
	}
	roundTrip(t, dial(t, p.Addr()), "through a proxy on 127.0.0.2")
	if _, err := NewOn("127.0.0.1:notaport", srv.l.Addr().String()); err == nil || !strings.Contains(err.Error(), "127.0.0.1:notaport") {
		t.Errorf("a bad listen address gave %v, want an error naming it", err)
	}
}

// The balancer spreads new connections over the targets it is given at each
// moment, skips one that refuses, and resets a client when none is left.
func TestBalancer(t *testing.T) {
	checkGoroutines(t)
	a, b := newEchoServer(t), newEchoServer(t)
	dead, err := exportertest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	targets := []string{a.l.Addr().String(), dead, b.l.Addr().String()}
	p, err := NewBalancer("127.0.0.1:0", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), targets...)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	const n = 9
	for i := range n {
		roundTrip(t, dial(t, p.Addr()), fmt.Sprintf("connection %d", i))
	}
	// Three starting points, one of them dead and passed on to b: a gets a
	// third of the connections, b the rest.
	if got, want := a.accepted.Load(), int64(n/3); got != want {
		t.Errorf("target a accepted %d connections, want %d", got, want)
	}
	if got, want := b.accepted.Load(), int64(n-n/3); got != want {
		t.Errorf("target b accepted %d connections, want %d", got, want)
	}

	mu.Lock()
	targets = []string{b.l.Addr().String()}
	mu.Unlock()
	before := a.accepted.Load()
	for i := range 3 {
		roundTrip(t, dial(t, p.Addr()), fmt.Sprintf("only b, %d", i))
	}
	if a.accepted.Load() != before {
		t.Error("a target no longer listed still got a connection")
	}

	mu.Lock()
	targets = nil
	mu.Unlock()
	if err := refusedErr(t, p.Addr()); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Errorf("a connection with no target ended with %v, want a reset", err)
	}
}
