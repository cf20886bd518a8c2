// Command dashboards writes the watchprobe Grafana dashboard, generated with
// the Grafana Foundation SDK. `make dashboards` runs it; the JSON is
// committed, and a test fails when it is stale.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("o", "dashboards/watchprobe.json", "file to write")
	clusterLabel := flag.String("cluster-label", defaultClusterLabel, "target label that tells clusters apart")
	flag.Parse()
	data, err := build(*clusterLabel)
	if err == nil {
		err = os.WriteFile(*out, data, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
}
