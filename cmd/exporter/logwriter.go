package main

import (
	"io"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// logBuffer is how many log records wait for their destination before
// more are dropped.
const logBuffer = 4096

// logWriter hands each log record to a goroutine that writes it out, so
// that logging never waits for its destination: the probes log their
// outcomes from whichever goroutine concluded them (a path's, the
// sweeper's), and a full stderr pipe, as a stuck log collector leaves it,
// must not stop them. Records beyond logBuffer are dropped and counted.
// The log handler writes each record with one Write.
type logWriter struct {
	out     io.Writer
	dropped prometheus.Counter
	records chan []byte
	done    chan struct{}

	mu     sync.RWMutex
	closed bool
}

func newLogWriter(out io.Writer, dropped prometheus.Counter) *logWriter {
	w := &logWriter{out: out, dropped: dropped, records: make(chan []byte, logBuffer), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for r := range w.records {
			_, _ = w.out.Write(r)
		}
	}()
	return w
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		// The process is ending: the last words are written as they come.
		return w.out.Write(p)
	}
	select {
	case w.records <- slices.Clone(p):
	default:
		w.dropped.Inc()
	}
	return len(p), nil
}

// Close writes out what waits, for up to flushTimeout (a destination that
// takes nothing must not keep the process from ending), and stops the
// goroutine; later records are written at once.
func (w *logWriter) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.records)
	}
	w.mu.Unlock()
	select {
	case <-w.done:
	case <-time.After(flushTimeout):
	}
	return nil
}

const flushTimeout = 5 * time.Second
