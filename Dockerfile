# syntax=docker/dockerfile:1
# The image runs the exporter as a static binary on distroless, as nonroot.
# Build: docker build --build-arg VERSION=$(git describe --tags --always) \
#          --build-arg REVISION=$(git rev-parse HEAD) -t watchprobe .

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
RUN hack/build.sh /out/watchprobe "$VERSION" "$REVISION"

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/watchprobe /bin/watchprobe
USER 65532:65532
EXPOSE 9917
ENTRYPOINT ["/bin/watchprobe"]
