package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	packageurl "github.com/package-url/packageurl-go"
)

// sbomMediaType is CycloneDX JSON's IANA media type: the SBOM's layer type
// and its artifact type in the registry, which scanners and `oras discover`
// filter on.
const sbomMediaType = "application/vnd.cyclonedx+json"

// makeSBOM describes the image index in CycloneDX 1.6: the exporter, the Go
// modules linked into it, and the Go standard library of the toolchain
// that built it, all read from the binaries' build information. Nothing in
// it comes from the moment or the machine: its time is the commit's and its
// serial number is derived from the image's digest, so the same image gives
// the same SBOM, byte for byte.
func makeSBOM(b *built) ([]byte, error) {
	first := b.binaries[0]
	for _, other := range b.binaries[1:] {
		// One SBOM speaks for every platform only if they link the same
		// code; hack/build.sh builds them from one module graph, so a
		// difference means the layout was put together from two builds.
		if goVersion(other.info) != goVersion(first.info) || !slices.EqualFunc(other.info.Deps, first.info.Deps, sameModule) {
			return nil, fmt.Errorf("the %s and %s binaries were built from different modules or Go versions", first.platform, other.platform)
		}
	}
	main := first.info.Main
	appRef := golangPURL(main.Path, "v"+b.version)
	imageRef := packageurl.NewPackageURL(packageurl.TypeOCI, "", "watchprobe", b.digest.String(), nil, "").ToString()
	stdRef := packageurl.NewPackageURL(packageurl.TypeGolang, "", "stdlib", strings.TrimPrefix(goVersion(first.info), "go"), nil, "").ToString()

	var platforms []string
	for _, bin := range b.binaries {
		platforms = append(platforms, bin.platform.String())
	}
	components := []cdx.Component{{
		BOMRef:     appRef,
		Type:       cdx.ComponentTypeApplication,
		Name:       main.Path,
		Version:    "v" + b.version,
		PackageURL: appRef,
		Properties: buildSettings(b.binaries),
	}, {
		// The standard library as syft and grype name it, so a scanner
		// matches Go's own advisories against the toolchain's version.
		BOMRef:     stdRef,
		Type:       cdx.ComponentTypeLibrary,
		Name:       "stdlib",
		Version:    goVersion(first.info),
		PackageURL: stdRef,
	}}
	appDeps := []string{stdRef}
	for _, m := range first.info.Deps {
		c := moduleComponent(m)
		components = append(components, c)
		appDeps = append(appDeps, c.BOMRef)
	}

	bom := cdx.NewBOM()
	bom.SerialNumber = serialNumber(b.digest.Hex)
	bom.Metadata = &cdx.Metadata{
		Timestamp: b.created.UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type:    cdx.ComponentTypeApplication,
			Name:    "hack/release",
			Version: b.revision,
			// What wrote the document: the library that encodes it.
			Components: &[]cdx.Component{{Type: cdx.ComponentTypeLibrary, Name: cyclonedxModule, Version: moduleVersion(cyclonedxModule)}},
		}}},
		Component: &cdx.Component{
			BOMRef:     imageRef,
			Type:       cdx.ComponentTypeContainer,
			Name:       "watchprobe",
			Version:    b.version,
			PackageURL: imageRef,
			Properties: &[]cdx.Property{
				{Name: "org.opencontainers.image.revision", Value: b.revision},
				{Name: "org.opencontainers.image.created", Value: b.created.UTC().Format(time.RFC3339)},
				{Name: "platforms", Value: strings.Join(platforms, ",")},
			},
		},
	}
	bom.Components = &components
	bom.Dependencies = &[]cdx.Dependency{
		{Ref: imageRef, Dependencies: &[]string{appRef}},
		{Ref: appRef, Dependencies: &appDeps},
	}
	var buf bytes.Buffer
	enc := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

const cyclonedxModule = "github.com/CycloneDX/cyclonedx-go"

// moduleComponent is one module the binary links. A replaced module is
// named by what replaced it, the code that is in the binary, and says what
// it replaces.
func moduleComponent(m *debug.Module) cdx.Component {
	used := m
	var props []cdx.Property
	if m.Replace != nil {
		used = m.Replace
		props = append(props, cdx.Property{Name: "golang:replaces", Value: m.Path + "@" + m.Version})
	}
	if used.Sum != "" {
		// go.sum's hash of the module, checkable against the checksum
		// database; it is no plain SHA-256, so not a CycloneDX hash.
		props = append(props, cdx.Property{Name: "golang:sum", Value: used.Sum})
	}
	ref := golangPURL(used.Path, used.Version)
	c := cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeLibrary, Name: used.Path, Version: used.Version, PackageURL: ref, Scope: cdx.ScopeRequired}
	if len(props) > 0 {
		c.Properties = &props
	}
	return c
}

// golangPURL is pkg:golang/<module path>@<version>: the module path's last
// element is the name, the rest the namespace.
func golangPURL(modPath, version string) string {
	ns, name := "", modPath
	if i := strings.LastIndex(modPath, "/"); i >= 0 {
		ns, name = modPath[:i], modPath[i+1:]
	}
	return packageurl.NewPackageURL(packageurl.TypeGolang, ns, name, version, nil, "").ToString()
}

// buildSettings are the settings the Go toolchain recorded (flags, GOOS,
// CGO_ENABLED, ...), each under golang:build:, those that differ between
// platforms (GOARCH and its level) once per platform.
func buildSettings(bins []binaryInfo) *[]cdx.Property {
	common := map[string]string{}
	for _, s := range bins[0].info.Settings {
		common[s.Key] = s.Value
	}
	for _, b := range bins[1:] {
		seen := map[string]string{}
		for _, s := range b.info.Settings {
			seen[s.Key] = s.Value
		}
		for k, v := range common {
			if seen[k] != v {
				delete(common, k)
			}
		}
	}
	var props []cdx.Property
	for _, s := range bins[0].info.Settings {
		if v, ok := common[s.Key]; ok {
			props = append(props, cdx.Property{Name: "golang:build:" + s.Key, Value: v})
		}
	}
	for _, b := range bins {
		for _, s := range b.info.Settings {
			if _, ok := common[s.Key]; !ok {
				props = append(props, cdx.Property{Name: "golang:build:" + b.platform.String() + ":" + s.Key, Value: s.Value})
			}
		}
	}
	return &props
}

// goVersion is the toolchain's version without the experiments that may
// follow it ("go1.26.8 X:...").
func goVersion(bi *debug.BuildInfo) string {
	return strings.Fields(bi.GoVersion + " ")[0]
}

func sameModule(a, b *debug.Module) bool {
	if a.Path != b.Path || a.Version != b.Version || a.Sum != b.Sum || (a.Replace == nil) != (b.Replace == nil) {
		return false
	}
	return a.Replace == nil || sameModule(a.Replace, b.Replace)
}

// serialNumber is a UUID (version 8: its bits are the caller's) made of the
// image digest's first 16 bytes: unique per image, and the same for the
// same image, where a random one would make every SBOM differ.
func serialNumber(digestHex string) string {
	b, err := hex.DecodeString(digestHex[:32])
	if err != nil || len(b) != 16 {
		panic(fmt.Sprintf("serialNumber: %q is no sha256 digest", digestHex))
	}
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// moduleVersion is the version of a module linked into this program, from
// its own build information.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "unknown"
}
