package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// stuckWriter takes nothing until released, as a full pipe.
type stuckWriter struct {
	released chan struct{}
	mu       sync.Mutex
	buf      bytes.Buffer
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	<-s.released
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// Logging never waits for a destination that takes nothing: every Write
// returns, what does not fit the buffer is counted dropped, and what was
// kept is written, in order, once the destination takes it.
func TestLogWriterNeverBlocks(t *testing.T) {
	out := &stuckWriter{released: make(chan struct{})}
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	w := newLogWriter(out, dropped)
	const n = 2 * logBuffer
	// Writing runs apart, so that a Write that blocks fails the test
	// rather than hanging it until the package's timeout.
	wrote := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := fmt.Fprintf(w, "record %d\n", i); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		close(out.released)
		t.Fatalf("%d records into a buffer of %d: a Write still blocked after a minute behind a destination that takes nothing", n, logBuffer)
	}
	lost := int(testutil.ToFloat64(dropped))
	if lost == 0 {
		t.Fatalf("%d records into a buffer of %d with nothing taken, none dropped", n, logBuffer)
	}
	close(out.released)
	w.Close()
	// Which records are dropped depends on when the writing goroutine took
	// the first one off the buffer; every record kept is written once, in
	// order, and the first always is.
	lines := strings.SplitAfter(out.buf.String(), "\n")
	lines = lines[:len(lines)-1] // after the last newline
	if len(lines) != n-lost {
		t.Errorf("wrote %d records, want the %d of %d not dropped", len(lines), n-lost, n)
	}
	last := -1
	for _, l := range lines {
		var i int
		if _, err := fmt.Sscanf(l, "record %d\n", &i); err != nil || i <= last {
			t.Fatalf("record %q after record %d: want every kept record whole and in order", l, last)
		}
		last = i
	}
	if len(lines) > 0 && lines[0] != "record 0\n" {
		t.Errorf("first record written %q, want record 0", lines[0])
	}
}
