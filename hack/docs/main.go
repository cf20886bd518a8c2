// Command docs writes the parts of the documentation that come from the
// code or from a run, between BEGIN and END comments in the Markdown: the
// metrics reference from pkg/metrics' registry, the flags reference from
// the exporter's --help-man, `make bench`'s tables, and the demo's sample
// output. Its tests keep them current and check links, anchors and every
// metric, flag, chart value and alert the documentation names.
//
// Run from the repository's root:
//
//	go run ./hack/docs -exporter bin/watchprobe   # make docs
//	go run ./hack/docs -bench out/bench.md -bench-agents out/agentcost.md  # make bench-docs
//	go run ./hack/docs -demo 6                    # make demo-output
package main

import (
	"flag"
	"fmt"
	"os"
)

// The generated blocks: the file, the block's name and the command that
// rewrites it.
const (
	metricsDoc = "docs/metrics.md"
	configDoc  = "docs/configuration.md"
	perfDoc    = "docs/performance.md"
	byDocs     = "make docs"
)

func main() {
	exporter := flag.String("exporter", "", "the exporter binary whose --help-man gives the flags reference (make docs passes bin/watchprobe)")
	agent := flag.String("agent", "", "the node agent binary whose --help-man gives its flags reference (make docs passes bin/watchprobe-agent)")
	bench := flag.String("bench", "", "instead, put this Markdown from `make bench` (out/bench.md) into "+perfDoc)
	benchAgents := flag.String("bench-agents", "", "instead (or with -bench), put this Markdown from `make bench`'s simulated agents (out/agentcost.md) into "+perfDoc)
	demo := flag.Int("demo", 0, "instead, run `make demo` until it has printed this many summary lines (one every 5 s) and put its output into README.md")
	flag.Parse()
	var err error
	switch {
	case *bench != "" || *benchAgents != "":
		err = spliceBench(*bench, *benchAgents)
	case *demo > 0:
		err = refreshDemo(".", *demo)
	case *exporter == "" || *agent == "":
		err = fmt.Errorf("-exporter and -agent are required")
	default:
		err = generate(*exporter, *agent)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
}

// generate rewrites the metrics and flags references.
func generate(exporter, agent string) error {
	if err := rewrite(metricsDoc, "metrics", byDocs, renderMetrics(families())); err != nil {
		return err
	}
	flags, err := binaryFlags(exporter, commandTitles)
	if err != nil {
		return err
	}
	if err := rewrite(configDoc, "flags", byDocs, flags); err != nil {
		return err
	}
	if flags, err = binaryFlags(agent, agentTitles); err != nil {
		return err
	}
	return rewrite(configDoc, "agent-flags", byDocs, flags)
}

// binaryFlags is the flags reference of a binary, its commands under titles.
func binaryFlags(bin string, titles []commandTitle) (string, error) {
	man, err := helpMan(bin)
	if err != nil {
		return "", err
	}
	flags, err := parseFlags(man)
	if err != nil {
		return "", err
	}
	return renderFlags(flags, titles)
}

// spliceBench puts the exporter's tables (bench) and the simulated agents'
// (agents), each if given, into their blocks.
func spliceBench(bench, agents string) error {
	for _, b := range []struct{ path, block string }{{bench, "bench"}, {agents, "agents"}} {
		if b.path == "" {
			continue
		}
		tables, err := os.ReadFile(b.path)
		if err != nil {
			return err
		}
		if err := rewrite(perfDoc, b.block, "make bench-docs", "\n"+string(tables)+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// rewrite replaces the named block of a Markdown file.
func rewrite(path, name, by, body string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := splice(string(doc), name, by, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}
