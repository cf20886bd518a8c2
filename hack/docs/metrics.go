package main

import (
	"fmt"
	"strings"

	"github.com/watchprobe/watchprobe/pkg/metrics"
)

// family is one metric family as the reference lists it.
type family struct {
	Name, Type, Help, Group string
	Labels                  []string
}

// families are every family of pkg/metrics' table.
func families() []family {
	var out []family
	for _, f := range metrics.Families {
		out = append(out, family{Name: f.FullName(), Type: f.Type.String(), Help: f.Help, Group: f.Group, Labels: f.LabelNames()})
	}
	return out
}

// renderMetrics is the generated part of docs/metrics.md: a table per
// group of every family.
func renderMetrics(fams []family) string {
	var b strings.Builder
	for _, g := range metrics.Groups {
		fmt.Fprintf(&b, "\n### %s\n\n| metric | type | labels | meaning |\n|---|---|---|---|\n", g)
		for _, f := range fams {
			if f.Group != g {
				continue
			}
			labels := make([]string, len(f.Labels))
			for i, l := range f.Labels {
				labels[i] = "`" + l + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, f.Type, strings.Join(labels, ", "), cell(f.Help))
		}
	}
	b.WriteString("\n")
	return b.String()
}
