package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/internal/repotest"
	"github.com/watchprobe/watchprobe/pkg/config"
)

// root is the repository, seen from this package's directory, where go
// test runs.
const root = "../.."

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// userDocs are the pages a user reads: the README and docs/.
func userDocs(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		out = append(out, filepath.ToSlash(strings.TrimPrefix(p, root+"/")))
	}
	return out
}

// builds are the binaries the tests built, by name.
var (
	buildsMu sync.Mutex
	builds   = map[string]*buildResult{}
)

type buildResult struct {
	bin string
	err error
}

// exporter builds the exporter once for the tests that read its flags.
func exporter(t *testing.T) string { return built(t, "watchprobe", "../../cmd/exporter") }

// agent builds the node agent once for the test of its flags.
func agent(t *testing.T) string { return built(t, "watchprobe-agent", "../../cmd/agent") }

// built builds the binary name from pkg once per test binary.
func built(t *testing.T, name, pkg string) string {
	t.Helper()
	buildsMu.Lock()
	defer buildsMu.Unlock()
	b := builds[name]
	if b == nil {
		b = &buildResult{}
		builds[name] = b
		dir, err := os.MkdirTemp("", "watchprobe-docs-")
		if err != nil {
			b.err = err
		} else {
			b.bin = filepath.Join(dir, name)
			if out, err := exec.Command("go", "build", "-o", b.bin, pkg).CombinedOutput(); err != nil {
				b.err = &buildError{err, string(out)}
			}
		}
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

func TestMain(m *testing.M) {
	code := m.Run()
	for _, b := range builds {
		if b.bin != "" {
			os.RemoveAll(filepath.Dir(b.bin))
		}
	}
	os.Exit(code)
}

func exporterFlagSet(t *testing.T) map[string]cliFlag { return flagSet(t, exporter(t)) }

func flagSet(t *testing.T, bin string) map[string]cliFlag {
	t.Helper()
	man, err := helpMan(bin)
	if err != nil {
		t.Fatal(err)
	}
	flags, err := parseFlags(man)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cliFlag{}
	for _, f := range flags {
		out[f.Name] = f
	}
	return out
}

// docs/metrics.md's reference is what the registry says, and names every
// registered family, and nothing else.
func TestMetricsReferenceIsCurrent(t *testing.T) {
	fams := families()
	doc := read(t, metricsDoc)
	got, err := block(doc, "metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got != renderMetrics(fams) {
		t.Errorf("%s is stale: run `make docs`", metricsDoc)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(watchprobe_\\w+)` \\|").FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	for _, f := range fams {
		if !documented[f.Name] {
			t.Errorf("%s is registered but has no row in %s", f.Name, metricsDoc)
		}
		delete(documented, f.Name)
	}
	for name := range documented {
		t.Errorf("%s has a row in %s but is not registered", name, metricsDoc)
	}
}

// docs/configuration.md's flags are what the exporter's and the node
// agent's --help-man say.
func TestFlagsReferenceIsCurrent(t *testing.T) {
	for _, c := range []struct {
		block  string
		bin    string
		titles []commandTitle
	}{{"flags", exporter(t), commandTitles}, {"agent-flags", agent(t), agentTitles}} {
		want, err := binaryFlags(c.bin, c.titles)
		if err != nil {
			t.Fatal(err)
		}
		got, err := block(read(t, configDoc), c.block)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s's %s block is stale: run `make docs`", configDoc, c.block)
		}
	}
}

// configKeys are the config file's keys, from the yaml tags of
// config.Config and of its nested settings: all of them, and the leaves (a
// block such as etcd is documented by its fields).
func configKeys() (all, leaves []string) {
	var walk func(reflect.Type, string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			tag := f.Tag.Get("yaml")
			if tag == "" || tag == "-" {
				continue
			}
			all = append(all, prefix+tag)
			if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == typ.PkgPath() {
				walk(f.Type, prefix+tag+".")
			} else {
				leaves = append(leaves, prefix+tag)
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	return all, leaves
}

// Every field of the config file has a row in docs/configuration.md's
// table, and every row there is a field.
func TestConfigFileFieldsAreDocumented(t *testing.T) {
	doc := read(t, configDoc)
	start := strings.Index(doc, "\n## The config file\n")
	if start < 0 {
		t.Fatalf("%s has no section \"## The config file\"", configDoc)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_.]+)` \\|").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = true
	}
	keys, leaves := configKeys()
	for _, k := range leaves {
		if !rows[k] {
			t.Errorf("config field %s has no row in %s's config file table", k, configDoc)
		}
	}
	for k := range rows {
		if !slices.Contains(keys, k) {
			t.Errorf("%s documents a config field %s that config.Config does not have", configDoc, k)
		}
	}
}

var (
	metricMention = regexp.MustCompile(`(^|[^:\w])(watchprobe_[a-z0-9_]*)((?:\\?\*)?)`)
	flagMention   = regexp.MustCompile(`(^|[^\w-])--([a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+)`)
	flagDefault   = regexp.MustCompile("(?m)^\\| `--([a-z0-9.-]+)` \\| `([^`]*)` \\|")
	codeSpans     = regexp.MustCompile("`([^`\n]+)`")
	valuePath     = regexp.MustCompile(`^([a-z][a-zA-Z0-9]*(?:\.[a-zA-Z][a-zA-Z0-9]*)+)(?:[=:,]|$)`)
	setFlag       = regexp.MustCompile(`--set ([^ \\\n]+)`)
)

// The exporter's flags live under these prefixes; other tools' flags in
// the docs (helm, Prometheus, kube-apiserver) have other names.
var flagPrefixes = []string{"probe.", "web.", "config.", "metrics.", "marker.", "objective.", "agents.", "log.", "tracing.", "agent."}

// Flags of other tools under the exporter's prefixes, which the docs name
// for those tools: Prometheus's, in the multi-cluster setup.
var otherToolsFlags = []string{"web.enable-remote-write-receiver"}

// The README and docs name no metric, flag or chart value that does not
// exist, and a flag's default in a table is its default.
func TestDocsNameOnlyWhatExists(t *testing.T) {
	fams := families()
	flags := exporterFlagSet(t)
	agentFlags := flagSet(t, agent(t))
	values := chartValues(t)
	keys, _ := configKeys()
	for _, page := range userDocs(t) {
		doc := read(t, page)
		for _, m := range metricMention.FindAllStringSubmatch(doc, -1) {
			// watchprobe_config_* and a bare watchprobe_ are prefixes.
			name, prefix := m[2], m[3] != "" || strings.HasSuffix(m[2], "_")
			if !metricExists(fams, name, prefix) {
				t.Errorf("%s: names metric %s%s, which the exporter does not register", page, name, m[3])
			}
		}
		for _, m := range flagMention.FindAllStringSubmatch(doc, -1) {
			name := strings.TrimPrefix(m[2], "no-")
			if !slices.ContainsFunc(flagPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) || slices.Contains(otherToolsFlags, name) {
				continue
			}
			_, ok := flags[name]
			if _, agents := agentFlags[name]; !ok && !agents {
				t.Errorf("%s: names flag --%s, which neither the exporter nor the node agent has", page, m[2])
			}
		}
		// The node agent's flags reference is generated from its own
		// flags (TestFlagsReferenceIsCurrent); the rest names the
		// exporter's.
		exporterDoc := doc
		if i, j := strings.Index(doc, "<!-- BEGIN agent-flags"), strings.Index(doc, "<!-- END agent-flags -->"); i >= 0 && j > i {
			exporterDoc = doc[:i] + doc[j:]
		}
		for _, m := range flagDefault.FindAllStringSubmatch(exporterDoc, -1) {
			if f, ok := flags[m[1]]; ok && f.Default != m[2] {
				t.Errorf("%s: --%s defaults to %q, not %q", page, m[1], f.Default, m[2])
			}
		}
		var paths []string
		for _, m := range codeSpans.FindAllStringSubmatch(doc, -1) {
			if v := valuePath.FindStringSubmatch(m[1]); v != nil {
				paths = append(paths, v[1])
			}
		}
		for _, m := range setFlag.FindAllStringSubmatch(doc, -1) {
			for _, kv := range strings.Split(m[1], ",") {
				paths = append(paths, strings.SplitN(kv, "=", 2)[0])
			}
		}
		for _, p := range paths {
			if !slices.Contains(keys, p) && !valueExists(values, p) {
				t.Errorf("%s: names chart value %s, which charts/watchprobe/values.yaml does not have", page, p)
			}
		}
	}
}

func metricExists(fams []family, name string, prefix bool) bool {
	for _, f := range fams {
		if prefix && strings.HasPrefix(f.Name, name) {
			return true
		}
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if !prefix && f.Name+suffix == name {
				return true
			}
		}
	}
	return false
}

func chartValues(t *testing.T) map[string]any {
	t.Helper()
	var values map[string]any
	if err := yaml.Unmarshal([]byte(read(t, "charts/watchprobe/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	return values
}

// valueExists says whether a dotted path names a chart value. Only paths
// whose first key is a top-level value count as chart values (anything
// else in backticks is not one); below a value that is an empty map, any
// key is the user's. helm's global values are not in values.yaml.
func valueExists(values map[string]any, path string) bool {
	keys := strings.Split(path, ".")
	if _, ok := values[keys[0]]; !ok || keys[0] == "global" {
		return true
	}
	switch keys[len(keys)-1] {
	case "md", "json", "yml", "yaml", "go", "txt", "tpl", "sh", "gz":
		return true // a file name
	}
	var cur any = values
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if len(m) == 0 {
			return true
		}
		if cur, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

// Every link between the README, docs/ and the CHANGELOG leads to a file
// that exists, and every anchor to a heading there.
func TestLinksAndAnchors(t *testing.T) {
	for _, page := range append(userDocs(t), "CHANGELOG.md") {
		for _, target := range repotest.Links(read(t, page)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
			}
			if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
				t.Errorf("%s: link %s: %s does not exist", page, target, dest)
				continue
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !repotest.Anchors(read(t, dest))[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", page, target, dest, anchor)
			}
		}
	}
}

// Every alert in the rules (the exporter's and the node agents') has a
// runbook section in docs/alerts.md whose heading is its name, a
// runbook_url that leads there, and a row in the README's table with its
// severities; and every runbook section is an alert's.
func TestEveryAlertHasARunbook(t *testing.T) {
	type rulesFile struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	var file rulesFile
	for _, f := range []string{"rules/watchprobe.rules.yml", "rules/watchprobe.agent.rules.yml"} {
		var one rulesFile
		if err := yaml.Unmarshal([]byte(read(t, f)), &one); err != nil {
			t.Fatal(err)
		}
		file.Groups = append(file.Groups, one.Groups...)
	}
	severities := map[string][]string{}
	var order []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if severities[r.Alert] == nil {
				order = append(order, r.Alert)
			}
			// An alert in several rules (windows, vantage-point forms)
			// lists each severity once, in the order the rules give them.
			if !slices.Contains(severities[r.Alert], r.Labels["severity"]) {
				severities[r.Alert] = append(severities[r.Alert], r.Labels["severity"])
			}
			anchor := strings.ToLower(r.Alert)
			if url := r.Annotations["runbook_url"]; !strings.HasSuffix(url, "docs/alerts.md#"+anchor) {
				t.Errorf("%s: runbook_url %s does not lead to docs/alerts.md#%s", r.Alert, url, anchor)
			}
		}
	}
	alerts, readme := read(t, "docs/alerts.md"), read(t, "README.md")
	sections := regexp.MustCompile(`(?m)^## (Watchprobe\w*)$`).FindAllStringSubmatch(alerts, -1)
	var documented []string
	for _, s := range sections {
		documented = append(documented, s[1])
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (Watchprobe\w+) \| ([^|]+) \|.*\[runbook\]\(docs/alerts\.md#(\w+)\) \|$`).FindAllStringSubmatch(readme, -1) {
		rows[m[1]] = strings.TrimSpace(m[2])
		if m[3] != strings.ToLower(m[1]) {
			t.Errorf("README: %s's runbook link is #%s", m[1], m[3])
		}
	}
	for _, name := range order {
		if !slices.Contains(documented, name) {
			t.Errorf("docs/alerts.md has no section \"## %s\"", name)
		}
		want := strings.Join(severities[name], ", ")
		if got, ok := rows[name]; !ok {
			t.Errorf("README's alerts table has no row for %s", name)
		} else if got != want {
			t.Errorf("README: %s's severity is %q, the rules' %q", name, got, want)
		}
	}
	for _, name := range documented {
		if severities[name] == nil {
			t.Errorf("docs/alerts.md has a section for %s, which is no alert in rules/watchprobe.rules.yml or rules/watchprobe.agent.rules.yml", name)
		}
	}
	for name := range rows {
		if severities[name] == nil {
			t.Errorf("README's alerts table lists %s, which is no alert in rules/watchprobe.rules.yml or rules/watchprobe.agent.rules.yml", name)
		}
	}
}

// The README's demo output is a run's: the trimmed capture that `make
// demo-output` took of `make demo`.
func TestDemoSampleIsARun(t *testing.T) {
	capture := read(t, demoCapture)
	if n := len(regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d `).FindAllString(capture, -1)); n < 3 || !strings.HasPrefix(capture, ">> starting etcd") {
		t.Fatalf("%s is no capture of `make demo` (%d summary lines): run `make demo-output`", demoCapture, n)
	}
	got, err := block(read(t, "README.md"), "demo")
	if err != nil {
		t.Fatal(err)
	}
	if got != demoSample(capture) {
		t.Errorf("README.md's demo output is not %s trimmed: run `make demo-output`", demoCapture)
	}
}

// The README is the front door: reference goes in docs/.
func TestREADMEIsShort(t *testing.T) {
	if n := strings.Count(read(t, "README.md"), "\n"); n >= 250 {
		t.Errorf("README.md has %d lines; keep it under 250 and move reference into docs/", n)
	}
}

// docs/install.md's table of the values that matter states defaults; each
// stated one is values.yaml's. A row's default cell lists one backticked
// value per value it names (an empty cell: an empty string); prose such
// as "see the chart" states none.
func TestInstallDefaultsAreTheChart(t *testing.T) {
	doc := read(t, "docs/install.md")
	start := strings.Index(doc, "\n### Values that matter\n")
	if start < 0 {
		t.Fatal("docs/install.md has no section \"### Values that matter\"")
	}
	section := doc[start+1:]
	if end := strings.Index(section[4:], "\n#"); end >= 0 {
		section = section[:end+4]
	}
	row := regexp.MustCompile("(?m)^\\| ((?:`[a-zA-Z.]+`(?:, )?)+) \\| ([^|]*) \\|")
	literal := regexp.MustCompile("^`([^`]*)`$")
	values := chartValues(t)
	checked := 0
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		names := strings.Split(m[1], ", ")
		cell := strings.TrimSpace(m[2])
		var defaults []string
		if cell != "" {
			for _, d := range strings.Split(cell, ", ") {
				l := literal.FindStringSubmatch(d)
				if l == nil {
					defaults = nil
					break
				}
				defaults = append(defaults, l[1])
			}
			if defaults == nil {
				continue // prose
			}
		}
		for i, n := range names {
			want := ""
			if defaults != nil {
				if len(defaults) != len(names) {
					t.Errorf("docs/install.md: row %s states %d defaults for %d values", m[1], len(defaults), len(names))
					break
				}
				want = defaults[i]
			}
			got, ok := valueAt(values, strings.Trim(n, "`"))
			if !ok {
				t.Errorf("docs/install.md: %s is no chart value", n)
				continue
			}
			if got != want {
				t.Errorf("docs/install.md: %s defaults to %q, values.yaml says %q", n, want, got)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("only %d defaults found in docs/install.md's table: has its form changed?", checked)
	}
}

// valueAt is the chart value at a dotted path, formatted as the docs write
// it: true, 2, 0.99, or the string.
func valueAt(values map[string]any, path string) (string, bool) {
	var cur any = values
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[k]; !ok {
			return "", false
		}
	}
	switch cur.(type) {
	case map[string]any, []any:
		return "", false
	case nil:
		return "", true
	}
	return fmt.Sprint(cur), true
}
