package repotest

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// headingRE matches an ATX heading; fenced code is removed before.
var headingRE = regexp.MustCompile(`(?m)^#{1,6}[ \t]+(.+?)[ \t#]*$`)

// withoutFences blanks the lines of fenced code blocks, where neither
// headings nor links count.
func withoutFences(doc string) string {
	lines := strings.Split(doc, "\n")
	fence := ""
	for i, l := range lines {
		t := strings.TrimLeft(l, " ")
		switch {
		case fence == "" && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			fence = t[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

var (
	inlineLink = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]*)[^)]*\)`)
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	htmlAnchor = regexp.MustCompile(`<a (?:id|name)="([^"]+)"`)
)

// Anchors returns the anchors GitHub gives the headings of a Markdown
// document (github-slugger: lowercase, punctuation dropped, each space a
// hyphen, repeats numbered), and explicit <a id> anchors.
func Anchors(doc string) map[string]bool {
	doc = withoutFences(doc)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(doc, -1) {
		text := inlineLink.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	for _, m := range htmlAnchor.FindAllStringSubmatch(doc, -1) {
		out[m[1]] = true
	}
	return out
}

// Links returns the targets of a document's inline links and images,
// outside code.
func Links(doc string) []string {
	doc = codeSpan.ReplaceAllString(withoutFences(doc), "code")
	var out []string
	for _, m := range inlineLink.FindAllStringSubmatch(doc, -1) {
		out = append(out, m[2])
	}
	return out
}

// Tables checks the tables of a Markdown document: blank lines around
// each, and every row with its header's number of cells. It returns how
// many tables doc has and what is wrong with them, one line each.
func Tables(doc string) (tables int, problems []string) {
	lines := strings.Split(doc, "\n")
	cells := 0
	for i, l := range lines {
		inTable, prevInTable := strings.HasPrefix(l, "|"), i > 0 && strings.HasPrefix(lines[i-1], "|")
		switch {
		case inTable && !prevInTable:
			tables++
			cells = strings.Count(l, "|")
			if i > 0 && lines[i-1] != "" {
				problems = append(problems, fmt.Sprintf("line %d: a table right after text %q", i+1, lines[i-1]))
			}
		case inTable && strings.Count(l, "|") != cells:
			problems = append(problems, fmt.Sprintf("line %d: %d cells, its header %d: %s", i+1, strings.Count(l, "|")-1, cells-1, l))
		case !inTable && prevInTable && l != "":
			problems = append(problems, fmt.Sprintf("line %d: text right after a table: %q", i+1, l))
		}
	}
	return tables, problems
}
