#!/usr/bin/env bash
# scripts/promtool.sh — prints the path of a promtool built from its Go module at the pinned
# version, building it into bin/tools/ first when it is not there yet (idempotent: a second run
# only prints the path). The first build takes minutes (Prometheus pulls in many modules); later
# runs reuse bin/tools/ and the Go build cache.
#   scripts/promtool.sh               print the path (build if missing)
#   scripts/promtool.sh ARGS...       run promtool ARGS... (build if missing)
# Env: GO (default go), PROMTOOL_VERSION (default the pinned one below).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
GO="${GO:-go}"
# The Prometheus Go module's versions are v0.<major><minor>.<patch>: v0.316.0 is Prometheus 3.16.0.
PROMTOOL_VERSION="${PROMTOOL_VERSION:-v0.316.0}"
BIN_DIR="$ROOT/bin/tools/promtool-$PROMTOOL_VERSION"
PROMTOOL="$BIN_DIR/promtool"

if [ ! -x "$PROMTOOL" ]; then
	log "building promtool $PROMTOOL_VERSION into ${BIN_DIR#"$ROOT"/} (first time only; minutes)"
	mkdir -p "$BIN_DIR"
	t0=$(date +%s)
	# go install with @version builds outside this module's go.mod, so the project's
	# dependencies are untouched. remove_all_sd leaves out the cloud service discoveries
	# (AWS, Azure, GCE...), which rule checks and rule tests never use, and most of the build.
	GOBIN="$BIN_DIR" GOFLAGS="${GOFLAGS:-} -buildvcs=false" "$GO" install -tags remove_all_sd \
		"github.com/prometheus/prometheus/cmd/promtool@$PROMTOOL_VERSION" >&2 \
		|| die "go install promtool@$PROMTOOL_VERSION failed"
	log "promtool built in $(($(date +%s) - t0)) s"
fi
if [ $# -eq 0 ]; then
	echo "$PROMTOOL"
	exit 0
fi
exec "$PROMTOOL" "$@"
