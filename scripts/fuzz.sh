#!/usr/bin/env bash
# scripts/fuzz.sh — runs every Fuzz target of the module for FUZZTIME each (default 10s).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
FUZZTIME="${FUZZTIME:-10s}"
n=0
# "dir name" pairs for every func FuzzXxx(f *testing.F) in a _test.go file outside testdata/.
while read -r dir name; do
	[ -n "$name" ] || continue
	n=$((n + 1))
	log "fuzzing ./$dir $name for $FUZZTIME"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "./$dir"
done < <(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . 2>/dev/null \
	| grep -v '/testdata/' \
	| sed -E 's#^\./(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#; s#^\./[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#. \1#' \
	| sort -u)
log "$n fuzz target(s) run"
