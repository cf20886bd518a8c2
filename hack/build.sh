#!/bin/sh
# The one way the watchprobe binary is built: `make build` and the Dockerfile
# both run this, so a local binary and the image's are built alike.
# Usage: hack/build.sh OUTPUT VERSION REVISION
set -eu
out=$1 version=$2 revision=$3
CGO_ENABLED=0 exec go build -trimpath \
	-ldflags "-s -w \
		-X github.com/prometheus/common/version.Version=${version} \
		-X github.com/prometheus/common/version.Revision=${revision} \
		-X github.com/prometheus/common/version.Branch=main" \
	-o "$out" ./cmd/exporter
