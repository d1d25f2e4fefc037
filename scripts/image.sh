#!/usr/bin/env bash
# image.sh [TAG]: builds the smartfeed container image without a container engine and checks it.
#
# The static binary (CGO_ENABLED=0, -trimpath, version stamped) goes into a one-layer image on
# an empty base, written as an OCI image layout under run/image/smartfeed-TAG/ and as an OCI
# archive run/image/smartfeed-TAG.tar (scripts/ociimage, go-containerregistry pinned in its
# go.mod). The check then extracts the layers from the layout as a runtime would and runs the
# binary found in them with --version: the line must carry the tag.
#
# Push it with any OCI tool, e.g. go-containerregistry's crane (through the Go module proxy):
#   go run github.com/google/go-containerregistry/cmd/crane@v0.22.1 push run/image/smartfeed-TAG REGISTRY/smartfeed:TAG
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GO="${GO:-go}"
tag="${1:-$(git -C "$ROOT" describe --tags --always --dirty 2>/dev/null || echo dev)}"
arch="${GOARCH:-$("$GO" env GOARCH)}"
out="$RUN_DIR/image"
layout="$out/smartfeed-$tag"
mkdir -p "$out"
rm -rf "$layout" "$layout.tar" "$out/rootfs-$tag"

log "go build (linux/$arch, static) version $tag"
CGO_ENABLED=0 GOOS=linux GOARCH="$arch" "$GO" build -C "$ROOT" -trimpath -ldflags "-s -w -X main.version=$tag" \
	-o "$out/smartfeed-$tag.bin" ./cmd/smartfeed

log "writing the OCI image layout $layout"
(cd "$ROOT/scripts/ociimage" && GOWORK=off GOFLAGS=-mod=mod "$GO" run . -bin "$out/smartfeed-$tag.bin" \
	-tag "$tag" -version "$tag" -arch "$arch" -out "$layout")
tar -C "$layout" -cf "$layout.tar" .

# The check: the layers named by the manifest, unpacked in order, hold a binary that runs.
log "checking: unpacking the image's layers and running the binary from them"
rootfs="$out/rootfs-$tag"
mkdir -p "$rootfs"
python3 - "$layout" "$rootfs" <<'PY'
import json, os, sys, tarfile
layout, rootfs = sys.argv[1], sys.argv[2]
def blob(d):
    alg, h = d.split(":")
    return os.path.join(layout, "blobs", alg, h)
index = json.load(open(os.path.join(layout, "index.json")))
manifest = json.load(open(blob(index["manifests"][0]["digest"])))
config = json.load(open(blob(manifest["config"]["digest"])))
for l in manifest["layers"]:
    with tarfile.open(blob(l["digest"])) as t:
        t.extractall(rootfs, filter="data")
print("entrypoint", config["config"]["Entrypoint"], "user", config["config"]["User"],
      "layers", len(manifest["layers"]), file=sys.stderr)
PY
got=$("$rootfs/usr/local/bin/smartfeed" --version)
rm -rf "$rootfs" "$out/smartfeed-$tag.bin"
case "$got" in
*"$tag"*) log "ok: $got" ;;
*) die "the image's binary says \"$got\", want the tag $tag" ;;
esac
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$layout/index.json")
echo "image: $layout ($layout.tar), tag $tag, manifest $digest"
