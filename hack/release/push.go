package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// sbomArtifact is the SBOM as an OCI 1.1 artifact whose subject is the image
// index: a manifest with artifactType set, the empty config, and the
// document as its one layer. A registry with the referrers API lists it
// under the index's digest; for one without, go-containerregistry's
// remote.Write maintains the referrers tag (sha256-<digest>) the OCI
// distribution spec defines as the fallback, which the same clients read.
func sbomArtifact(doc []byte, subject v1.Descriptor, version string, created time.Time) (v1.Image, error) {
	layer := static.NewLayer(doc, sbomMediaType)
	ld, err := partial.Descriptor(layer)
	if err != nil {
		return nil, err
	}
	ld.Annotations = map[string]string{
		// The file name `oras pull` saves it under.
		"org.opencontainers.image.title": "watchprobe-" + version + ".cdx.json",
	}
	config := []byte("{}")
	cd := v1.Descriptor{MediaType: types.OCIEmptyJSON, Size: int64(len(config))}
	if cd.Digest, _, err = v1.SHA256(bytes.NewReader(config)); err != nil {
		return nil, err
	}
	sub := v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  sbomMediaType,
		Config:        cd,
		Layers:        []v1.Descriptor{*ld},
		Subject:       &sub,
		Annotations:   map[string]string{"org.opencontainers.image.created": created.UTC().Format(time.RFC3339)},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, config: config, layer: layer})
}

// artifact is the smallest image go-containerregistry can push: a manifest
// written here, its config blob and one layer.
type artifact struct {
	manifest, config []byte
	layer            v1.Layer
}

func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.layer.Digest(); err != nil || d != h {
		return nil, fmt.Errorf("the SBOM artifact has no blob %s", h)
	}
	return a.layer, nil
}

// target is where a release goes.
type target struct {
	repo      name.Repository // the image's, tagged with the version
	charts    string          // oci://... the chart is pushed under, as helm push takes it
	plainHTTP bool
}

func newTarget(repo, charts string, plainHTTP bool) (target, error) {
	var opts []name.Option
	if plainHTTP {
		opts = append(opts, name.Insecure)
	}
	r, err := name.NewRepository(repo, opts...)
	if err != nil {
		return target{}, fmt.Errorf("-push %q: want a repository such as registry.example.com/you/watchprobe, without tag or digest: %w", repo, err)
	}
	if charts == "" {
		charts = defaultCharts(r)
	}
	if !strings.HasPrefix(charts, "oci://") {
		return target{}, fmt.Errorf("-charts %q: want oci://registry/path", charts)
	}
	if _, err := name.NewRepository(strings.TrimPrefix(charts, "oci://")+"/watchprobe", opts...); err != nil {
		return target{}, fmt.Errorf("-charts %q: %w", charts, err)
	}
	return target{repo: r, charts: charts, plainHTTP: plainHTTP}, nil
}

// defaultCharts puts the chart beside the image, under charts/: the image
// registry.example.com/you/watchprobe gives the chart
// oci://registry.example.com/you/charts/watchprobe, the layout of
// ghcr.io/prometheus-community/charts/... and ghcr.io/kyverno/charts/...
// (helm push appends the chart's name). The chart cannot share the image's
// repository: both would be tagged with the version.
func defaultCharts(r name.Repository) string {
	dir := path.Dir(r.RepositoryStr())
	if dir == "." {
		return "oci://" + r.RegistryStr() + "/charts"
	}
	return "oci://" + r.RegistryStr() + "/" + dir + "/charts"
}

// chartRepo is the repository helm push writes the chart to.
func (t target) chartRepo() name.Repository {
	var opts []name.Option
	if t.plainHTTP {
		opts = append(opts, name.Insecure)
	}
	r, _ := name.NewRepository(strings.TrimPrefix(t.charts, "oci://")+"/watchprobe", opts...) // checked in newTarget
	return r
}

func (t target) remoteOptions(ctx context.Context) []remote.Option {
	// The credentials of docker login or a credential helper, as helm
	// push uses (it falls back to Docker's config file).
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
}

// pushImage pushes the index tagged with the version, then the SBOM as its
// referrer, and returns where each is.
func (t target) pushImage(ctx context.Context, b *built, sbom v1.Image) (image, sbomAt name.Digest, err error) {
	if err := remote.WriteIndex(t.repo.Tag(b.version), b.index, t.remoteOptions(ctx)...); err != nil {
		return image, sbomAt, fmt.Errorf("pushing the image to %s: %w", t.repo.Tag(b.version), err)
	}
	sd, err := sbom.Digest()
	if err != nil {
		return image, sbomAt, err
	}
	sbomAt = t.repo.Digest(sd.String())
	if err := remote.Write(sbomAt, sbom, t.remoteOptions(ctx)...); err != nil {
		return image, sbomAt, fmt.Errorf("pushing the SBOM to %s: %w", sbomAt, err)
	}
	return t.repo.Digest(b.digest.String()), sbomAt, nil
}

// pushChart runs helm push and returns the chart manifest's digest, read
// back from the registry.
func (t target) pushChart(ctx context.Context, helm, archive, version string) (name.Digest, error) {
	args := []string{"push", archive, t.charts}
	if t.plainHTTP {
		args = append(args, "--plain-http")
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	// helm writes the archive's modification time as the manifest's
	// created annotation in the local time zone; UTC makes the digest the
	// same wherever it runs.
	cmd.Env = append(os.Environ(), "TZ=UTC")
	if out, err := cmd.CombinedOutput(); err != nil {
		return name.Digest{}, fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	tag := t.chartRepo().Tag(version)
	d, err := remote.Head(tag, t.remoteOptions(ctx)...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("reading back %s: %w", tag, err)
	}
	return tag.Context().Digest(d.Digest.String()), nil
}

// installCommand is what a user runs to install this release.
func (t target) installCommand(version string) string {
	cmd := fmt.Sprintf("helm install watchprobe %s/watchprobe --version %s --namespace monitoring --create-namespace", t.charts, version)
	if t.plainHTTP {
		cmd += " --plain-http"
	}
	return cmd
}
