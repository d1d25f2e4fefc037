# syntax=docker/dockerfile:1
# The smartfeed binary: built in a Go image, shipped in distroless as a non-root user.
#   docker build -t smartfeed:dev --build-arg VERSION=$(git describe --always) .
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so the layer is cached until go.mod/go.sum change.
COPY go.mod go.sum ./
# go.mod replaces gohbase and go-zookeeper with the patched copies under third_party/ (see
# their SMARTFEED.md).
COPY third_party/ third_party/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
    -o /out/smartfeed ./cmd/smartfeed && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/smartfeed /usr/local/bin/smartfeed
COPY --from=build --chown=65532:65532 /out/data /data
# 65532 is distroless's nonroot user; the Helm chart runs it with a read-only root filesystem.
USER 65532:65532
# gRPC (services, health, reflection) and admin (/metrics, /debug/pprof; loopback unless
# SMARTFEED_ADMIN_ADDR says otherwise).
EXPOSE 9090 9091
# Pebble data, for `smartfeed all` or `demo` in a container (mount a volume here).
ENV SMARTFEED_DATA_DIR=/data
ENTRYPOINT ["/usr/local/bin/smartfeed"]
CMD ["help"]
