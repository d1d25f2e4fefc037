#!/usr/bin/env bash
# scripts/demo.sh [DEMO_ARGS...] — what `make demo` runs: bin/smartfeed demo on Pebble (run/demo)
# with the Redis that REDIS names:
#   single   (the default) one Redis, started by scripts/with-services.sh and stopped after;
#   sentinel a primary, a replica and three sentinels (scripts/redis-sentinel.sh), the demo's
#            pinlater, caches and rate limiters on Sentinel's failover client;
#   cluster  a 3-primary Redis Cluster with replicas (scripts/redis-cluster.sh).
# A Sentinel or Cluster setup is started if it is not running and stopped when the demo exits
# (its data is kept, like the single Redis's). Kill its primary during the demo
# (`kill -9 $(cat run/redis-sentinel/NODE/redis.pid)`, NODE the primary that `status` names) to watch the failover
# on the demo's live line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

mode="${REDIS:-single}"
case "$mode" in
single)
	SMARTFEED_NO_HBASE=1 exec scripts/with-services.sh bin/smartfeed demo "$@"
	;;
sentinel | cluster)
	script="scripts/redis-$mode.sh"
	"$script" up >/dev/null
	trap '"$script" down >/dev/null 2>&1 || true' EXIT
	set -a
	# shellcheck disable=SC1090
	. "$RUN_DIR/redis-$mode/env"
	set +a
	log "demo on Redis $mode: $(tr '\n' ' ' <"$RUN_DIR/redis-$mode/env")"
	SMARTFEED_NO_HBASE=1 bin/smartfeed demo "$@"
	;;
*)
	die "REDIS=$mode: want single, sentinel or cluster"
	;;
esac
