package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// cliFlag is one command-line flag as the exporter's --help-man shows it.
type cliFlag struct {
	Command string // "" for the flags of every command
	Name    string // without the leading --
	Default string
	Help    string
}

// helpMan runs the exporter binary's --help-man: kingpin's own model of
// every flag, one per .TP entry with its help on one line. $POD_NAME stands
// in for the replica's default, which is the host's name otherwise.
func helpMan(exporter string) (string, error) {
	cmd := exec.Command(exporter, "--help-man")
	cmd.Env = append(os.Environ(), "POD_NAME=$POD_NAME")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s --help-man: %w", exporter, err)
	}
	return string(out), nil
}

// kingpin's own flags, which every kingpin program has.
var builtinFlags = map[string]bool{"help": true, "help-long": true, "help-man": true, "version": true}

// parseFlags reads the flags of the man page: OPTIONS are the application's,
// each COMMANDS entry's are that command's.
func parseFlags(man string) ([]cliFlag, error) {
	lines := strings.Split(man, "\n")
	var out []cliFlag
	command := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case l == ".SS" && i+1 < len(lines):
			i++
			command = strings.Fields(strings.TrimPrefix(lines[i], `\fB`))[0]
		case l == ".TP" && i+2 < len(lines) && strings.HasPrefix(lines[i+1], `\fB`):
			f, err := parseFlag(lines[i+1], lines[i+2])
			if err != nil {
				return nil, err
			}
			i += 2
			if f.Name == "" || builtinFlags[f.Name] {
				continue // the synopsis, or kingpin's own flags
			}
			f.Command = command
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no flags in the --help-man output")
	}
	return out, nil
}

// parseFlag reads `\fB-h, --name=PLACEHOLDER\fR` and the help line under it.
// kingpin shows a default as the placeholder (quoted for strings), and a
// flag without one as its name in capitals; it shows no default for a
// boolean, so one that defaults to true says so by naming its --no- form.
func parseFlag(head, help string) (cliFlag, error) {
	head = strings.TrimSuffix(strings.TrimPrefix(head, `\fB`), `\fR`)
	if i := strings.Index(head, "--"); i >= 0 {
		head = head[i+2:]
	} else {
		return cliFlag{}, nil
	}
	f := cliFlag{Help: help}
	name, placeholder, hasValue := strings.Cut(head, "=")
	f.Name = name
	switch {
	case !hasValue:
		f.Default = "false"
		if strings.Contains(help, "--no-"+name) {
			f.Default = "true"
		}
	case placeholder == strings.ToUpper(name):
		// no default
	case strings.HasPrefix(placeholder, `"`):
		d, err := strconv.Unquote(placeholder)
		if err != nil {
			return cliFlag{}, fmt.Errorf("--%s: default %s: %w", name, placeholder, err)
		}
		f.Default = d
	default:
		f.Default = placeholder
	}
	return f, nil
}

// commandTitle heads a table of renderFlags: the flags of command.
type commandTitle struct{ command, title string }

// commandTitles head the exporter's tables, in their order.
var commandTitles = []commandTitle{
	{"", "Flags of every command"},
	{"serve", "`watchprobe serve` (the default command): the exporter"},
	{"check", "`watchprobe check`: probe a cluster once"},
}

// agentTitles head the node agent's table.
var agentTitles = []commandTitle{{"", "`watchprobe-agent`: the node agent"}}

// renderFlags is a generated flags reference of docs/configuration.md,
// one table per command in titles.
func renderFlags(flags []cliFlag, titles []commandTitle) (string, error) {
	var b strings.Builder
	done := 0
	for _, c := range titles {
		fmt.Fprintf(&b, "\n#### %s\n\n| flag | default | meaning |\n|---|---|---|\n", c.title)
		for _, f := range flags {
			if f.Command != c.command {
				continue
			}
			def := ""
			if f.Default != "" {
				def = "`" + f.Default + "`"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, def, cell(f.Help))
			done++
		}
	}
	if done != len(flags) {
		return "", fmt.Errorf("flags of a command renderFlags does not know: add it to the titles")
	}
	b.WriteString("\n")
	return b.String(), nil
}
