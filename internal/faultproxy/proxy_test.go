package faultproxy_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/watchprobe/watchprobe/internal/faultproxy"
	"github.com/watchprobe/watchprobe/internal/localcluster"
)

// The proxy against a stand-in apiserver that streams the watch events a
// test hands it, one stream per namespace: what the faults limited to some
// streams do to those and not to the others, and what the proxy records.

// standIn serves a watch of configmaps in each namespace of events,
// sending what the test puts on that namespace's channel.
func standIn(t *testing.T, certPEM, keyPEM []byte, events map[string]chan string) *httptest.Server {
	t.Helper()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// /api/v1/namespaces/NS/configmaps
		ns := strings.Split(r.URL.Path, "/")[4]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for {
			select {
			case line := <-events[ns]:
				fmt.Fprintln(w, line)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// watchThrough opens a watch of ns through the proxy and returns its lines
// as they arrive, and whether the stream ended (closed when it does).
func watchThrough(t *testing.T, p *faultproxy.Proxy, caPEM []byte, ns string) (lines chan string, ended chan struct{}) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get(p.URL + "/api/v1/namespaces/" + ns + "/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	lines, ended = make(chan string, 100), make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	return lines, ended
}

func event(ns, name, rv string) string {
	return fmt.Sprintf(`{"type":"MODIFIED","object":{"metadata":{"name":%q,"namespace":%q,"resourceVersion":%q}}}`, name, ns, rv)
}

func receive(t *testing.T, lines chan string, within time.Duration) (string, bool) {
	t.Helper()
	select {
	case l := <-lines:
		return l, true
	case <-time.After(within):
		return "", false
	}
}

func inNamespace(ns string) faultproxy.RequestMatch {
	return func(r faultproxy.Request) bool { return r.Namespace == ns }
}

// Stalls, delays and cuts limited to one namespace's stream leave the other
// stream alone, and each event held or stream cut is recorded with its
// request; a delay that ends releases what it held at once.
func TestFaultsLimitedToStreams(t *testing.T) {
	caPEM, certPEM, keyPEM := localcluster.CertificateForTest(t, "localhost")
	events := map[string]chan string{"a": make(chan string), "b": make(chan string)}
	up := standIn(t, certPEM, keyPEM, events)
	p, err := faultproxy.New(up.URL, caPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, aEnded := watchThrough(t, p, caPEM, "a")
	b, bEnded := watchThrough(t, p, caPEM, "b")

	// Stalled: a holds its event until Resume, b passes its own.
	p.StallStreams(inNamespace("a"))
	events["a"] <- event("a", "m1", "1")
	events["b"] <- event("b", "m2", "2")
	if _, ok := receive(t, b, 5*time.Second); !ok {
		t.Fatal("b's event held while only a is stalled")
	}
	if _, ok := receive(t, a, 300*time.Millisecond); ok {
		t.Fatal("a's event passed while a is stalled")
	}
	p.Resume()
	if _, ok := receive(t, a, 5*time.Second); !ok {
		t.Fatal("a's event still held after Resume")
	}
	recs := p.Records()
	if len(recs) != 1 || recs[0].Fault != faultproxy.Stall || recs[0].Request.Namespace != "a" || recs[0].Event.Name != "m1" || recs[0].Held < 300*time.Millisecond {
		t.Fatalf("records after the stall: %+v, want one Stall of a's m1 held 300 ms or more", recs)
	}

	// Delayed for a minute, then the delay ends: released at once.
	p.DelayStreams(time.Minute, inNamespace("a"))
	events["a"] <- event("a", "m3", "3")
	events["b"] <- event("b", "m4", "4")
	if _, ok := receive(t, b, 5*time.Second); !ok {
		t.Fatal("b's event delayed while only a is")
	}
	time.Sleep(100 * time.Millisecond) // a's event is waiting out its delay
	p.DelayStreams(0, nil)
	if _, ok := receive(t, a, 5*time.Second); !ok {
		t.Fatal("a's event still held after its delay ended")
	}
	if recs := p.Records()[1:]; len(recs) != 1 || recs[0].Fault != faultproxy.Delay || recs[0].Event.Name != "m3" || recs[0].Held >= time.Minute {
		t.Fatalf("records after the delay: %+v, want one Delay of a's m3, held less than the minute", recs)
	}

	// A rule's fault is recorded with the event and the stream's request.
	p.Drop(1, func(ev faultproxy.Event) bool { return ev.Namespace == "a" })
	events["a"] <- event("a", "m5", "5")
	events["a"] <- event("a", "m6", "6")
	if l, _ := receive(t, a, 5*time.Second); !strings.Contains(l, `"m6"`) {
		t.Fatalf("after dropping m5, a delivered %q, want m6", l)
	}
	if recs := p.Records()[2:]; len(recs) != 1 || recs[0].Fault != faultproxy.Drop || recs[0].Event.ResourceVersion != "5" || recs[0].Request.Kind != "watch" {
		t.Fatalf("records after the drop: %+v, want one Drop of resourceVersion 5 on a watch", recs)
	}

	// Cut: a's connection alone.
	if n := p.CutStreams(inNamespace("a")); n != 1 {
		t.Fatalf("CutStreams cut %d streams, want a's one", n)
	}
	select {
	case <-aEnded:
	case <-time.After(5 * time.Second):
		t.Fatal("a's stream still open after its cut")
	}
	events["b"] <- event("b", "m7", "7")
	if _, ok := receive(t, b, 5*time.Second); !ok {
		t.Fatal("b's stream stopped by a's cut")
	}
	select {
	case <-bEnded:
		t.Fatal("b's stream ended with a's cut")
	default:
	}
	if recs := p.Records()[3:]; len(recs) != 1 || recs[0].Fault != faultproxy.Cut || recs[0].Request.Namespace != "a" {
		t.Fatalf("records after the cut: %+v, want one Cut of a's stream", recs)
	}
	if got := p.Applied(faultproxy.Cut) + p.Applied(faultproxy.Stall) + p.Applied(faultproxy.Delay) + p.Applied(faultproxy.Drop); got != 4 {
		t.Errorf("Applied counts %d of these faults, want 4, one per record", got)
	}
}
