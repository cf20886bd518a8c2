#!/bin/sh
# The one way the watchprobe binary is built: `make build`, `make image`
# (hack/image, once per GOARCH) and the Dockerfile all run this, so a local
# binary and the images' are built alike.
# Usage: [GOOS=linux GOARCH=arm64] hack/build.sh OUTPUT VERSION REVISION
set -eu
out=$1 version=$2 revision=$3
CGO_ENABLED=0 exec go build -trimpath \
	-ldflags "-s -w \
		-X github.com/prometheus/common/version.Version=${version} \
		-X github.com/prometheus/common/version.Revision=${revision} \
		-X github.com/prometheus/common/version.Branch=main" \
	-o "$out" ./cmd/exporter
