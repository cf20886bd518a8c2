package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"path"
	"runtime/debug"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// built is what `make image` left in its OCI layout, as the release needs
// it: the index to push, what it says of itself, and the build information
// of each platform's binary, read from the binary in the image so that the
// SBOM describes exactly what runs.
type built struct {
	index    v1.ImageIndex
	digest   v1.Hash
	version  string
	revision string
	created  time.Time // the commit's time, which the image carries already
	binaries []binaryInfo
}

type binaryInfo struct {
	platform v1.Platform
	info     *debug.BuildInfo
}

// readLayout opens the index named version in the layout at dir and reads
// every platform's entrypoint binary.
func readLayout(dir, version string) (*built, error) {
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("-layout %s: %w (run make image first)", dir, err)
	}
	lm, err := l.IndexManifest()
	if err != nil {
		return nil, err
	}
	var found *v1.Descriptor
	for i, d := range lm.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == version {
			found = &lm.Manifests[i]
		}
	}
	if found == nil {
		return nil, fmt.Errorf("-layout %s holds no image named %s: run make image for this VERSION", dir, version)
	}
	idx, err := l.ImageIndex(found.Digest)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	b := &built{index: idx, digest: found.Digest, version: version, revision: im.Annotations["org.opencontainers.image.revision"]}
	// The index states its version and time (hack/image writes them);
	// a layout from another build would release something else.
	if v := im.Annotations["org.opencontainers.image.version"]; v != version {
		return nil, fmt.Errorf("-layout %s: the image says version %q, not %s: run make image again", dir, v, version)
	}
	if b.created, err = time.Parse(time.RFC3339, im.Annotations["org.opencontainers.image.created"]); err != nil {
		return nil, fmt.Errorf("-layout %s: the image's created annotation: %w", dir, err)
	}
	if b.revision == "" {
		return nil, fmt.Errorf("-layout %s: the image has no revision annotation", dir)
	}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			return nil, fmt.Errorf("-layout %s: manifest %s has no platform", dir, d.Digest)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		bi, err := entrypointInfo(img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Platform, err)
		}
		b.binaries = append(b.binaries, binaryInfo{platform: *d.Platform, info: bi})
	}
	if len(b.binaries) == 0 {
		return nil, fmt.Errorf("-layout %s: the index has no images", dir)
	}
	return b, nil
}

// entrypointInfo finds the image's entrypoint in its layers (the last layer
// that has it wins, as in a container) and reads its Go build information.
func entrypointInfo(img v1.Image) (*debug.BuildInfo, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	if len(cfg.Config.Entrypoint) == 0 {
		return nil, errors.New("the image has no entrypoint")
	}
	want := strings.TrimPrefix(path.Clean(cfg.Config.Entrypoint[0]), "/")
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var data []byte
	for _, l := range layers {
		d, err := fileInLayer(l, want)
		if err != nil {
			return nil, err
		}
		if d != nil {
			data = d
		}
	}
	if data == nil {
		return nil, fmt.Errorf("no /%s in the image's layers", want)
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("/%s: %w", want, err)
	}
	return bi, nil
}

func fileInLayer(l v1.Layer, name string) ([]byte, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if strings.TrimPrefix(path.Clean(h.Name), "/") == name && h.Typeflag == tar.TypeReg {
			return io.ReadAll(tr)
		}
	}
}
