package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/watchprobe/watchprobe/pkg/check"
	"github.com/watchprobe/watchprobe/pkg/config"
)

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress shows how a check goes on stderr: on a terminal one live line,
// redrawn, with a line of its own for each failed cycle; elsewhere (CI
// logs) one plain line per judged cycle. Log lines pass through it, so
// that they do not garble the live line.
type progress struct {
	mu       sync.Mutex
	w        io.Writer
	live     bool
	shown    bool // the live line is on screen
	started  time.Time
	duration time.Duration // zero: until cycles
	cycles   int
	names    []string
	check    *check.Check
	stopDraw chan struct{} // closed by finish; the live line is redrawn until then
}

func newProgress(w io.Writer, live bool) *progress { return &progress{w: w, live: live} }

func (p *progress) start(at time.Time, kf *checkFlags, cfgs []config.Config, c *check.Check) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started, p.check = at, c
	if kf.durationSet {
		p.duration = kf.duration
	} else {
		p.cycles = kf.cycles
	}
	for _, cfg := range cfgs {
		p.names = append(p.names, cfg.Name)
	}
	what := fmt.Sprintf("%d cycles", kf.cycles)
	if kf.durationSet {
		what = kf.duration.String()
	}
	p.writeLocked(fmt.Sprintf("checking %s for %s\n", strings.Join(p.names, ", "), what))
	if p.live {
		p.stopDraw = make(chan struct{})
		go p.redraw(p.stopDraw)
	}
}

// Write passes a log line through.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeLocked(string(b))
	return len(b), nil
}

func (p *progress) println(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeLocked(s + "\n")
}

// writeLocked writes a whole line above the live line.
func (p *progress) writeLocked(s string) {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
	fmt.Fprint(p.w, s)
	p.drawLocked()
}

func (p *progress) cycle(name string, c cycleStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	result := "ok"
	switch {
	case c.Unmeasurable:
		result = "not judged: the exporter was starved"
	case !c.OK:
		result = "FAILED"
	}
	line := fmt.Sprintf("%8s  %s cycle %d %s", p.elapsedLocked(), name, c.Cycle, result)
	if len(c.Anomalies) > 0 {
		line += ": " + strings.Join(c.Anomalies, ", ")
	}
	if p.live && c.OK && len(c.Anomalies) == 0 {
		p.drawLocked() // a good cycle only moves the live line
		return
	}
	p.writeLocked(line + "\n")
}

// redraw keeps the live line's elapsed time and counts current.
func (p *progress) redraw(stop <-chan struct{}) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			p.mu.Lock()
			p.drawLocked()
			p.mu.Unlock()
		}
	}
}

func (p *progress) drawLocked() {
	if !p.live || p.check == nil {
		return
	}
	var parts []string
	for _, name := range p.names {
		c := p.check.Cycles(name)
		s := fmt.Sprintf("%s: %d cycles", name, c.Through)
		if p.cycles > 0 {
			s = fmt.Sprintf("%s: %d/%d cycles", name, c.Through, p.cycles)
		}
		if failed := c.Judged - c.OK; failed > 0 {
			s += fmt.Sprintf(" (%d failed)", failed)
		}
		parts = append(parts, s)
	}
	elapsed := p.elapsedLocked()
	if p.duration > 0 {
		elapsed += " / " + p.duration.String()
	}
	fmt.Fprintf(p.w, "\r\033[K%s  %s", elapsed, strings.Join(parts, "  "))
	p.shown = true
}

func (p *progress) elapsedLocked() string {
	return time.Since(p.started).Truncate(100 * time.Millisecond).String()
}

// finish clears the live line before the report.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopDraw != nil {
		close(p.stopDraw)
		p.stopDraw = nil
	}
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.shown = false
	p.live = false
}
