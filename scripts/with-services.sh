#!/usr/bin/env bash
# scripts/with-services.sh CMD [ARGS...]
# Runs CMD with a real Redis and a real HBase, starting each with scripts/redis.sh / hbase.sh
# unless its address is already in the environment (SMARTFEED_REDIS_ADDR / SMARTFEED_HBASE_ZK),
# or it is opted out (SMARTFEED_NO_REDIS=1 / SMARTFEED_NO_HBASE=1). With SMARTFEED_WANT_CHROMIUM=1
# (make test) it also finds or installs Chromium for the browser tests (scripts/chromium.sh,
# exported as SMARTFEED_CHROMIUM), and in the test mode a Redis Sentinel setup of its own
# (scripts/redis-sentinel.sh, exported as SMARTFEED_REDIS_SENTINEL) and a Redis Cluster
# (scripts/redis-cluster.sh, SMARTFEED_REDIS_CLUSTER). Whatever this script started is stopped when it exits, whether CMD passed, failed or was interrupted. Exits with CMD's status.
# With HBase it also starts a second HBase, the standby (SMARTFEED_HBASE_STANDBY_ZK), fed by
# HBase's own replication from the first (scripts/hbase.sh replicate), unless
# SMARTFEED_NO_HBASE_STANDBY=1 or the primary came from the environment without a standby.
#
# SMARTFEED_SERVICES=test (what `make test` sets) keeps the tests away from the user's services:
# it runs instances of its own, redis-test, hbase-test and hbase-test-standby (folders under
# run/), which it wipes before starting and stops and wipes when it exits, so nothing a test
# wrote reaches the Redis of `scripts/redis.sh up` or `make demo` (run/redis), and two runs in a
# row start from empty services. In that mode SMARTFEED_REDIS_ADDR / SMARTFEED_HBASE_ZK /
# SMARTFEED_HBASE_STANDBY_ZK from the environment (a user's `export $(scripts/redis.sh up)`)
# are ignored; SMARTFEED_TEST_REDIS_ADDR / SMARTFEED_TEST_HBASE_ZK /
# SMARTFEED_TEST_HBASE_STANDBY_ZK name services to test against instead.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }

MODE="${SMARTFEED_SERVICES:-}"
case "$MODE" in "" | test) ;; *) die "SMARTFEED_SERVICES=$MODE: want test or nothing" ;; esac
# The instance names: the user's, or the test run's own (see SMARTFEED_SERVICES above).
if [ "$MODE" = test ]; then
	REDIS_NAME=redis-test HBASE_NAME=hbase-test STANDBY_NAME=hbase-test-standby
	for v in REDIS_ADDR HBASE_ZK HBASE_STANDBY_ZK; do
		user="SMARTFEED_$v" mine="SMARTFEED_TEST_$v"
		if [ -n "${!user:-}" ] && [ -z "${!mine:-}" ]; then
			log "SMARTFEED_SERVICES=test: ignoring $user=${!user} (the tests run on services of their own; $mine names one to use instead)"
		fi
		unset "$user"
		if [ -n "${!mine:-}" ]; then export "$user=${!mine}"; fi
	done
else
	REDIS_NAME=redis HBASE_NAME=hbase STANDBY_NAME=hbase-standby
fi

started=()
declare -A up_pid=() # NAME → the pid of its `up`, until finish waits for it
cleanup() {
	local rc=$? s p
	trap - EXIT INT TERM
	# An up still running (its partner failed) ends first, so that its pid file is there to stop.
	for p in ${up_pid[@]+"${up_pid[@]}"}; do wait "$p" 2>/dev/null || true; done
	# The test mode wipes what it started right after: an HBase gets 2 s to stop, not 10.
	if [ "$MODE" = test ]; then export HBASE_STOP_SECS="${HBASE_STOP_SECS:-2}"; fi
	for s in "${started[@]}"; do
		# "hbase-standby" is an instance of scripts/hbase.sh
		"$ROOT/scripts/${s%%-*}.sh" down "$s" || log "WARNING: $s down failed"
		if [ "$MODE" = test ]; then
			case "$s" in
			redis*) "$ROOT/scripts/redis.sh" wipe "$s" >/dev/null 2>&1 || log "WARNING: $s wipe failed" ;;
			hbase*) rm -rf "${RUN_DIR:?}/$s/data" "${RUN_DIR:?}/$s/zk" "${RUN_DIR:?}/$s/tmp" ;;
			esac
		fi
	done
	if [ -n "${sentinel_started:-}" ]; then
		"$ROOT/scripts/redis-sentinel.sh" wipe redis-sentinel-test >/dev/null 2>&1 || log "WARNING: redis-sentinel-test wipe failed"
	fi
	if [ -n "${cluster_started:-}" ]; then
		"$ROOT/scripts/redis-cluster.sh" wipe redis-cluster-test >/dev/null 2>&1 || log "WARNING: redis-cluster-test wipe failed"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# launch NAME: runs scripts/redis.sh up NAME or scripts/hbase.sh up NAME in the background; finish
# NAME VAR waits for it and exports VAR with the address from its env file; start NAME VAR does
# both. One that is already running (a `make services-up`) is used as is and left running; in the
# test mode it is wiped and started afresh instead (an instance of the test run's own, left over
# by an interrupted run).
launch() {
	local name="$1" script="${1%%-*}"
	if [ "$MODE" != test ] && "$ROOT/scripts/$script.sh" status "$name" >/dev/null 2>&1; then
		log "$name is already up (make services-up?); using it and leaving it running"
		return 0
	fi
	started+=("$name")
	if [ "$MODE" = test ]; then
		"$ROOT/scripts/$script.sh" down "$name" >/dev/null 2>&1 || true
		if [ "$script" = redis ]; then "$ROOT/scripts/redis.sh" wipe "$name" >/dev/null; fi
	fi
	"$ROOT/scripts/$script.sh" up "$name" >/dev/null &
	up_pid[$name]=$!
}
finish() {
	local name="$1" var="$2" addr
	if [ -n "${up_pid[$name]:-}" ]; then
		wait "${up_pid[$name]}" || die "$name did not come up"
		unset "up_pid[$name]"
	fi
	# The env file's variable is named after the instance for HBase (SMARTFEED_HBASE_TEST_ZK).
	addr=$(sed -n 's/^SMARTFEED_[A-Z_]*=//p' "$RUN_DIR/$name/env" | head -n 1)
	[ -n "$addr" ] || die "$name up wrote no address into run/$name/env"
	export "$var=$addr"
	log "using $var=$addr ($name)"
}
start() { launch "$1" && finish "$1" "$2"; }

if [ -n "${SMARTFEED_REDIS_ADDR:-}" ]; then
	log "using the Redis at SMARTFEED_REDIS_ADDR=$SMARTFEED_REDIS_ADDR"
elif [ "${SMARTFEED_NO_REDIS:-}" = 1 ]; then
	log "SMARTFEED_NO_REDIS=1: not starting Redis"
else
	start "$REDIS_NAME" SMARTFEED_REDIS_ADDR
fi

# The primary HBase and the standby start side by side (each JVM takes ~15 s to serve), and
# the Redis Sentinel and Cluster setups below start while they boot.
hbase_primary="" hbase_standby=""
if [ -n "${SMARTFEED_HBASE_ZK:-}" ]; then
	log "using the HBase at SMARTFEED_HBASE_ZK=$SMARTFEED_HBASE_ZK"
elif [ "${SMARTFEED_NO_HBASE:-}" = 1 ]; then
	log "SMARTFEED_NO_HBASE=1: not starting HBase"
else
	hbase_primary=1
	if [ -n "${SMARTFEED_HBASE_STANDBY_ZK:-}" ]; then
		log "using the standby HBase at SMARTFEED_HBASE_STANDBY_ZK=$SMARTFEED_HBASE_STANDBY_ZK"
	elif [ "${SMARTFEED_NO_HBASE_STANDBY:-}" = 1 ]; then
		log "SMARTFEED_NO_HBASE_STANDBY=1: no standby HBase"
	else
		hbase_standby=1
	fi
	"$ROOT/scripts/hbase.sh" prepare
	launch "$HBASE_NAME"
	if [ -n "$hbase_standby" ]; then launch "$STANDBY_NAME"; fi
fi

# In the test mode, the Redis Sentinel setup of the failover test (scripts/redis-sentinel.sh,
# a primary, a replica and three sentinels), fresh, named to the test by SMARTFEED_REDIS_SENTINEL;
# when it does not come up the test skips and says why.
if [ "$MODE" = test ] && [ "${SMARTFEED_NO_REDIS:-}" != 1 ] && [ -z "${SMARTFEED_REDIS_SENTINEL:-}" ]; then
	"$ROOT/scripts/redis-sentinel.sh" wipe redis-sentinel-test >/dev/null 2>&1 || true
	sentinel_started=1
	if "$ROOT/scripts/redis-sentinel.sh" up redis-sentinel-test >/dev/null; then
		export SMARTFEED_REDIS_SENTINEL="$RUN_DIR/redis-sentinel-test"
		log "using SMARTFEED_REDIS_SENTINEL=$SMARTFEED_REDIS_SENTINEL"
	else
		log "WARNING: the Redis Sentinel setup did not come up; the Sentinel failover test skips"
	fi
fi
# Likewise a Redis Cluster of its own (scripts/redis-cluster.sh), as SMARTFEED_REDIS_CLUSTER.
if [ "$MODE" = test ] && [ "${SMARTFEED_NO_REDIS:-}" != 1 ] && [ -z "${SMARTFEED_REDIS_CLUSTER:-}" ]; then
	"$ROOT/scripts/redis-cluster.sh" wipe redis-cluster-test >/dev/null 2>&1 || true
	cluster_started=1
	if "$ROOT/scripts/redis-cluster.sh" up redis-cluster-test >/dev/null; then
		export SMARTFEED_REDIS_CLUSTER="$RUN_DIR/redis-cluster-test"
		log "using SMARTFEED_REDIS_CLUSTER=$SMARTFEED_REDIS_CLUSTER"
	else
		log "WARNING: the Redis Cluster did not come up; the Cluster failover test skips"
	fi
fi

if [ -n "$hbase_primary" ]; then
	finish "$HBASE_NAME" SMARTFEED_HBASE_ZK
	if [ -n "$hbase_standby" ]; then
		finish "$STANDBY_NAME" SMARTFEED_HBASE_STANDBY_ZK
		"$ROOT/scripts/hbase.sh" replicate "$HBASE_NAME" "$STANDBY_NAME"
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
