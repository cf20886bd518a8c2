package main

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

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
	var want bytes.Buffer
	for i := range n {
		line := fmt.Sprintf("record %d\n", i)
		if _, err := w.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
		want.WriteString(line)
	}
	lost := int(testutil.ToFloat64(dropped))
	if lost == 0 {
		t.Fatalf("%d records into a buffer of %d with nothing taken, none dropped", n, logBuffer)
	}
	close(out.released)
	w.Close()
	kept := n - lost
	wantKept := bytes.Join(bytes.SplitAfter(want.Bytes(), []byte("\n"))[:kept], nil)
	if got := out.buf.Bytes(); !bytes.Equal(got, wantKept) {
		t.Errorf("wrote %d bytes, want the first %d records in order (%d bytes)", len(got), kept, len(wantKept))
	}
}
