// Command compat runs the exporter's core live tests against each
// kube-apiserver and etcd that `make compat` built, and writes what passed
// as a table into docs/compatibility.md, between its BEGIN and END
// comments. It exits non-zero if any test failed or did not run, so that
// the table it leaves behind is never mistaken for a pass.
//
// Run from the repository's root after `make compat-controlplanes`:
//
//	go run ./hack/compat -bin-dir bin            # make compat
//	go run ./hack/compat -bin-dir bin -only 1.34 # one control plane
//	go run ./hack/compat -bin-dir bin -only 1.31,1.32 -merge
//	                                   # those columns into the doc's table
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// controlPlane is one column of the table: a kube-apiserver and an etcd,
// chosen as internal/localcluster chooses them (WATCHPROBE_KUBE_VERSION,
// WATCHPROBE_ETCD_VERSION). Empty means the default, bin/'s own.
type controlPlane struct {
	name       string
	kube, etcd string
}

// The supported range: the oldest minor to the newest, each with the etcd
// its release pins, and the newest with the older etcd minor too.
var controlPlanes = []controlPlane{
	{name: "1.31", kube: "1.31"},
	{name: "1.32", kube: "1.32"},
	{name: "1.33", kube: "1.33"},
	{name: "1.34", kube: "1.34"},
	{name: "1.35", kube: "1.35"},
	{name: "1.36", kube: "1.36"},
	{name: "1.37"},
	{name: "1.37+etcd3.6", etcd: "3.6"},
}

// The supported range, as README.md, docs/install.md, the chart's README
// and its Chart.yaml annotations state it; main_test.go keeps it equal to
// the control planes above and those files equal to it.
const (
	kubeRange = "1.31 to 1.37"
	etcdRange = "3.5 to 3.7"
)

// testRun is one `go test` over a package with a selection of tests.
type testRun struct {
	id   string
	pkg  string
	run  string
	skip string
	env  []string
}

var runs = []testRun{
	{
		id:  "probe",
		pkg: "./pkg/probe",
		run: `^(TestEveryWriteObservedOnEveryPath|TestPinnedPathObservesEveryWrite|TestEtcdPath|TestInStreamExpiredCountedExactly|TestControlPlaneRestarts|TestCleanRunHasNoAnomalies|TestStallDetected|TestWatchListCompressedFrom137|TestReadyzWaitsForWatchCachesFrom136|TestResumeWindowIsTheWatchCacheHistory|TestResumeWindowOfABusyResource|TestResumeWindowFollowsCompactionWithoutWatchCache)$`,
		// Timing bounds and an etcd restart are not what differs by
		// version; `make test` runs them against the default.
		skip: `^TestEtcdPath$/^(a_delay|etcd_restarted|a_stalled|no_client)`,
	},
	{
		// The same informer, filling its cache by LIST as client-go did
		// before 1.35 and as a user who turns WatchList off gets.
		id:  "probe-list",
		pkg: "./pkg/probe",
		run: `^TestEveryWriteObservedOnEveryPath$`,
		env: []string{"KUBE_FEATURE_WatchListClient=false"},
	},
	{
		// The List half: a consistent LIST timed from each watch cache,
		// and the resources served without one told apart by the
		// apiserver's own metrics; the RBAC subtests are not what differs
		// by version.
		id:   "freshness",
		pkg:  "./pkg/probe/freshness",
		run:  `^(TestFreshnessOneResourceAtATime|TestFreshnessUncachedAndSeries)$`,
		skip: `^(TestFreshnessOneResourceAtATime|TestFreshnessUncachedAndSeries)$/^(RBAC|without_the_permissions)`,
	},
	{
		// The WatchList syncs an informer makes, timed to their end
		// bookmark; and refused with the server's gate off.
		id:  "watchlist",
		pkg: "./pkg/probe/watchlist",
		run: `^(TestWatchListOneResourceAtATime|TestWatchListRefused)$`,
	},
	{
		id:   "exporter",
		pkg:  "./cmd/exporter",
		run:  `^(TestCheck|TestExporterLifecycle)$`,
		skip: `^TestCheck$/^(duration|dropped|missing|drained|markers|interrupted)`,
	},
}

// row is one line of the table: what it claims, the tests that must pass
// for it, and which logged median (if any) it shows.
type row struct {
	what  string
	run   string
	tests []string // test names, a subtest's by prefix
	p50   string   // "path=X mode=Y" as pkg/probe's compatP50 logs it
}

var rows = []row{
	{"informer, WatchList: every write observed once", "probe", []string{"TestEveryWriteObservedOnEveryPath/ConfigMap", "TestEveryWriteObservedOnEveryPath/Lease"}, "path=informer mode=watchlist"},
	{"informer, LIST: every write observed once", "probe-list", []string{"TestEveryWriteObservedOnEveryPath/ConfigMap", "TestEveryWriteObservedOnEveryPath/Lease"}, "path=informer mode=list"},
	{"watch: every write observed once", "probe", []string{"TestEveryWriteObservedOnEveryPath/ConfigMap", "TestEveryWriteObservedOnEveryPath/Lease"}, "path=watch mode=watchlist"},
	{"etcd: every write observed once", "probe", []string{"TestEtcdPath/every_write_on_every_path"}, "path=etcd mode="},
	{"per-apiserver: every write observed once", "probe", []string{"TestPinnedPathObservesEveryWrite"}, "path=apiserver mode="},
	{"410 in a stream: one expired end, one relist, each time", "probe", []string{"TestInStreamExpiredCountedExactly/informer", "TestInStreamExpiredCountedExactly/watch"}, ""},
	{"410 from a restarted apiserver: expired, relisted", "probe", []string{"TestControlPlaneRestarts"}, ""},
	{"etcd compaction: one expired end, one relist", "probe", []string{"TestEtcdPath/compacted_while_cut"}, ""},
	{"resume window: the watch cache's 75 s history, and its bound on a busy resource", "probe", []string{"TestResumeWindowIsTheWatchCacheHistory", "TestResumeWindowOfABusyResource"}, ""},
	{"resume window without a watch cache: etcd's compaction", "probe", []string{"TestResumeWindowFollowsCompactionWithoutWatchCache"}, ""},
	{"bookmarks arrive; a clean run has no anomaly", "probe", []string{"TestCleanRunHasNoAnomalies"}, ""},
	{"stall raised and cleared", "probe", []string{"TestStallDetected"}, ""},
	{"WatchList stream gzipped from 1.37 only, read either way", "probe", []string{"TestWatchListCompressedFrom137"}, ""},
	{"/readyz waits for the watch caches from 1.36 only", "probe", []string{"TestReadyzWaitsForWatchCachesFrom136"}, ""},
	{"freshness: consistent LISTs fresh from the cache; one resource's slow storage slows it alone, stalled it is stuck", "freshness", []string{"TestFreshnessOneResourceAtATime/healthy", "TestFreshnessOneResourceAtATime/delayed_pods", "TestFreshnessOneResourceAtATime/stalled_pods_are_stuck"}, ""},
	{"freshness: a resource stored without a watch cache, and an aggregated API, reported uncached and not checked", "freshness", []string{"TestFreshnessUncachedAndSeries/events_without_a_watch_cache,_an_aggregated_API"}, ""},
	{"WatchList syncs reach their end bookmark; one resource's slow storage slows it alone, stalled or bookmarks dropped it misses; the gate off, refused", "watchlist", []string{"TestWatchListOneResourceAtATime", "TestWatchListRefused"}, ""},
	{"`watchprobe check` exits 0", "exporter", []string{"TestCheck/healthy"}, ""},
	{"no marker left, after a kill too", "exporter", []string{"TestExporterLifecycle"}, ""},
}

func main() {
	binDir := flag.String("bin-dir", "bin", "directory holding kube-apiserver and etcd, and <minor>/ and etcd-<minor>/ beside them")
	doc := flag.String("doc", "docs/compatibility.md", "the Markdown file whose compat block receives the table; empty: print it only")
	only := flag.String("only", "", "run only the control planes of these names (columns of the table, comma-separated), and leave the doc alone unless -merge")
	merge := flag.Bool("merge", false, "with -only: replace those columns in the doc's table (or add them), keeping the other columns as their last run left them")
	timeout := flag.Duration("timeout", 20*time.Minute, "go test's -timeout for each run")
	flag.Parse()
	abs, err := filepath.Abs(*binDir)
	if err == nil && *merge && *only == "" {
		err = fmt.Errorf("-merge needs -only: without it the whole table is written")
	}
	if err == nil {
		err = run(abs, *doc, *only, *merge, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(1)
	}
}

func run(binDir, doc, only string, merge bool, timeout time.Duration) error {
	var cols []column
	failed := false
	names := strings.Split(only, ",")
	for _, name := range names {
		if only != "" && !slices.ContainsFunc(controlPlanes, func(cp controlPlane) bool { return cp.name == name }) {
			return fmt.Errorf("no control plane named %q", name)
		}
	}
	for _, cp := range controlPlanes {
		if only != "" && !slices.Contains(names, cp.name) {
			continue
		}
		col, err := runControlPlane(binDir, cp, timeout)
		if err != nil {
			return err
		}
		cols = append(cols, col)
		if !col.passed() {
			failed = true
		}
	}
	if len(cols) == 0 {
		return fmt.Errorf("no control plane named %q", only)
	}
	table := render(cols)
	fmt.Print(table)
	switch {
	case doc != "" && only == "":
		if err := rewrite(doc, "compat", "make compat", "\n"+table+"\n"); err != nil {
			return err
		}
	case doc != "" && merge:
		if err := mergeInto(doc, cols); err != nil {
			return err
		}
	}
	if failed {
		return fmt.Errorf("a test failed or did not run: see the table and the logs above")
	}
	return nil
}

// column is what one control plane did.
type column struct {
	cp            controlPlane
	kube, etcd    string                       // versions the binaries were built from
	took          time.Duration                // all its runs
	results       map[string]map[string]string // run -> test -> pass/fail/skip
	p50           map[string]map[string]string // run -> "path=X mode=Y" -> p50
	runFailed     map[string]bool              // a run's go test exited non-zero
	failedOutside map[string][]string          // failed tests no row names
}

func (c column) passed() bool {
	for _, f := range c.runFailed {
		if f {
			return false
		}
	}
	for _, r := range rows {
		if c.cell(r).status != "pass" {
			return false
		}
	}
	return true
}

func runControlPlane(binDir string, cp controlPlane, timeout time.Duration) (column, error) {
	col := column{cp: cp, results: map[string]map[string]string{}, p50: map[string]map[string]string{}, runFailed: map[string]bool{}, failedOutside: map[string][]string{}}
	apiserver, etcd := binaries(binDir, cp)
	var err error
	if col.kube, err = moduleVersion(apiserver, "k8s.io/kubernetes"); err != nil {
		return col, err
	}
	if col.etcd, err = moduleVersion(etcd, "go.etcd.io/etcd/server/v3"); err != nil {
		return col, err
	}
	start := time.Now()
	for _, r := range runs {
		fmt.Fprintf(os.Stderr, ">> %s (kube-apiserver %s, etcd %s): go test %s -run '%s'\n", cp.name, col.kube, col.etcd, r.pkg, r.run)
		args := []string{"test", "-json", "-count=1", "-timeout", timeout.String(), "-run", r.run}
		if r.skip != "" {
			args = append(args, "-skip", r.skip)
		}
		args = append(args, r.pkg)
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "WATCHPROBE_BIN_DIR="+binDir, "WATCHPROBE_KUBE_VERSION="+cp.kube, "WATCHPROBE_ETCD_VERSION="+cp.etcd)
		cmd.Env = append(cmd.Env, r.env...)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return col, err
		}
		if err := cmd.Start(); err != nil {
			return col, err
		}
		results, p50, perr := parse(out, os.Stderr)
		werr := cmd.Wait()
		if perr != nil {
			return col, perr
		}
		col.results[r.id], col.p50[r.id] = results, p50
		col.runFailed[r.id] = werr != nil
		for test, status := range results {
			if status == "fail" && !named(r.id, test) {
				col.failedOutside[r.id] = append(col.failedOutside[r.id], test)
			}
		}
	}
	col.took = time.Since(start)
	return col, nil
}

// binaries mirrors internal/localcluster's choice for cp.
func binaries(binDir string, cp controlPlane) (apiserver, etcd string) {
	dir := binDir
	if cp.kube != "" {
		dir = filepath.Join(binDir, cp.kube)
	}
	apiserver, etcd = filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "etcd")
	if cp.etcd != "" {
		etcd = filepath.Join(binDir, "etcd-"+cp.etcd, "etcd")
	}
	return apiserver, etcd
}

// moduleVersion reads the version of module mod that bin was built from,
// out of its build information, which holds whatever the build's flags: a
// kube-apiserver built without the Makefile's version ldflags reports
// v0.0.0-master from --version and /version.
func moduleVersion(bin, mod string) (string, error) {
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go version -m %s: %v: %s (build it with `make compat-controlplanes`)", bin, err, out)
	}
	m := regexp.MustCompile(`(?m)^\s+mod\s+` + regexp.QuoteMeta(mod) + `\s+v(\S+)`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("%s was not built from %s", bin, mod)
	}
	return string(m[1]), nil
}

// named reports whether a row names test (or a test above it).
func named(run, test string) bool {
	for _, r := range rows {
		if r.run != run {
			continue
		}
		for _, t := range r.tests {
			if strings.HasPrefix(test, t) || strings.HasPrefix(t, test+"/") {
				return true
			}
		}
	}
	return false
}

// event is a line of `go test -json`.
type event struct {
	Action string
	Test   string
	Output string
}

var p50RE = regexp.MustCompile(`compat-p50 (path=\S+ mode=\S*) p50=(\S+)`)

// parse reads `go test -json`, echoing failures' and the runs' output to
// log, and returns each test's result and the first median logged per
// path and mode.
func parse(r io.Reader, log io.Writer) (results, p50 map[string]string, err error) {
	results, p50 = map[string]string{}, map[string]string{}
	output := map[string]*bytes.Buffer{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(log, sc.Text()) // a build error, say
			continue
		}
		switch e.Action {
		case "output":
			if output[e.Test] == nil {
				output[e.Test] = &bytes.Buffer{}
			}
			output[e.Test].WriteString(e.Output)
			if m := p50RE.FindStringSubmatch(e.Output); m != nil {
				if _, ok := p50[m[1]]; !ok {
					p50[m[1]] = m[2]
				}
			}
			if e.Test == "" {
				fmt.Fprint(log, e.Output) // ok/FAIL lines of the package
			}
		case "pass", "fail", "skip":
			if e.Test == "" {
				continue
			}
			results[e.Test] = e.Action
			if e.Action == "fail" && output[e.Test] != nil {
				fmt.Fprint(log, output[e.Test].String())
			}
			fmt.Fprintf(log, "   %s %s\n", e.Action, e.Test)
		}
	}
	return results, p50, sc.Err()
}

type cell struct {
	status string // pass, FAIL, skipped, not run
	p50    string
}

func (c column) cell(r row) cell {
	res := c.results[r.run]
	status := "pass"
	for _, want := range r.tests {
		found := false
		for test, s := range res {
			if test != want && !strings.HasPrefix(test, want) {
				continue
			}
			found = true
			switch {
			case s == "fail":
				status = "FAIL"
			case s == "skip" && status == "pass":
				status = "skipped"
			}
		}
		if !found && status == "pass" {
			status = "not run"
		}
	}
	out := cell{status: status}
	if r.p50 != "" {
		out.p50 = c.p50[r.run][r.p50]
		// Where the apiserver refuses WatchList (1.31 and 1.33 by
		// default) the test logs the mode the informer used: LIST.
		listed := strings.TrimSuffix(r.p50, "watchlist") + "list"
		if out.p50 == "" && strings.HasSuffix(r.p50, "mode=watchlist") && c.p50[r.run][listed] != "" {
			out.p50 = c.p50[r.run][listed]
			if strings.HasPrefix(r.p50, "path=informer ") {
				out.p50 += ", by LIST: WatchList refused"
			}
		}
	}
	return out
}

func render(cols []column) string {
	t := table{cells: map[string]map[string]string{}}
	for _, c := range cols {
		t.add(c)
	}
	return t.String()
}

// table is the compat block's table: its columns by header, each a cell
// per row (by the row's first cell), and the notes below it.
type table struct {
	headers []string
	cells   map[string]map[string]string // header -> row -> cell
	notes   []string
}

const minutesRow = "minutes for all of the above"

func header(c column) string { return fmt.Sprintf("kube-apiserver %s<br>etcd %s", c.kube, c.etcd) }

// add puts c's column in t, in place of one of the same versions, and its
// notes in place of those of the same control plane.
func (t *table) add(c column) {
	h := header(c)
	if t.cells[h] == nil {
		t.headers = append(t.headers, h)
	}
	col := map[string]string{}
	for _, r := range rows {
		cl := c.cell(r)
		col[r.what] = cl.status
		if cl.p50 != "" {
			col[r.what] = fmt.Sprintf("%s, p50 %s", cl.status, cl.p50)
		}
	}
	col[minutesRow] = fmt.Sprintf("%.1f", c.took.Minutes())
	t.cells[h] = col
	t.notes = slices.DeleteFunc(t.notes, func(n string) bool { return strings.HasPrefix(n, c.cp.name+", ") })
	for _, run := range slices.Sorted(maps.Keys(c.failedOutside)) {
		t.notes = append(t.notes, fmt.Sprintf("%s, %s: also failed: %s", c.cp.name, run, strings.Join(c.failedOutside[run], ", ")))
	}
	for _, run := range slices.Sorted(maps.Keys(c.runFailed)) {
		if c.runFailed[run] && len(c.failedOutside[run]) == 0 {
			t.notes = append(t.notes, fmt.Sprintf("%s, %s: go test exited non-zero (see its log)", c.cp.name, run))
		}
	}
}

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| |")
	for _, h := range t.headers {
		fmt.Fprintf(&b, " %s |", h)
	}
	b.WriteString("\n|---|")
	for range t.headers {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, what := range append(rowNames(), minutesRow) {
		fmt.Fprintf(&b, "| %s |", what)
		for _, h := range t.headers {
			cell, ok := t.cells[h][what]
			if !ok {
				cell = "not run"
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	for _, n := range t.notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	return b.String()
}

func rowNames() []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.what)
	}
	return out
}

// parseTable reads a table that String wrote. A column's cell of a row the
// table did not have reads as "not run"; a row no longer in rows is
// dropped.
func parseTable(body string) (table, error) {
	t := table{cells: map[string]map[string]string{}}
	split := func(line string) []string {
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		return cells
	}
	var lines []string
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "|"):
			lines = append(lines, line)
		case strings.TrimSpace(line) != "":
			t.notes = append(t.notes, line)
		}
	}
	if len(lines) < 2 {
		return t, fmt.Errorf("no table")
	}
	t.headers = split(lines[0])[1:]
	for _, h := range t.headers {
		t.cells[h] = map[string]string{}
	}
	for _, line := range lines[2:] {
		cells := split(line)
		if len(cells) != len(t.headers)+1 {
			return t, fmt.Errorf("row %q has %d cells, the header %d", cells[0], len(cells), len(t.headers)+1)
		}
		for i, h := range t.headers {
			t.cells[h][cells[0]] = cells[i+1]
		}
	}
	return t, nil
}

// mergeInto replaces cols' columns in the doc's compat table, or adds them,
// ordered by kube-apiserver release, then etcd's newest first, as
// controlPlanes lists them.
func mergeInto(path string, cols []column) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	body, err := block(doc, "compat")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	t, err := parseTable(body)
	if err != nil {
		return fmt.Errorf("%s: the compat block: %w", path, err)
	}
	for _, c := range cols {
		t.add(c)
	}
	slices.SortStableFunc(t.headers, func(a, b string) int {
		ka, ea := headerVersions(a)
		kb, eb := headerVersions(b)
		return cmp.Or(compareVersions(ka, kb), compareVersions(eb, ea))
	})
	return rewrite(path, "compat", "make compat", "\n"+t.String()+"\n")
}

var headerRE = regexp.MustCompile(`^kube-apiserver (\S+)<br>etcd (\S+)$`)

func headerVersions(h string) (kube, etcd string) {
	m := headerRE.FindStringSubmatch(h)
	if m == nil {
		return h, ""
	}
	return m[1], m[2]
}

// compareVersions orders dotted releases numerically.
func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return cmp.Compare(x, y)
		}
	}
	return 0
}

// block is the body of the named generated block of a Markdown file.
func block(doc []byte, name string) (string, error) {
	begin := regexp.MustCompile(`(?m)^<!-- BEGIN ` + regexp.QuoteMeta(name) + `: .*-->\n`)
	loc := begin.FindIndex(doc)
	if loc == nil {
		return "", fmt.Errorf("no <!-- BEGIN %s: ... --> line", name)
	}
	end := bytes.Index(doc[loc[1]:], []byte("<!-- END "+name+" -->"))
	if end < 0 {
		return "", fmt.Errorf("no <!-- END %s --> after its BEGIN", name)
	}
	return string(doc[loc[1] : loc[1]+end]), nil
}

// rewrite replaces the body of the named generated block of a Markdown
// file, in hack/docs' format.
func rewrite(path, name, by, body string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	begin := regexp.MustCompile(`(?m)^<!-- BEGIN ` + regexp.QuoteMeta(name) + `: .*-->\n`)
	loc := begin.FindIndex(doc)
	if loc == nil {
		return fmt.Errorf("%s: no <!-- BEGIN %s: ... --> line", path, name)
	}
	end := bytes.Index(doc[loc[1]:], []byte("<!-- END "+name+" -->"))
	if end < 0 {
		return fmt.Errorf("%s: no <!-- END %s --> after its BEGIN", path, name)
	}
	out := string(doc[:loc[0]]) + fmt.Sprintf("<!-- BEGIN %s: generated by `%s`, do not edit -->\n", name, by) + body + string(doc[loc[1]+end:])
	return os.WriteFile(path, []byte(out), 0o644)
}
