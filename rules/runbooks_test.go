package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/watchprobe/watchprobe/internal/repotest"
)

// repoLink is a link into this repository on GitHub, at a ref.
var repoLink = regexp.MustCompile(`https://github\.com/watchprobe/watchprobe/blob/([^/"\s]+)/([^#"\s]+)(?:#([^"\s]*))?`)

// checkRepoLinks returns what is wrong with each link into this repository
// in text (from where): it must be at the tag v<version>, name a file the
// repository (root) holds, and an anchor, if any, that is a heading of it.
func checkRepoLinks(where, text, root, version string) (links int, errs []string) {
	seen := map[string]bool{}
	for _, m := range repoLink.FindAllStringSubmatch(text, -1) {
		links++
		url, ref, path, anchor := m[0], m[1], m[2], m[3]
		if seen[url] {
			continue
		}
		seen[url] = true
		if ref != "v"+version {
			errs = append(errs, fmt.Sprintf("%s: %s is at %s, not this release's tag v%s (VERSION)", where, url, ref, version))
		}
		doc, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %s: %s is not in the repository", where, url, path))
			continue
		}
		if anchor != "" && !repotest.Anchors(string(doc))[anchor] {
			errs = append(errs, fmt.Sprintf("%s: %s: %s has no heading with anchor #%s", where, url, path, anchor))
		}
	}
	return links, errs
}

// The runbook links resolve for the release that carries them: every
// alert's runbook_url, as the chart renders it with its defaults and the
// node agents (agent.enabled), and every
// link of the generated dashboards (as generated and as the chart embeds
// them) leads to a file of this repository at the tag v<VERSION>, the
// chart's appVersion, and to a heading of that file (a runbook_url always
// names one). The release workflow
// publishes only from that tag, so a link never leads to a later version's
// docs or to a section that was renamed.
func TestRunbookLinksResolve(t *testing.T) {
	version := repotest.Version(t, "..")
	sources := map[string]string{"the chart's rules": string(renderRules(t, "--set", "agent.enabled=true"))}
	dashboards, err := filepath.Glob("../dashboards/*.json")
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := filepath.Glob("../charts/watchprobe/files/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(dashboards, embedded...) {
		sources[strings.TrimPrefix(f, "../")] = repotest.Read(t, f)
	}
	alerts := 0
	for _, r := range alertRules(t, []byte(sources["the chart's rules"])) {
		alerts++
		if m := repoLink.FindStringSubmatch(r.Annotations["runbook_url"]); m == nil || m[3] == "" {
			t.Errorf("%s: runbook_url %q is no link to a section of a file of github.com/watchprobe/watchprobe", r.Alert, r.Annotations["runbook_url"])
		}
	}
	if alerts < 15 {
		t.Errorf("%d alerts rendered", alerts)
	}
	for where, text := range sources {
		links, errs := checkRepoLinks(where, text, "..", version)
		for _, e := range errs {
			t.Error(e)
		}
		if strings.HasSuffix(where, ".json") && links == 0 {
			t.Errorf("%s links to no runbook", where)
		}
	}
}

// checkRepoLinks refuses a link at another ref, to a file the repository
// does not hold, or to a section that is not there.
func TestRunbookLinkCheckRefuses(t *testing.T) {
	version := repotest.Version(t, "..")
	base := "https://github.com/watchprobe/watchprobe/blob/"
	for _, tc := range []struct {
		link string
		ok   bool
	}{
		{base + "v" + version + "/docs/alerts.md#watchprobeprobefailing", true},
		{base + "main/docs/alerts.md#watchprobeprobefailing", false},
		{base + "v0.0.0-none/docs/alerts.md#watchprobeprobefailing", false},
		{base + "v" + version + "/docs/runbooks.md#watchprobeprobefailing", false},
		{base + "v" + version + "/docs/alerts.md", true},
		{base + "v" + version + "/docs/alerts.md#watchprobenosuchalert", false},
	} {
		links, errs := checkRepoLinks("test", `"url": "`+tc.link+`"`, "..", version)
		if links != 1 || (len(errs) == 0) != tc.ok {
			t.Errorf("%s: %d links, errors %q; want accepted %v", tc.link, links, errs, tc.ok)
		}
	}
	if a := repotest.Anchors("# A\n```\n## Fenced\n```\n## Watchprobe Probe: Failing\n## A\n"); !a["watchprobe-probe-failing"] || !a["a-1"] || a["fenced"] {
		t.Errorf("anchors %v", a)
	}
}
