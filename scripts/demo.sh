#!/usr/bin/env bash
# scripts/demo.sh [DEMO_ARGS...] — what `make demo` runs: bin/smartfeed demo with the Redis that
# REDIS names and the stores that HBASE names.
# REDIS:
#   single   (the default) one Redis, started by scripts/with-services.sh and stopped after;
#   sentinel a primary, a replica and three sentinels (scripts/redis-sentinel.sh), the demo's
#            pinlater, caches and rate limiters on Sentinel's failover client;
#   cluster  a 3-primary Redis Cluster with replicas (scripts/redis-cluster.sh).
# HBASE:
#   (empty)  (the default) Pebble under run/demo;
#   cluster  the graph, the pools and the primary feed on a distributed HBase of three region
#            servers (scripts/hbase-cluster.sh, run/hbase-cluster), the standby feed on a
#            standalone HBase beside it (scripts/hbase.sh, run/hbase-demo-standby; empty when
#            this script starts it), copied there by feedsvc's change log
#            (--hbase-replication app), so GetFeed can hedge to it.
# KILL_RS=N@SECS (with HBASE=cluster): kill -9 region server N (1..3) SECS seconds after the demo's
#   first pool insert (scripts/hbase-cluster.sh kill-rs N; the demo's admin port is then a free
#   one, printed on its metrics line), to watch the live line dip while the master
#   reassigns its regions and recover once they reopen elsewhere.
# Whatever this script starts is stopped when the demo exits, its data kept; what was already
# running is left running (a region server KILL_RS killed is started again then). Kill a Redis
# primary during the demo (`kill -9 $(cat run/redis-sentinel/NODE/redis.pid)`, NODE the primary
# that `status` names) to watch the failover on the demo's live line.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

mode="${REDIS:-single}"
hbase="${HBASE:-}"
case "$mode" in single | sentinel | cluster) ;; *) die "REDIS=$mode: want single, sentinel or cluster" ;; esac
case "$hbase" in "" | cluster) ;; *) die "HBASE=$hbase: want cluster or nothing (Pebble)" ;; esac
kill_rs="" kill_at=""
if [ -n "${KILL_RS:-}" ]; then
	[ "$hbase" = cluster ] || die "KILL_RS needs HBASE=cluster"
	case "$KILL_RS" in
	[1-3]@[0-9]*) kill_rs="${KILL_RS%@*}" kill_at="${KILL_RS#*@}" ;;
	*) die "KILL_RS=$KILL_RS: want N@SECS, N a region server 1..3" ;;
	esac
	case "$kill_at" in *[!0-9]*) die "KILL_RS=$KILL_RS: SECS must be whole seconds" ;; esac
fi

stops=() # commands run when the demo exits, last first
cleanup() {
	local i
	for ((i = ${#stops[@]} - 1; i >= 0; i--)); do eval "${stops[i]}" || true; done
}
trap cleanup EXIT

args=()
if [ "$hbase" = cluster ]; then
	# Running: its ZooKeeper and master are (a killed region server is not started again).
	if { scripts/hbase-cluster.sh status 2>&1 || true; } | grep -q '] master up'; then
		log "HBase cluster already running (run/hbase-cluster): left running after the demo"
		[ -z "$kill_rs" ] || stops+=("scripts/hbase-cluster.sh start-rs $kill_rs >/dev/null")
	else
		scripts/hbase-cluster.sh up >/dev/null
		stops+=("scripts/hbase-cluster.sh down >/dev/null 2>&1")
	fi
	if ! scripts/hbase.sh status hbase-demo-standby >/dev/null 2>&1; then
		# A standalone HBase starts empty: the standby holds the feed rows written from now on.
		scripts/hbase.sh up hbase-demo-standby >/dev/null
		stops+=("scripts/hbase.sh down hbase-demo-standby >/dev/null 2>&1")
	fi
	zk=$(sed -n 's/^SMARTFEED_HBASE_CLUSTER_ZK=//p' "$RUN_DIR/hbase-cluster/env")
	standby=$(sed -n 's/^SMARTFEED_HBASE_DEMO_STANDBY_ZK=//p' "$RUN_DIR/hbase-demo-standby/env")
	[ -n "$zk" ] && [ -n "$standby" ] || die "no ZooKeeper address in run/hbase-cluster/env or run/hbase-demo-standby/env"
	# Its own Redis namespace and data dir: the Pebble demo's tasks and graph.json (run/demo) name
	# objects this one does not have. The namespace is taken over: its owner can only be an
	# earlier HBase demo, on this cluster (the same deployment: nothing to take) or on one since
	# wiped (gone for good).
	args+=(--storage hbase --hbase-pools-zk "$zk" --hbase-primary-zk "$zk" --hbase-standby-zk "$standby"
		--hbase-replication app --redis-namespace demo_hbase --redis-namespace-takeover --data-dir run/demo-hbase)
	log "demo on the HBase cluster at $zk (pools, primary feed), standby feed on $standby"
fi

if [ -n "$kill_rs" ]; then
	# The demo's admin port, whose /metrics tells when the first pool insert happened: a free
	# one, so another demo on the default port is not mistaken for this one.
	admin="127.0.0.1:$(free_port)"
	args+=(--admin-addr "$admin")
	(
		# SECS count from the first pool insert (after the graph is built).
		until curl -fs "http://$admin/metrics" 2>/dev/null |
			grep -Eq '^smartfeed_worker_pool_inserts_total(\{[^}]*\})? [1-9]'; do
			sleep 0.5
		done
		sleep "$kill_at"
		log "KILL_RS: ${kill_at}s after the first pool insert, killing region server $kill_rs"
		scripts/hbase-cluster.sh kill-rs "$kill_rs" >&2
	) &
	killer=$!
	stops+=("kill $killer 2>/dev/null")
fi

case "$mode" in
single)
	SMARTFEED_NO_HBASE=1 scripts/with-services.sh bin/smartfeed demo "${args[@]}" "$@"
	;;
sentinel | cluster)
	script="scripts/redis-$mode.sh"
	"$script" up >/dev/null
	stops+=("$script down >/dev/null 2>&1")
	set -a
	# shellcheck disable=SC1090
	. "$RUN_DIR/redis-$mode/env"
	set +a
	log "demo on Redis $mode: $(tr '\n' ' ' <"$RUN_DIR/redis-$mode/env")"
	bin/smartfeed demo "${args[@]}" "$@"
	;;
esac
