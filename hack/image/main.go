// Command image builds watchprobe's container image without a container
// engine, for `make image`: the binaries hack/build.sh makes for each
// platform (the exporter, /bin/watchprobe, and the node agent,
// /bin/watchprobe-agent), on an empty base with the few files they need, as
// an OCI image index. It writes the index to an OCI layout and, with -push, pushes it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root, where hack/build.sh runs")
	version := fs.String("version", "", "the image's tag and version label, and the binary's version (make passes the VERSION file)")
	revision := fs.String("revision", "", "source revision for the binary and the revision label (make passes git rev-parse HEAD)")
	repository := fs.String("repository", "", "repository the image is named after when not pushed, e.g. ghcr.io/watchprobe/watchprobe")
	out := fs.String("o", "out/image", "directory the OCI layout is written to (an earlier layout there is replaced)")
	pushTo := fs.String("push", "", "also push the index to this repository, tagged with -version")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated os/arch pairs to build")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "image creation time in Unix seconds; empty means the commit time of HEAD")
	binaries := fs.String("binaries", strings.Join(programNames(), ","), "comma-separated binaries the image holds, of "+strings.Join(programNames(), ", ")+"; watchprobe, its entrypoint, is required")
	if err := fs.Parse(args); err != nil {
		return err
	}

	if _, err := name.NewTag("example.com/x:" + *version); err != nil || *version == "" {
		return fmt.Errorf("-version %q: want a version usable as an image tag, such as the VERSION file's", *version)
	}
	if *revision == "" {
		return fmt.Errorf("-revision is empty: pass the commit, e.g. -revision $(git rev-parse HEAD)")
	}
	var ref name.Tag
	if *pushTo == "" {
		r, err := name.NewRepository(*repository)
		if err != nil {
			return fmt.Errorf("-repository %q: %w", *repository, err)
		}
		ref = r.Tag(*version)
	}
	o := options{Root: *root, Version: *version, Revision: *revision}
	progs, err := selectPrograms(*binaries)
	if err != nil {
		return err
	}
	o.Programs = progs
	for _, p := range strings.Split(*platforms, ",") {
		pl, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil || pl.OS == "" || pl.Architecture == "" {
			return fmt.Errorf("-platforms: %q is not os/arch, such as linux/arm64", p)
		}
		o.Platforms = append(o.Platforms, *pl)
	}
	created, err := creationTime(*root, *epoch)
	if err != nil {
		return err
	}
	o.Created = created

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	idx, err := build(ctx, o, func(f string, a ...any) { fmt.Fprintf(os.Stderr, ">> "+f+"\n", a...) })
	if err != nil {
		return err
	}
	if err := writeLayout(*out, idx, *version); err != nil {
		return err
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, ">> wrote the OCI layout %s (%s, %s) in %s\n", *out, *platforms, d, time.Since(start).Round(time.Second))
	if *pushTo == "" {
		fmt.Println(ref.String())
		return nil
	}
	pushed, err := push(ctx, idx, *pushTo, *version)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, ">> pushed %s:%s\n", pushed.Context(), *version)
	fmt.Println(pushed.String())
	return nil
}

// selectPrograms are the programs a -binaries list names, in the image's
// order.
func selectPrograms(list string) ([]program, error) {
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.ContainsFunc(programs, func(p program) bool { return path.Base(p.Path) == n }) {
			return nil, fmt.Errorf("-binaries: %q is none of the image's binaries (%s)", n, strings.Join(programNames(), ", "))
		}
		want[n] = true
	}
	if !want[path.Base(entrypoint)] {
		return nil, fmt.Errorf("-binaries %q: the image needs %s, its entrypoint", list, path.Base(entrypoint))
	}
	var out []program
	for _, p := range programs {
		if want[path.Base(p.Path)] {
			out = append(out, p)
		}
	}
	return out, nil
}

func programNames() []string {
	var names []string
	for _, p := range programs {
		names = append(names, path.Base(p.Path))
	}
	return names
}

// creationTime is SOURCE_DATE_EPOCH when given, else the commit's time:
// never the time of the build, which would change the digest every time.
func creationTime(root, epoch string) (time.Time, error) {
	if epoch == "" {
		b, err := exec.Command("git", "-C", root, "log", "-1", "--format=%ct").Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("no commit time for the image (git log: %v): set SOURCE_DATE_EPOCH or -source-date-epoch", err)
		}
		epoch = strings.TrimSpace(string(b))
	}
	s, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("-source-date-epoch (SOURCE_DATE_EPOCH) %q: want Unix seconds", epoch)
	}
	return time.Unix(s, 0).UTC(), nil
}
