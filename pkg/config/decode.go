package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// File is the --config.file format: several probes, each validated as it
// is decoded.
type File struct {
	Probes []Config `yaml:"probes"`
}

// LoadFile reads a config file strictly: an unknown setting, a value of
// the wrong kind, a bad probe or two probes of one name is an error that
// names the file, the probe (or its line) and the field, and says what to
// write instead. The files the settings name are read too, so that a
// reload is refused before it stops a running probe for one that cannot
// start.
func LoadFile(path string) ([]Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfgs, err := decodeFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, p := range cfgs {
		if err := p.CheckFiles(); err != nil {
			return nil, fmt.Errorf("%s: probe %q: %w", path, p.Name, err)
		}
	}
	return cfgs, nil
}

// decodeFile decodes and checks a config file's contents.
func decodeFile(data []byte) ([]Config, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New(`the file is empty; list at least one probe under "probes"`)
		}
		// The YAML library names the Go type; say what the user can write.
		return nil, errors.New(strings.ReplaceAll(err.Error(), "not found in type config.File", "is not a top-level setting (known: probes)"))
	}
	if len(f.Probes) == 0 {
		return nil, errors.New("probes: list at least one probe")
	}
	seen := map[string]int{}
	for i, p := range f.Probes {
		if j, dup := seen[p.Name]; dup {
			return nil, fmt.Errorf("probes[%d]: name %q is already used by probes[%d]; probe names must be unique", i, p.Name, j)
		}
		seen[p.Name] = i
	}
	return f.Probes, nil
}

// decodeStrict decodes node, a mapping of the settings of T under prefix,
// with decode, which decodes into T without T's own UnmarshalYAML (the
// yaml library does not pass its KnownFields on to that): a key T does not
// have is an error, and so is a value that is not a duration where T has
// one, naming the key.
func decodeStrict[T any](node *yaml.Node, prefix string, decode func() error) error {
	known := yamlFields[T]()
	if node.Kind == yaml.MappingNode {
		for i := 0; i < len(node.Content); i += 2 {
			if key := node.Content[i]; !slices.Contains(known, key.Value) {
				return fmt.Errorf("%s%s: is not a setting (line %d; known: %s)", prefix, key.Value, key.Line, strings.Join(known, ", "))
			}
		}
	}
	err := decode()
	if err == nil {
		return nil
	}
	// The yaml library reports a bad duration without saying which one.
	durations := durationFields[T]()
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, value := node.Content[i].Value, node.Content[i+1]
		if !slices.Contains(durations, key) {
			continue
		}
		values := []*yaml.Node{value}
		if value.Kind == yaml.SequenceNode {
			values = value.Content
		}
		for j, v := range values {
			if _, perr := model.ParseDuration(v.Value); perr != nil {
				name := prefix + key
				if value.Kind == yaml.SequenceNode {
					name = fmt.Sprintf("%s[%d]", name, j)
				}
				return fmt.Errorf("%s: %q is not a duration; write a number and a unit, e.g. 10s or 1m", name, v.Value)
			}
		}
	}
	return err
}

// yamlFields are the YAML keys of T's exported fields, from their tags.
func yamlFields[T any]() []string {
	var fields []string
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			fields = append(fields, f.Tag.Get("yaml"))
		}
	}
	return fields
}

// durationFields are the YAML keys of T's durations and lists of them.
func durationFields[T any]() []string {
	duration := reflect.TypeFor[model.Duration]()
	var fields []string
	t := reflect.TypeFor[T]()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type == duration || (f.Type.Kind() == reflect.Slice && f.Type.Elem() == duration) {
			fields = append(fields, f.Tag.Get("yaml"))
		}
	}
	return fields
}

// UnmarshalYAML fills defaults for absent fields and rejects bad values, so
// that a config that loads is a config that runs. Errors name the probe (or
// its line, when it has no name) and the field.
func (c *Config) UnmarshalYAML(node *yaml.Node) error {
	*c = DefaultConfig()
	c.Name = ""
	type plain Config
	if err := decodeStrict[Config](node, "", func() error { return node.Decode((*plain)(c)) }); err != nil {
		return fmt.Errorf("probe at line %d: %w", node.Line, err)
	}
	if err := c.Validate(); err != nil {
		if c.Name == "" {
			return fmt.Errorf("probe at line %d: %w", node.Line, err)
		}
		return fmt.Errorf("probe %q (line %d): %w", c.Name, node.Line, err)
	}
	return nil
}

// UnmarshalYAML fills the defaults of DefaultConfig's etcd settings.
func (e *EtcdConfig) UnmarshalYAML(node *yaml.Node) error {
	*e = DefaultConfig().Etcd
	type plain EtcdConfig
	return decodeStrict[EtcdConfig](node, "etcd.", func() error { return node.Decode((*plain)(e)) })
}

// UnmarshalYAML takes `discover`, a list of endpoints, or the full mapping.
func (a *APIServersConfig) UnmarshalYAML(node *yaml.Node) error {
	*a = DefaultConfig().APIServers
	switch node.Kind {
	case yaml.ScalarNode:
		if node.Value != DiscoverAPIServers {
			return fmt.Errorf("apiservers: %q is not a setting; write `apiservers: discover`, a list of host:port, or a mapping with discover, endpoints, server_name, retire_after, series_grace", node.Value)
		}
		a.Discover = true
		return nil
	case yaml.SequenceNode:
		return node.Decode(&a.Endpoints)
	}
	type plain APIServersConfig
	return decodeStrict[APIServersConfig](node, "apiservers.", func() error { return node.Decode((*plain)(a)) })
}

// UnmarshalYAML fills the defaults of DefaultResumeConfig: `resume: {}`
// turns the checks on with them.
func (r *ResumeConfig) UnmarshalYAML(node *yaml.Node) error {
	*r = DefaultResumeConfig()
	r.set = true
	type plain ResumeConfig
	return decodeSection[ResumeConfig](node, "resume", "{ages: [10s, 60s, 2m], every: 1m}", func() error { return node.Decode((*plain)(r)) })
}

// MarshalYAML writes checks that are off as null, which loads back as off:
// written as a mapping, an empty list of ages is an error.
func (r ResumeConfig) MarshalYAML() (any, error) {
	type plain ResumeConfig
	return sectionOrNull(r.Enabled(), plain(r))
}

// decodeSection decodes the mapping of an optional section of checks, name,
// strictly; example is a mapping the error for anything else suggests.
func decodeSection[T any](node *yaml.Node, name, example string, decode func() error) error {
	if node.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: %q is not a setting; write a mapping, e.g. `%s: %s`, or `%s: {}` for the defaults", name, node.Value, name, example, name)
	}
	return decodeStrict[T](node, name+".", decode)
}

// sectionOrNull is an optional section as written: null while its checks
// are off.
func sectionOrNull[T any](on bool, section T) (any, error) {
	if !on {
		return nil, nil
	}
	return section, nil
}
