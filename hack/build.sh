#!/bin/sh
# The one way watchprobe's binaries are built: `make build`, `make image`
# (hack/image, once per GOARCH and binary) and the Dockerfile all run this,
# so a local binary and the images' are built alike.
# Usage: [GOOS=linux GOARCH=arm64] hack/build.sh OUTPUT VERSION REVISION [PACKAGE]
# PACKAGE: ./cmd/exporter (the default: watchprobe) or ./cmd/agent
# (watchprobe-agent, the node agent).
set -eu
out=$1 version=$2 revision=$3 package=${4:-./cmd/exporter}
CGO_ENABLED=0 exec go build -trimpath \
	-ldflags "-s -w \
		-X github.com/prometheus/common/version.Version=${version} \
		-X github.com/prometheus/common/version.Revision=${revision} \
		-X github.com/prometheus/common/version.Branch=main" \
	-o "$out" "$package"
