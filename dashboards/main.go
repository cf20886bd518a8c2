// Command dashboards writes the watchprobe Grafana dashboard, generated with
// the Grafana Foundation SDK. `make dashboards` runs it; the JSON is
// committed, and a test fails when it is stale.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	out := flag.String("o", "dashboards/watchprobe.json", "file to write")
	clusterLabel := flag.String("cluster-label", defaultClusterLabel, "target label that tells clusters apart")
	flag.Parse()
	runbooks, err := defaultRunbooks()
	var data []byte
	if err == nil {
		data, err = build(*clusterLabel, runbooks)
	}
	if err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
}

// defaultRunbooks is docs/alerts.md at this release's tag, as the rules'
// runbook_url (the chart's prometheusRule.runbookUrlBase replaces both):
// a branch would move on from what the release's alerts are. The version
// is the repository's VERSION, found from the working directory up.
func defaultRunbooks() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if v, err := os.ReadFile(filepath.Join(dir, "VERSION")); err == nil {
			return "https://github.com/watchprobe/watchprobe/blob/v" + strings.TrimSpace(string(v)) + "/docs/alerts.md", nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no VERSION file in the working directory or above it")
		}
		dir = parent
	}
}
