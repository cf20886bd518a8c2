package localcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImportImage makes img an image of the node's containerd named ref, as if
// pulled: a pod whose image is ref starts from it with any pull policy but
// Always.
func (n *Node) ImportImage(ctx context.Context, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	archive := n.path("image-import.tar")
	defer os.Remove(archive)
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		return fmt.Errorf("writing %s as an image archive: %w", ref, err)
	}
	if _, err := n.ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("importing %s: %w", ref, err)
	}
	return nil
}

// LayoutImage is the image for this machine's platform in the OCI layout
// at dir, as `make image` (hack/image) writes it: one image index.
func LayoutImage(dir string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI layout: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	manifest, err := top.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(manifest.Manifests) != 1 {
		return nil, fmt.Errorf("the OCI layout %s holds %d entries, want the one image index hack/image writes", dir, len(manifest.Manifests))
	}
	idx, err := top.ImageIndex(manifest.Manifests[0].Digest)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, m := range im.Manifests {
		if m.Platform != nil && m.Platform.OS == runtime.GOOS && m.Platform.Architecture == runtime.GOARCH {
			return idx.Image(m.Digest)
		}
	}
	return nil, fmt.Errorf("the image in %s has no %s/%s variant", dir, runtime.GOOS, runtime.GOARCH)
}

// BinaryImage is an image of one static binary, at /bin/<its name>, that
// is its entrypoint: the node's sandbox image, or a tool a test runs as a
// pod, such as a sidecar.
func BinaryImage(path string) (v1.Image, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	entry := "bin/" + filepath.Base(path)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: entry, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		OS:           runtime.GOOS,
		Architecture: runtime.GOARCH,
		Config:       v1.Config{Entrypoint: []string{"/" + entry}},
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(img, layer)
}
