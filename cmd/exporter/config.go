package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/pkg/probe"
)

// fileConfig is the --config.file format: several probes, each validated by
// probe.Config as it is decoded.
type fileConfig struct {
	Probes []probe.Config `yaml:"probes"`
}

// loadConfig reads a config file, rejecting unknown fields, so that a typo
// is an error rather than a silently ignored setting.
func loadConfig(path string) ([]probe.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the file is empty; list at least one probe under \"probes\"", path)
		}
		// The YAML library names the Go type; say what the user can write.
		msg := strings.ReplaceAll(err.Error(), "not found in type main.fileConfig", "is not a top-level setting (known: probes)")
		return nil, fmt.Errorf("%s: %s", path, msg)
	}
	if len(cfg.Probes) == 0 {
		return nil, fmt.Errorf("%s: probes: list at least one probe", path)
	}
	seen := map[string]int{}
	for i, p := range cfg.Probes {
		if j, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("%s: probes[%d]: name %q is already used by probes[%d]; probe names must be unique", path, i, p.Name, j)
		}
		seen[p.Name] = i
		// Files are read now, so that a reload is refused before it stops
		// a running probe for one that cannot start.
		if err := p.CheckFiles(); err != nil {
			return nil, fmt.Errorf("%s: probe %q: %w", path, p.Name, err)
		}
	}
	return cfg.Probes, nil
}
