#!/usr/bin/env bash
# stress.sh [-c N] CMD...: runs CMD beside `stress-ng --cpu N` (default 2: every core of this
# machine busy), installing stress-ng from Debian if it is missing, and stops stress-ng when CMD
# ends. CMD's exit code is the script's. Used to show a test is steady under CPU contention:
#   scripts/stress.sh go test -race -count=3 -run TestX ./pkg/
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cpus=2
if [ "${1:-}" = "-c" ]; then
	cpus="$2"
	shift 2
fi
[ $# -gt 0 ] || die "usage: scripts/stress.sh [-c N] CMD..."
command -v stress-ng >/dev/null 2>&1 || apt_install stress-ng

stress-ng --cpu "$cpus" --quiet &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true' EXIT
log "stress-ng --cpu $cpus running (pid $pid) beside: $*"
start=$(date +%s)
rc=0
"$@" || rc=$?
log "done in $(( $(date +%s) - start )) s, exit $rc"
exit "$rc"
