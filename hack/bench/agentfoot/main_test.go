package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/internal/procstat"
	"github.com/watchprobe/watchprobe/internal/repotest"
)

// The inittrace lines the Go runtime prints are summed, whatever else the
// binary printed between them, and the largest kept in order.
func TestParseInitTrace(t *testing.T) {
	out := `init internal/bytealg @0.008 ms, 0 ms clock, 0 bytes, 0 allocs
watchprobe-agent, version bench
init k8s.io/api/core/v1 @51 ms, 0.12 ms clock, 99976 bytes, 553 allocs
init google.golang.org/protobuf/reflect/protodesc @8.2 ms, 0.42 ms clock, 164480 bytes, 980 allocs
`
	got := parseInitTrace(out)
	if got.count != 3 || got.bytes != 99976+164480 || got.alloc != 553+980 {
		t.Errorf("count %d, bytes %d, allocs %d; want 3, %d, %d", got.count, got.bytes, got.alloc, 99976+164480, 553+980)
	}
	if len(got.top) != 3 || got.top[0].pkg != "google.golang.org/protobuf/reflect/protodesc" || got.top[1].pkg != "k8s.io/api/core/v1" {
		t.Errorf("largest inits %+v, want protodesc then core/v1", got.top)
	}
}

// A scrape sums each family's samples, labelled or not, and skips comments.
func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP watchprobe_agent_writes_total x
# TYPE watchprobe_agent_writes_total counter
watchprobe_agent_writes_total{node="n1",zone="a b"} 33
watchprobe_agent_event_latency_seconds_count{node="n1",zone=""} 30
unlabelled 2.5
`)
	}))
	defer srv.Close()
	got, err := scrape(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"watchprobe_agent_writes_total": 33, "watchprobe_agent_event_latency_seconds_count": 30, "unlabelled": 2.5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("scraped %v, want %v", got, want)
	}
}

// The report is Markdown: every table has blank lines around it and its
// rows have their header's cells.
func TestReportIsMarkdown(t *testing.T) {
	b := func(name string) *build {
		return &build{name: name, size: 30e6, modules: 79, inits: initTrace{count: 2, top: []initLine{{"a", 0.1, 100}}}, writes: [2]float64{3, 33},
			last: procSample{Sample: procstat.Sample{Peak: 30 << 20, Anon: 8 << 20, File: 22 << 20}}, cg1: cgroupSample{usage: 9 << 20}}
	}
	var w strings.Builder
	report(&w, options{window: 5 * time.Minute, scrapeEvery: 30 * time.Second}, []*build{b("release build"), b("variant")}, "1.0")
	tables, problems := repotest.Tables(w.String())
	for _, p := range problems {
		t.Error(p)
	}
	if tables != 2 {
		t.Errorf("%d tables, want 2 (the builds, the inits):\n%s", tables, w.String())
	}
}
