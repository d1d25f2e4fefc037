#!/usr/bin/env bash
# scripts/scale.sh [DEMO_ARGS...] — one scaling measurement: runs the demo (scripts/demo.sh, with
# the REDIS and HBASE it is given) until its event loop starts, then measures for SECS seconds
# (default 60) and stops it with Ctrl-C's signal. Prints the demo's summary line (events/s,
# pool inserts/s, GetFeed p50/p99 over the window) and the CPU each server process used in the
# window, in percent of one core: smartfeed, each Redis, each HBase JVM (ZooKeeper, master,
# region servers, the standby). Run it twice with one thing changed to read a scaling step:
#   HBASE=cluster scripts/scale.sh --demo-events-per-sec 200          # three region servers
#   scripts/hbase-cluster.sh kill-rs 2; scripts/hbase-cluster.sh kill-rs 3
#   HBASE=cluster scripts/scale.sh --demo-events-per-sec 200          # one region server
#   scripts/scale.sh --pebble-no-sync --demo-events-per-sec 2000      # one Redis
#   REDIS=cluster scripts/scale.sh --pebble-no-sync --demo-events-per-sec 2000 # Redis Cluster
# Env: SECS (default 60). What it starts, scripts/demo.sh stops (a cluster already up stays up).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

secs="${SECS:-60}"
admin="127.0.0.1:$(free_port)"
out="$RUN_DIR/scale.out"
mkdir -p "$RUN_DIR"
go build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed

# cpu_ticks PID: user + system clock ticks the process has used (fields 14 and 15 of
# /proc/PID/stat, counted after the command's closing parenthesis).
cpu_ticks() {
	[ -r "/proc/$1/stat" ] || { echo 0; return; }
	sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
}

# servers prints "NAME PID" for each server process that is running.
servers() {
	local f name
	[ -n "${demo_pid:-}" ] && echo "smartfeed $demo_pid"
	for f in run/redis/redis.pid run/redis-cluster/c*/redis.pid run/redis-sentinel/*/redis.pid \
		run/hbase-cluster/*/pid run/hbase-demo-standby/hbase.pid; do
		[ -s "$f" ] || continue
		name=${f#run/}
		name=${name%/*pid}
		pid_alive "$(cat "$f")" && echo "$name $(cat "$f")"
	done
}

# descendant PID NAME: the pid of a process named NAME under PID.
descendant() {
	local p c
	for p in $(pgrep -P "$1" || true); do
		if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = "$2" ]; then echo "$p"; return 0; fi
		c=$(descendant "$p" "$2") && { echo "$c"; return 0; }
	done
	return 1
}

scripts/demo.sh --admin-addr "$admin" --duration 0 "$@" >"$out" 2>&1 &
runner=$!
log "demo started (output: run/scale.out); waiting for its event loop (after the graph is built)"
# The "events:" line starts the loop; a pool insert alone could be a backlog task of an earlier run.
until grep -q '^events: ' "$out" && curl -fs "http://$admin/metrics" 2>/dev/null | grep -Eq '^smartfeed_worker_pool_inserts_total(\{[^}]*\})? [1-9]'; do
	pid_alive "$runner" || { tail -20 "$out" >&2; die "the demo exited before its event loop started"; }
	sleep 0.5
done
demo_pid=$(descendant "$runner" smartfeed) || die "no smartfeed process under the demo"
declare -A t0
while read -r name pid; do t0[$name]=$(cpu_ticks "$pid"); done < <(servers)
start=$(date +%s.%N)
log "measuring for ${secs}s"
sleep "$secs"
declare -A t1 pids
while read -r name pid; do t1[$name]=$(cpu_ticks "$pid"); pids[$name]=$pid; done < <(servers)
end=$(date +%s.%N)
kill -INT "$demo_pid"
wait "$runner" || true
grep '^summary:' "$out" || { tail -20 "$out" >&2; die "no summary line (run/scale.out)"; }
hz=$(getconf CLK_TCK)
echo "CPU over the ${secs}s window (percent of one core; the machine has $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)):"
for name in $(printf '%s\n' "${!t1[@]}" | sort); do
	awk -v n="$name" -v a="${t0[$name]:-0}" -v b="${t1[$name]}" -v s="$start" -v e="$end" -v hz="$hz" \
		'BEGIN { printf "  %-22s %5.0f%%\n", n, 100 * (b - a) / hz / (e - s) }'
done
