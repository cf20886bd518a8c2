// Command release publishes a version, for `make release`: the image `make
// image` left in its OCI layout, an SBOM of the exporter's Go modules
// attached to it, and the chart packaged to install that image, pushed to
// one registry the user controls. It prints the digests and the command
// that installs the chart from there.
//
// Without -push it writes the SBOM and the chart package to -o and prints
// their digests, which is how two builds are compared.
package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/partial"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	version := fs.String("version", "", "the version to release: the image's tag in -layout, the chart's version and appVersion (make passes the VERSION file)")
	layoutDir := fs.String("layout", "out/image", "the OCI layout make image wrote")
	chartDir := fs.String("chart", "charts/watchprobe", "the chart to package")
	helm := fs.String("helm", "bin/helm", "the helm binary (make builds it from hack/tools/helm)")
	out := fs.String("o", "out/release", "directory the SBOM and the chart package are written to")
	repository := fs.String("repository", "ghcr.io/watchprobe/watchprobe", "the image repository the chart names when nothing is pushed")
	pushTo := fs.String("push", "", "push the image, its SBOM and the chart to this repository, e.g. registry.example.com/you/watchprobe")
	charts := fs.String("charts", "", "where helm push puts the chart, as oci://registry/path (default: beside -push's repository, under charts/)")
	plainHTTP := fs.Bool("plain-http", false, "talk to the registry over HTTP, as to a local test registry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" {
		return fmt.Errorf("-version is empty: pass the VERSION file's")
	}
	var t target
	imageRepo := *repository
	if *pushTo != "" {
		var err error
		if t, err = newTarget(*pushTo, *charts, *plainHTTP); err != nil {
			return err
		}
		imageRepo = t.repo.String()
	} else if *charts != "" || *plainHTTP {
		return fmt.Errorf("-charts and -plain-http only apply with -push")
	}
	repo, err := name.NewRepository(imageRepo)
	if err != nil {
		return fmt.Errorf("-repository %q: %w", imageRepo, err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	b, err := readLayout(*layoutDir, *version)
	if err != nil {
		return err
	}
	image := repo.Digest(b.digest.String())

	doc, err := makeSBOM(b)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	sbomFile := filepath.Join(*out, "watchprobe-"+*version+".cdx.json")
	if err := os.WriteFile(sbomFile, doc, 0o644); err != nil {
		return err
	}
	subject, err := partial.Descriptor(b.index)
	if err != nil {
		return err
	}
	art, err := sbomArtifact(doc, *subject, *version, b.created)
	if err != nil {
		return err
	}
	sbomDigest, err := art.Digest()
	if err != nil {
		return err
	}

	archive, err := packageChart(ctx, *helm, *chartDir, *out, *version, image, b.created)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		return err
	}
	pkgDigest := fmt.Sprintf("sha256:%x", sha256.Sum256(data))

	if *pushTo == "" {
		fmt.Fprintf(stdout, "image  %s:%s@%s  (%s)\n", repo, *version, b.digest, *layoutDir)
		fmt.Fprintf(stdout, "sbom   %s  (%s)\n", sbomDigest, sbomFile)
		fmt.Fprintf(stdout, "chart  package %s  (%s)\n", pkgDigest, archive)
		fmt.Fprintln(stdout, "Nothing pushed: PUSH=registry/repo pushes these.")
		return nil
	}
	pushedImage, pushedSBOM, err := t.pushImage(ctx, b, art)
	if err != nil {
		return err
	}
	chart, err := t.pushChart(ctx, *helm, archive, *version)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "image  %s:%s@%s\n", pushedImage.Context(), *version, pushedImage.DigestStr())
	fmt.Fprintf(stdout, "sbom   %s  (CycloneDX, a referrer of the image)\n", pushedSBOM)
	fmt.Fprintf(stdout, "chart  %s:%s@%s  (package %s)\n", chart.Context(), *version, chart.DigestStr(), pkgDigest)
	fmt.Fprintln(stdout, "Install:")
	fmt.Fprintln(stdout, t.installCommand(*version))
	return nil
}
