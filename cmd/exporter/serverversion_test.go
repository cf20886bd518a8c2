package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/watchprobe/watchprobe/pkg/probe/kube"
)

// The exporter asks an apiserver that does not answer yet again, and says
// what it runs once it does: a warning, once, for a release newer than the
// tested range; then it asks no more. A fake /version: what is tested is
// the exporter's own logic, not the apiserver's answer
// (TestCheckUntestedVersion asks a real one).
func TestServerVersionLoggedOnce(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/version" {
			http.NotFound(w, r)
			return
		}
		if asked.Add(1) <= 2 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"99","gitVersion":"v1.99.0"}`))
	}))
	defer srv.Close()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	logServerVersion(context.Background(), &rest.Config{Host: srv.URL}, logger)
	if n := asked.Load(); n != 3 {
		t.Errorf("asked /version %d times, want 3: twice unanswered, then once", n)
	}
	want := fmt.Sprintf("untested version: kube-apiserver v1.99.0 is newer than 1.%d", kube.NewestTestedMinor)
	if strings.Count(logs.String(), want) != 1 || !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("log, want one warning %q:\n%s", want, logs.String())
	}
}
