package exportertest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const exposition = `# TYPE watchprobe_writes_total counter
watchprobe_writes_total{probe="a",verb="create"} 3
watchprobe_writes_total{probe="a",verb="update"} 4
watchprobe_writes_total{probe="b",verb="create"} 5
# TYPE go_goroutines gauge
go_goroutines 12
`

// Sum adds the samples whose labels include the match, an empty value
// matching an absent label, and tells no match from a sum of zero.
func TestSum(t *testing.T) {
	families, err := Parse(exposition)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		match map[string]string
		sum   float64
		found bool
	}{
		{"watchprobe_writes_total", nil, 12, true},
		{"watchprobe_writes_total", map[string]string{"probe": "a"}, 7, true},
		{"watchprobe_writes_total", map[string]string{"probe": "a", "verb": "create"}, 3, true},
		{"watchprobe_writes_total", map[string]string{"probe": "c"}, 0, false},
		{"watchprobe_writes_total", map[string]string{"path": ""}, 12, true},
		{"go_goroutines", nil, 12, true},
		{"absent", nil, 0, false},
	} {
		if sum, found := Sum(families, c.name, c.match); sum != c.sum || found != c.found {
			t.Errorf("Sum(%s, %v) = %g, %t; want %g, %t", c.name, c.match, sum, found, c.sum, c.found)
		}
	}
}

// A registry reads as its scrape would.
func TestGather(t *testing.T) {
	reg := prometheus.NewRegistry()
	writes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "watchprobe_writes_total", Help: "h"}, []string{"probe", "verb"})
	reg.MustRegister(writes)
	writes.WithLabelValues("a", "create").Add(3)
	writes.WithLabelValues("b", "create").Add(5)
	families, err := Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if sum, found := Sum(families, "watchprobe_writes_total", map[string]string{"verb": "create"}); sum != 8 || !found {
		t.Errorf("Sum = %g, %t; want 8, true", sum, found)
	}
}

// WaitPathsUp returns once every path is up, not while one is down or
// none is exposed, and gives up when the process exits.
func TestWaitPathsUp(t *testing.T) {
	var scrapes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := scrapes.Add(1)
		body := "# TYPE watchprobe_path_up gauge\n"
		if n > 1 {
			body += fmt.Sprintf("watchprobe_path_up{path=\"watch\"} 1\nwatchprobe_path_up{path=\"informer\"} %d\n", min(n-2, 1))
		}
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	p := &Process{URL: srv.URL, done: make(chan struct{})}
	if err := p.WaitPathsUp(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := scrapes.Load(); n != 3 {
		t.Errorf("up after %d scrapes, want 3 (none exposed, one down, all up)", n)
	}

	close(p.done)
	if err := p.WaitPathsUp(10 * time.Second); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("after the process exited: %v, want an error saying so", err)
	}
}
