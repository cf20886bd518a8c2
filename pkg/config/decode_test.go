package config

import (
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Whatever a config file holds, decoding it returns probes or an error,
// never panics, and every probe it returns is valid: a config that loads is
// a config that runs, and what the exporter serves at /config loads back
// as the same probes.
func FuzzDecodeFile(f *testing.F) {
	seeds, err := filepath.Glob("testdata/*.yml")
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seed config files: %v", err)
	}
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("probes:\n  - {name: a, resume: {}, apiservers: discover}\n"))
	f.Add([]byte("probes:\n  - name: a\n    resume: {ages: [10s, 1m], every: 30s}\n    lost_after: 2m\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgs, err := decodeFile(data)
		if err != nil {
			return
		}
		for _, c := range cfgs {
			if err := c.Validate(); err != nil {
				t.Fatalf("decoded an invalid probe %+v: %v", c, err)
			}
		}
		served, err := yaml.Marshal(File{Probes: cfgs})
		if err != nil {
			t.Fatalf("the probes do not marshal: %v", err)
		}
		again, err := decodeFile(served)
		if err != nil {
			t.Fatalf("the probes as served do not load back: %v\n%s", err, served)
		}
		if len(again) != len(cfgs) {
			t.Fatalf("%d probes load back from %d", len(again), len(cfgs))
		}
	})
}
