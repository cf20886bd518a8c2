package hack

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/watchprobe/watchprobe/internal/localcluster"
	"github.com/watchprobe/watchprobe/internal/repotest"
)

// use is one `uses:` of a workflow: the action or reusable workflow it
// names, and the comment on its line.
type use struct {
	at      string // file:line
	ref     string
	comment string
}

// workflowUses returns every `uses:` of the workflow in data, of a job (a
// reusable workflow) or of a step, wherever it is in the document.
func workflowUses(file string, data []byte) ([]use, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []use
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k, v := n.Content[i], n.Content[i+1]; k.Value == "uses" && v.Kind == yaml.ScalarNode {
					out = append(out, use{at: fmt.Sprintf("%s:%d", file, v.Line), ref: v.Value, comment: v.LineComment})
				}
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	return out, nil
}

var (
	commitSHA = regexp.MustCompile(`^[0-9a-f]{40}$`)
	fullTag   = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	tagNote   = regexp.MustCompile(`^# v\d+\.\d+\.\d+$`)
	// The SLSA generator's README ("Referencing SLSA builders and
	// generators"): its reusable workflows must be referenced by a full
	// vX.Y.Z tag, since slsa-verifier checks the builder's ref against the
	// generator's release tags. The one reference allowed a tag.
	slsaGenerator = "slsa-framework/slsa-github-generator/.github/workflows/"
)

// checkPin is nil when u runs code that cannot change under the workflow:
// a workflow or action of this commit (./), an image by digest, an action
// by full commit SHA with its tag in a comment (`# v4.4.0`, the form
// Dependabot updates), or the SLSA generator by full tag.
func checkPin(u use) error {
	switch {
	case strings.HasPrefix(u.ref, "./"):
		return nil
	case strings.HasPrefix(u.ref, "docker://"):
		if !regexp.MustCompile(`@sha256:[0-9a-f]{64}$`).MatchString(u.ref) {
			return fmt.Errorf("%s: uses %s: name the image by digest, docker://image@sha256:<64 hex>", u.at, u.ref)
		}
		return nil
	}
	name, version, ok := strings.Cut(u.ref, "@")
	if !ok {
		return fmt.Errorf("%s: uses %s without a version: pin it by commit, %s@<40-hex commit> # vX.Y.Z", u.at, u.ref, u.ref)
	}
	if strings.HasPrefix(name, slsaGenerator) {
		if !fullTag.MatchString(version) {
			return fmt.Errorf("%s: uses %s: the SLSA generator must be referenced by a full vX.Y.Z tag (its README), not %q", u.at, u.ref, version)
		}
		return nil
	}
	if !commitSHA.MatchString(version) {
		return fmt.Errorf("%s: uses %s: pin it by its full commit SHA with the tag in a comment, %s@<40-hex commit> # %s", u.at, u.ref, name, version)
	}
	if !tagNote.MatchString(u.comment) {
		return fmt.Errorf("%s: uses %s with comment %q: say which tag the commit is, # vX.Y.Z", u.at, u.ref, u.comment)
	}
	return nil
}

func readWorkflows(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob("../.github/workflows/*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		out[strings.TrimPrefix(f, "../")] = []byte(repotest.Read(t, f))
	}
	if len(out) < 3 {
		t.Fatalf("workflows %v: want ci.yml, test.yml and release.yml at least", files)
	}
	return out
}

// Every action the workflows run is fixed by commit (or, for the SLSA
// generator, by the full tag its verifier requires), and one action is at
// one commit and tag in all of them.
func TestWorkflowsPinActions(t *testing.T) {
	pinned := map[string]string{} // action -> version and tag, first seen
	n := 0
	for file, data := range readWorkflows(t) {
		uses, err := workflowUses(file, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range uses {
			n++
			if err := checkPin(u); err != nil {
				t.Error(err)
			}
			name, version, ok := strings.Cut(u.ref, "@")
			if !ok {
				continue
			}
			at := version + " " + u.comment
			if prev, seen := pinned[name]; seen && prev != at {
				t.Errorf("%s: %s at %s, elsewhere at %s: pin one version in every workflow", u.at, name, at, prev)
			} else {
				pinned[name] = at
			}
		}
	}
	// checkout, setup-go, cache, cosign-installer, upload-artifact, the
	// SLSA generator, test.yml: fewer means uses: were not all found.
	if n < 10 || len(pinned) < 6 {
		t.Errorf("%d uses: of %d actions found in the workflows", n, len(pinned))
	}
}

// checkPin refuses each way an action can move under a workflow.
func TestCheckPinRefuses(t *testing.T) {
	sha := "11d5960a326750d5838078e36cf38b85af677262"
	for _, tc := range []struct {
		ref, comment string
		ok           bool
	}{
		{"actions/checkout@" + sha, "# v4.4.0", true},
		{"./.github/workflows/test.yml", "", true},
		{"slsa-framework/slsa-github-generator/.github/workflows/generator_container_slsa3.yml@v2.1.0", "", true},
		{"docker://alpine@sha256:" + strings.Repeat("ab", 32), "", true},
		{"actions/checkout@v4", "", false},
		{"actions/checkout@v4.4.0", "# v4.4.0", false},
		{"actions/checkout@main", "", false},
		{"actions/checkout", "", false},
		{"actions/checkout@" + sha[:12], "# v4.4.0", false},
		{"actions/checkout@" + strings.ToUpper(sha), "# v4.4.0", false},
		{"actions/checkout@" + sha, "", false},
		{"actions/checkout@" + sha, "# pinned", false},
		{"actions/checkout@" + sha, "# v4", false},
		{"slsa-framework/slsa-github-generator/.github/workflows/generator_container_slsa3.yml@v2", "", false},
		{"slsa-framework/slsa-github-generator/.github/workflows/generator_container_slsa3.yml@f7dd8c54c2067bafc12ca7a55595d5ee9b75204a", "# v2.1.0", false},
		{"docker://alpine:3.20", "", false},
	} {
		err := checkPin(use{at: "x.yml:1", ref: tc.ref, comment: tc.comment})
		if (err == nil) != tc.ok {
			t.Errorf("uses: %s %s: error %v, want accepted %v", tc.ref, tc.comment, err, tc.ok)
		}
	}
}

// actionlint (the version hack/tools/actionlint pins) finds nothing in the
// workflows.
func TestActionlint(t *testing.T) {
	cmd := exec.Command(localcluster.ToolForTest(t, "actionlint"), "-no-color")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("actionlint: %v\n%s", err, out)
	}
}

type workflowJob struct {
	Needs       yaml.Node      `yaml:"needs"`
	Uses        string         `yaml:"uses"`
	Permissions map[string]any `yaml:"permissions"`
	Steps       []struct {
		Run string `yaml:"run"`
	} `yaml:"steps"`
}

// untested returns the jobs of the workflow in data that can publish
// (write packages or contents, or sign with the OIDC token) without
// needing, directly or through other jobs, a job that calls test: the
// release runs them only after the tests passed on the same commit.
func untested(data []byte, test string) ([]string, error) {
	var wf struct {
		Jobs map[string]workflowJob `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(data, &wf); err != nil {
		return nil, err
	}
	needs := map[string][]string{}
	for name, j := range wf.Jobs {
		switch j.Needs.Kind {
		case yaml.ScalarNode:
			needs[name] = []string{j.Needs.Value}
		case yaml.SequenceNode:
			var list []string
			if err := j.Needs.Decode(&list); err != nil {
				return nil, err
			}
			needs[name] = list
		}
	}
	var tested func(name string, depth int) bool
	tested = func(name string, depth int) bool {
		if wf.Jobs[name].Uses == test {
			return true
		}
		if depth > len(wf.Jobs) {
			return false // a cycle, which GitHub refuses anyway
		}
		return slices.ContainsFunc(needs[name], func(n string) bool { return tested(n, depth+1) })
	}
	var out []string
	for name, j := range wf.Jobs {
		publishes := false
		for perm, level := range j.Permissions {
			publishes = publishes || (level == "write" && slices.Contains([]string{"packages", "contents", "id-token", "attestations"}, perm))
		}
		if publishes && !tested(name, 0) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// The release publishes only a commit whose tests passed: each job that can
// push, sign or attest needs the job that runs test.yml, test.yml runs
// .ci/run, .ci/run runs `make test`, and pull requests are gated by the same
// test.yml.
func TestReleasePublishesOnlyWhatPassed(t *testing.T) {
	const test = "./.github/workflows/test.yml"
	wfs := readWorkflows(t)
	release := wfs[".github/workflows/release.yml"]
	if jobs, err := untested(release, test); err != nil {
		t.Fatal(err)
	} else if len(jobs) > 0 {
		t.Errorf("release.yml: jobs %v publish without needing the job that runs %s", jobs, test)
	}
	if !strings.Contains(string(release), "uses: "+test) {
		t.Errorf("release.yml runs no %s", test)
	}
	// The check can fail: without needs, publish is untested.
	if jobs, err := untested([]byte(strings.Replace(string(release), "needs: [version, test]", "needs: [version]", 1)), test); err != nil || !slices.Contains(jobs, "publish") {
		t.Errorf("release.yml with publish not needing test: untested %v, %v; want publish among them (does publish still say needs: [version, test]?)", jobs, err)
	}

	var wf struct {
		On   map[string]any         `yaml:"on"`
		Jobs map[string]workflowJob `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(wfs[".github/workflows/test.yml"], &wf); err != nil {
		t.Fatal(err)
	}
	runs := false
	for _, j := range wf.Jobs {
		for _, s := range j.Steps {
			runs = runs || strings.Contains(s.Run, ".ci/run")
		}
	}
	if _, call := wf.On["workflow_call"]; !call || !runs {
		t.Errorf("test.yml is a reusable workflow %v, runs .ci/run %v", call, runs)
	}
	if !regexp.MustCompile(`(?m)^time make test$`).MatchString(repotest.Read(t, "../.ci/run")) {
		t.Error(".ci/run does not run make test")
	}
	if !strings.Contains(string(wfs[".github/workflows/ci.yml"]), "uses: "+test) {
		t.Errorf("ci.yml does not gate pull requests with %s, the test the release runs", test)
	}
}

// Dependabot moves what the workflows and the module pin: the actions (in
// every workflow under /) and the root module.
func TestDependabotMovesThePins(t *testing.T) {
	var cfg struct {
		Version int `yaml:"version"`
		Updates []struct {
			Ecosystem string `yaml:"package-ecosystem"`
			Directory string `yaml:"directory"`
		} `yaml:"updates"`
	}
	if err := yaml.Unmarshal([]byte(repotest.Read(t, "../.github/dependabot.yml")), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"github-actions /", "gomod /"} {
		found := false
		for _, u := range cfg.Updates {
			found = found || u.Ecosystem+" "+u.Directory == want
		}
		if !found {
			t.Errorf(".github/dependabot.yml has no update for %s", want)
		}
	}
	if cfg.Version != 2 {
		t.Errorf(".github/dependabot.yml is version %d, want 2", cfg.Version)
	}
}
