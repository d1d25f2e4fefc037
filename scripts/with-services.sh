#!/usr/bin/env bash
# scripts/with-services.sh CMD [ARGS...]
# Runs CMD with a real Redis and a real HBase, starting each with scripts/redis.sh / hbase.sh
# unless its address is already in the environment (SMARTFEED_REDIS_ADDR / SMARTFEED_HBASE_ZK),
# or it is opted out (SMARTFEED_NO_REDIS=1 / SMARTFEED_NO_HBASE=1). With SMARTFEED_WANT_CHROMIUM=1
# (make test) it also finds or installs Chromium for the browser tests (scripts/chromium.sh,
# exported as SMARTFEED_CHROMIUM). Whatever this script started is stopped when it exits, whether CMD passed, failed or was interrupted. Exits with CMD's status.
# With HBase it also starts a second HBase, the standby (SMARTFEED_HBASE_STANDBY_ZK), fed by
# HBase's own replication from the first (scripts/hbase.sh replicate), unless
# SMARTFEED_NO_HBASE_STANDBY=1 or the primary came from the environment without a standby.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }

started=()
cleanup() {
	local rc=$? s
	trap - EXIT INT TERM
	for s in "${started[@]}"; do
		# "hbase-standby" is an instance of scripts/hbase.sh
		"$ROOT/scripts/${s%%-*}.sh" down "$s" || log "WARNING: $s down failed"
	done
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME VAR: runs scripts/NAME.sh up (scripts/hbase.sh up NAME for an HBase instance) and
# exports VAR from its env file. One that is already running (a `make services-up`) is used as is
# and left running.
start() {
	local name="$1" var="$2" line script="${1%%-*}"
	if "$ROOT/scripts/$script.sh" status "$name" >/dev/null 2>&1; then
		log "$name is already up (make services-up?); using it and leaving it running"
	else
		started+=("$name")
		"$ROOT/scripts/$script.sh" up "$name" >/dev/null
	fi
	line=$(grep "^$var=" "$RUN_DIR/$name/env") || die "$name up wrote no $var"
	export "${line?}"
	log "using $line"
}

if [ -n "${SMARTFEED_REDIS_ADDR:-}" ]; then
	log "using the Redis at SMARTFEED_REDIS_ADDR=$SMARTFEED_REDIS_ADDR"
elif [ "${SMARTFEED_NO_REDIS:-}" = 1 ]; then
	log "SMARTFEED_NO_REDIS=1: not starting Redis"
else
	start redis SMARTFEED_REDIS_ADDR
fi

if [ -n "${SMARTFEED_HBASE_ZK:-}" ]; then
	log "using the HBase at SMARTFEED_HBASE_ZK=$SMARTFEED_HBASE_ZK"
elif [ "${SMARTFEED_NO_HBASE:-}" = 1 ]; then
	log "SMARTFEED_NO_HBASE=1: not starting HBase"
else
	start hbase SMARTFEED_HBASE_ZK
	if [ -n "${SMARTFEED_HBASE_STANDBY_ZK:-}" ]; then
		log "using the standby HBase at SMARTFEED_HBASE_STANDBY_ZK=$SMARTFEED_HBASE_STANDBY_ZK"
	elif [ "${SMARTFEED_NO_HBASE_STANDBY:-}" = 1 ]; then
		log "SMARTFEED_NO_HBASE_STANDBY=1: no standby HBase"
	else
		start hbase-standby SMARTFEED_HBASE_STANDBY_ZK
		"$ROOT/scripts/hbase.sh" replicate hbase hbase-standby
	fi
fi

# Chromium, for the console's browser tests: found or installed (Debian's chromium) by
# scripts/chromium.sh; when that fails the tests skip and say why (SMARTFEED_NO_CHROMIUM).
if [ "${SMARTFEED_WANT_CHROMIUM:-}" != 1 ]; then
	:
elif [ -n "${SMARTFEED_CHROMIUM:-}" ]; then
	log "using the Chromium at SMARTFEED_CHROMIUM=$SMARTFEED_CHROMIUM"
elif [ -n "${SMARTFEED_NO_CHROMIUM:-}" ]; then
	log "SMARTFEED_NO_CHROMIUM is set: the browser tests skip ($SMARTFEED_NO_CHROMIUM)"
elif mkdir -p "$RUN_DIR" && chromium_path=$("$ROOT/scripts/chromium.sh" path 2>"$RUN_DIR/chromium.err"); then
	export SMARTFEED_CHROMIUM="$chromium_path"
	log "using SMARTFEED_CHROMIUM=$SMARTFEED_CHROMIUM"
else
	export SMARTFEED_NO_CHROMIUM="scripts/chromium.sh could not install chromium: $(tail -n 1 "$RUN_DIR/chromium.err")"
	log "WARNING: $SMARTFEED_NO_CHROMIUM; the browser tests will skip"
fi

log "running: $*"
set +e
"$@"
rc=$?
set -e
log "command exited with status $rc"
exit "$rc"
