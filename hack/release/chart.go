package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"go.yaml.in/yaml/v3"
)

// packageChart packages the chart with helm for version, its image default
// pinned to image (the repository the image is pushed to, and its index
// digest), and makes the archive depend on nothing but its inputs. It
// writes <out>/<chart>-<version>.tgz and returns that path.
func packageChart(ctx context.Context, helm, chartDir, out, version string, image name.Digest, created time.Time) (string, error) {
	tmp, err := os.MkdirTemp("", "watchprobe-chart-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// A copy, so that the checkout's values.yaml keeps the project's own
	// default (ghcr.io) while the package names the user's registry.
	src := filepath.Join(tmp, filepath.Base(chartDir))
	if err := copyDir(chartDir, src); err != nil {
		return "", err
	}
	valuesPath := filepath.Join(src, "values.yaml")
	values, err := os.ReadFile(valuesPath)
	if err != nil {
		return "", err
	}
	values, err = setImage(values, image.RegistryStr(), image.RepositoryStr(), image.DigestStr())
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(chartDir, "values.yaml"), err)
	}
	if err := os.WriteFile(valuesPath, values, 0o644); err != nil {
		return "", err
	}
	dest := filepath.Join(tmp, "package")
	cmd := exec.CommandContext(ctx, helm, "package", src, "--version", version, "--app-version", version, "--destination", dest)
	if outb, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("helm package: %v\n%s", err, outb)
	}
	entries, err := os.ReadDir(dest)
	if err != nil {
		return "", err
	}
	if len(entries) != 1 {
		return "", fmt.Errorf("helm package wrote %d files, want one archive", len(entries))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(out, entries[0].Name())
	if err := normalizeArchive(filepath.Join(dest, entries[0].Name()), path, created); err != nil {
		return "", err
	}
	return path, nil
}

// setImage sets image.registry, image.repository and image.digest in the
// values file's text, one line each, keeping every comment and the rest of
// the file as it is (helm-docs and `helm show values` show it). It then
// reads both texts back and fails unless those three values are all that
// changed.
func setImage(values []byte, registry, repository, digest string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("not one YAML document")
	}
	image := mapValue(doc.Content[0], "image")
	if image == nil {
		return nil, errors.New("no image mapping")
	}
	lines := strings.SplitAfter(string(values), "\n")
	set := map[string]string{"registry": registry, "repository": repository, "digest": digest}
	for key, v := range set {
		n := mapValue(image, key)
		if n == nil || n.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("no image.%s scalar", key)
		}
		// JSON's string is a YAML double-quoted scalar; the value is the
		// rest of its line (a comment after it would be lost, and the
		// check below would not notice, so refuse one).
		q, _ := json.Marshal(v)
		i := n.Line - 1
		line := strings.TrimSuffix(lines[i], "\n")
		if n.LineComment != "" {
			return nil, fmt.Errorf("image.%s has a comment on its line", key)
		}
		lines[i] = line[:n.Column-1] + string(q) + strings.TrimPrefix(lines[i], line)
	}
	changed := []byte(strings.Join(lines, ""))

	var before, after map[string]any
	if err := yaml.Unmarshal(values, &before); err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(changed, &after); err != nil {
		return nil, fmt.Errorf("setting the image made the values unreadable: %w", err)
	}
	img := before["image"].(map[string]any)
	for k, v := range set {
		img[k] = v
	}
	if !reflect.DeepEqual(before, after) {
		return nil, errors.New("setting the image changed more than image.registry, image.repository and image.digest")
	}
	return changed, nil
}

// mapValue is the value node of key in a mapping node, or nil.
func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// normalizeArchive rewrites helm's archive at src to dst with every entry's
// time set to the commit's. helm v3 stamps each entry with the time of
// packaging, which alone makes two packages of the same chart differ; the
// entries, their order and the gzip header stay helm's. dst's own
// modification time is the commit's too: `helm push` records the file's
// time as the chart's org.opencontainers.image.created, which would
// otherwise change the manifest's digest on every build.
func normalizeArchive(src, dst string, created time.Time) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Header = zr.Header
	zw.ModTime = time.Time{}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading helm's archive: %w", err)
		}
		h.ModTime, h.AccessTime, h.ChangeTime = created.UTC(), time.Time{}, time.Time{}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Chtimes(dst, created, created)
}

// copyDir copies the regular files and directories below src to dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, 0o644)
		default:
			return fmt.Errorf("%s: the chart may hold only files and directories", p)
		}
	})
}
