#!/usr/bin/env bash
# scripts/redis-cluster.sh up|down|status|wipe [NAME] — a Redis Cluster on loopback: three
# primaries, each with one replica (Debian's redis-server). NAME (default "redis-cluster", must
# start with "redis") names the setup and its folder run/NAME, one subfolder per node (c1..c6).
#   up:     installs redis-server if missing, starts the nodes that are not running, creates the
#           cluster the first time (redis-cli --cluster create, one replica per primary), waits
#           until it reports cluster_state:ok, and prints the variables that point smartfeed at
#           it (also written to run/NAME/env):
#             SMARTFEED_REDIS_MODE=cluster
#             SMARTFEED_REDIS_CLUSTER_ADDRS=127.0.0.1:<c1>,...,127.0.0.1:<c6>
#           and, for the tests, SMARTFEED_REDIS_CLUSTER=<run/NAME> (in run/NAME/test-env).
#           Durable: AOF on (appendfsync REDIS_APPENDFSYNC, default everysec); data, ports and the
#           cluster's layout (each node's nodes.conf) are kept across down/up. A replica takes
#           over a primary that does not answer for REDIS_CLUSTER_NODE_TIMEOUT_MS (default 2000).
#   down:   stops the six nodes `up` started (SIGTERM: they flush their AOF).
#   status: prints the env lines and the cluster's state; exits 1 when something is down.
#   wipe:   down, then delete the data and the layout (a fresh cluster on the next up).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NAME="${2:-redis-cluster}"
case "$NAME" in redis*) ;; *) die "instance name must start with redis: $NAME" ;; esac
case "$NAME" in */*|*..*) die "instance name must be a plain folder name: $NAME" ;; esac
DIR="$RUN_DIR/$NAME"
NODES="c1 c2 c3 c4 c5 c6"

ping() { # ping PORT
	redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG
}

# cluster_port prints a port that is free, and whose cluster bus port (port + 10000) is a valid
# port that is free too.
cluster_port() {
	local p i low=32768 top
	# Both ports below the kernel's ephemeral range, where no outgoing connection takes them
	# between the check and the node's start (a node whose bus port is taken aborts).
	if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
		read -r low _ </proc/sys/net/ipv4/ip_local_port_range
	fi
	top=$(( low - 10001 ))
	[ "$top" -gt 11000 ] || die "the ephemeral port range starts at $low: no room for a port and its bus port (+10000) below it"
	for i in $(seq 1 200); do
		p=$(( 10000 + RANDOM % (top - 10000) ))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port pair found"
}

# port_of NAME: the port kept for node NAME, chosen (and kept) the first time.
port_of() {
	local f="$DIR/$1/port"
	if [ ! -s "$f" ]; then
		mkdir -p "$DIR/$1"
		cluster_port >"$f"
	fi
	cat "$f"
}

running() {
	local d="$DIR/$1" pid
	[ -s "$d/redis.pid" ] || return 1
	pid=$(cat "$d/redis.pid")
	pid_alive "$pid" && pid_cmd_matches "$pid" redis-server && ping "$(cat "$d/port")"
}

node_conf() {
	local d="$DIR/$1" port
	port=$(port_of "$1")
	cat >"$d/redis.conf" <<EOF
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
pidfile $d/redis.pid
logfile $d/redis.log
dir $d
save ""
appendonly yes
appendfsync ${REDIS_APPENDFSYNC:-everysec}
cluster-enabled yes
cluster-config-file $d/nodes.conf
cluster-node-timeout ${REDIS_CLUSTER_NODE_TIMEOUT_MS:-2000}
EOF
}

addrs() {
	local out="" n
	for n in $NODES; do out="${out:+$out,}127.0.0.1:$(port_of "$n")"; done
	echo "$out"
}

cluster_ok() {
	redis-cli -h 127.0.0.1 -p "$(port_of c1)" cluster info 2>/dev/null | grep -q '^cluster_state:ok'
}

up() {
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		apt_install redis-server
	fi
	mkdir -p "$DIR"
	local n i
	for n in $NODES; do
		[ -s "$DIR/$n/redis.conf" ] || node_conf "$n"
		if running "$n"; then continue; fi
		rm -f "$DIR/$n/redis.pid"
		log "starting $n on 127.0.0.1:$(port_of "$n") (AOF, data in run/$NAME/$n)"
		redis-server "$DIR/$n/redis.conf" >/dev/null
	done
	for n in $NODES; do
		for i in $(seq 1 6000); do
			ping "$(port_of "$n")" && break
			if [ "$i" -ge 100 ]; then
				redis-cli -h 127.0.0.1 -p "$(port_of "$n")" ping 2>&1 | grep -q LOADING || break
			fi
			sleep 0.1
		done
		ping "$(port_of "$n")" || { tail -20 "$DIR/$n/redis.log" >&2 || true; die "$n did not answer PING"; }
	done
	if [ ! -e "$DIR/created" ]; then
		local hosts=()
		for n in $NODES; do hosts+=("127.0.0.1:$(port_of "$n")"); done
		log "creating the cluster: 3 primaries, 1 replica each"
		redis-cli --cluster create "${hosts[@]}" --cluster-replicas 1 --cluster-yes >"$DIR/create.log" 2>&1 ||
			{ tail -20 "$DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
		touch "$DIR/created"
	fi
	for i in $(seq 1 600); do
		cluster_ok && break
		sleep 0.1
	done
	cluster_ok || die "the cluster does not report cluster_state:ok"
	# Each primary's replica attached (right after create the replicas are still joining).
	for i in $(seq 1 300); do
		[ "$(redis-cli -h 127.0.0.1 -p "$(port_of c1)" cluster nodes 2>/dev/null | grep -c ' slave ')" -ge 3 ] && break
		sleep 0.1
	done
	{
		echo "SMARTFEED_REDIS_MODE=cluster"
		echo "SMARTFEED_REDIS_CLUSTER_ADDRS=$(addrs)"
	} >"$DIR/env"
	echo "SMARTFEED_REDIS_CLUSTER=$DIR" >"$DIR/test-env"
	log "up: cluster_state ok"
	cat "$DIR/env" "$DIR/test-env"
}

down() {
	local n
	for n in $NODES; do
		stop_pid "$DIR/$n/redis.pid" redis-server 15
	done
	rm -f "$DIR/env" "$DIR/test-env"
}

status() {
	local n bad=0
	for n in $NODES; do
		if running "$n"; then log "$n up on 127.0.0.1:$(cat "$DIR/$n/port")"; else log "$n down"; bad=1; fi
	done
	if cluster_ok; then log "cluster_state ok"; else log "cluster not ok"; bad=1; fi
	[ "$bad" -eq 0 ] || return 1
	cat "$DIR/env" "$DIR/test-env"
}

wipe() {
	down
	rm -rf "$DIR"
	log "data wiped"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
wipe) wipe ;;
*) echo "usage: $0 up|down|status|wipe [NAME]" >&2; exit 2 ;;
esac
