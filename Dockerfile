# syntax=docker/dockerfile:1
# The image for people with Docker: the exporter and the node agent as
# static binaries on distroless, as nonroot. `make image` builds the same binary, user,
# entrypoint and labels without a container engine (README: "Build and push
# the image" says how the two differ).
# Build: docker build --build-arg VERSION=$(cat VERSION) \
#          --build-arg REVISION=$(git rev-parse HEAD) \
#          -t ghcr.io/watchprobe/watchprobe:$(cat VERSION) .

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION
ARG REVISION=unknown
# The VERSION file is the one version; the build-arg only carries it to the
# final stage's label, so the two must agree.
RUN [ "$VERSION" = "$(cat VERSION)" ] || { echo "pass --build-arg VERSION=$(cat VERSION), the VERSION file's (got \"$VERSION\")" >&2; exit 1; }
RUN hack/build.sh /out/watchprobe "$VERSION" "$REVISION"
RUN hack/build.sh /out/watchprobe-agent "$VERSION" "$REVISION" ./cmd/agent

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION
ARG REVISION=unknown
LABEL org.opencontainers.image.title="watchprobe" \
      org.opencontainers.image.source="https://github.com/watchprobe/watchprobe" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/watchprobe /bin/watchprobe
COPY --from=build /out/watchprobe-agent /bin/watchprobe-agent
USER 65532:65532
EXPOSE 9917
ENTRYPOINT ["/bin/watchprobe"]
