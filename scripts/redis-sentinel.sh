#!/usr/bin/env bash
# scripts/redis-sentinel.sh up|down|status|wipe [NAME] — a Redis with automatic failover on
# loopback: a primary, a replica and three sentinels (Debian's redis-server and redis-sentinel).
# NAME (default "redis-sentinel", must start with "redis") names the setup and its folder
# run/NAME: n1/ and n2/ the two data nodes, s1/ s2/ s3/ the sentinels.
#   up:     installs redis-server and redis-sentinel if missing, starts what is not running and
#           prints the variables that point smartfeed at it (also written to run/NAME/env):
#             SMARTFEED_REDIS_MODE=sentinel
#             SMARTFEED_REDIS_SENTINEL_MASTER=smartfeed
#             SMARTFEED_REDIS_SENTINEL_ADDRS=127.0.0.1:<s1>,127.0.0.1:<s2>,127.0.0.1:<s3>
#           and, for the fault test, SMARTFEED_REDIS_SENTINEL=<run/NAME> (in run/NAME/test-env).
#           Durable: AOF on (appendfsync REDIS_APPENDFSYNC, default everysec) on both nodes; the
#           data, the ports and the roles are kept across down/up. Each process has a config file
#           of its own that Redis rewrites (a replica promoted by Sentinel stays the primary
#           after a restart; the sentinels keep what they learnt).
#           A sentinel calls the primary down after REDIS_SENTINEL_DOWN_AFTER_MS (default 1000)
#           without an answer; two of the three must agree before one of them promotes the replica.
#   down:   stops the five processes `up` started (SIGTERM: the nodes flush their AOF).
#   status: prints the env lines and which node is the primary; exits 1 when something is down.
#   wipe:   down, then delete the data and the config files (a fresh setup on the next up).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NAME="${2:-redis-sentinel}"
case "$NAME" in redis*) ;; *) die "instance name must start with redis: $NAME" ;; esac
case "$NAME" in */*|*..*) die "instance name must be a plain folder name: $NAME" ;; esac
DIR="$RUN_DIR/$NAME"
MASTER=smartfeed
NODES="n1 n2"
SENTINELS="s1 s2 s3"

ping() { # ping PORT
	redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG
}

# port_of NAME: the port kept for process NAME, a free one chosen (and kept) the first time.
port_of() {
	local f="$DIR/$1/port"
	if [ ! -s "$f" ]; then
		mkdir -p "$DIR/$1"
		free_port >"$f"
	fi
	cat "$f"
}

# running NAME: true when the process of NAME (its pid file) is alive and answers PING.
running() {
	local d="$DIR/$1" pid
	[ -s "$d/redis.pid" ] || return 1
	pid=$(cat "$d/redis.pid")
	pid_alive "$pid" && pid_cmd_matches "$pid" "redis-s" && ping "$(cat "$d/port")"
}

# wait_ping NAME: wait until the process of NAME answers (longer while a node loads its AOF).
wait_ping() {
	local d="$DIR/$1" port i
	port=$(cat "$d/port")
	for i in $(seq 1 6000); do
		ping "$port" && [ -s "$d/redis.pid" ] && return 0
		if [ "$i" -ge 100 ]; then
			redis-cli -h 127.0.0.1 -p "$port" ping 2>&1 | grep -q LOADING || break
		fi
		sleep 0.1
	done
	tail -20 "$d/redis.log" >&2 || true
	die "$1 (127.0.0.1:$port) did not answer PING"
}

node_conf() { # node_conf NAME [PRIMARY_PORT]: the first config of a data node
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
EOF
	if [ -n "${2:-}" ]; then
		echo "replicaof 127.0.0.1 $2" >>"$d/redis.conf"
	fi
}

sentinel_conf() { # sentinel_conf NAME PRIMARY_PORT: the first config of a sentinel
	local d="$DIR/$1" port
	port=$(port_of "$1")
	cat >"$d/redis.conf" <<EOF
bind 127.0.0.1
port $port
daemonize yes
pidfile $d/redis.pid
logfile $d/redis.log
dir $d
sentinel monitor $MASTER 127.0.0.1 $2 2
sentinel down-after-milliseconds $MASTER ${REDIS_SENTINEL_DOWN_AFTER_MS:-1000}
sentinel failover-timeout $MASTER 10000
sentinel parallel-syncs $MASTER 1
EOF
}

write_env() {
	local addrs="" s
	for s in $SENTINELS; do
		addrs="${addrs:+$addrs,}127.0.0.1:$(port_of "$s")"
	done
	{
		echo "SMARTFEED_REDIS_MODE=sentinel"
		echo "SMARTFEED_REDIS_SENTINEL_MASTER=$MASTER"
		echo "SMARTFEED_REDIS_SENTINEL_ADDRS=$addrs"
	} >"$DIR/env"
	echo "SMARTFEED_REDIS_SENTINEL=$DIR" >"$DIR/test-env"
}

# primary_port: the primary's port as the first sentinel that answers sees it.
primary_port() {
	local s
	for s in $SENTINELS; do
		[ -s "$DIR/$s/port" ] || continue
		redis-cli -h 127.0.0.1 -p "$(cat "$DIR/$s/port")" sentinel get-master-addr-by-name "$MASTER" 2>/dev/null |
			sed -n 2p | grep . && return 0
	done
	return 1
}

up() {
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		apt_install redis-server
	fi
	if ! command -v redis-sentinel >/dev/null 2>&1; then
		apt_install redis-sentinel
	fi
	mkdir -p "$DIR"
	local n s p1
	p1=$(port_of n1)
	[ -s "$DIR/n1/redis.conf" ] || node_conf n1
	[ -s "$DIR/n2/redis.conf" ] || node_conf n2 "$p1"
	for s in $SENTINELS; do
		[ -s "$DIR/$s/redis.conf" ] || sentinel_conf "$s" "$p1"
	done
	for n in $NODES; do
		if running "$n"; then continue; fi
		rm -f "$DIR/$n/redis.pid"
		log "starting $n on 127.0.0.1:$(cat "$DIR/$n/port") (AOF, data in run/$NAME/$n)"
		redis-server "$DIR/$n/redis.conf" >/dev/null
	done
	for n in $NODES; do wait_ping "$n"; done
	for s in $SENTINELS; do
		if running "$s"; then continue; fi
		rm -f "$DIR/$s/redis.pid"
		log "starting sentinel $s on 127.0.0.1:$(cat "$DIR/$s/port")"
		redis-sentinel "$DIR/$s/redis.conf" >/dev/null
	done
	for s in $SENTINELS; do wait_ping "$s"; done
	# Up when the sentinels agree on a primary that answers, and know each other and the replica.
	local i port seen
	for i in $(seq 1 300); do
		if port=$(primary_port) && ping "$port"; then
			seen=$(redis-cli -h 127.0.0.1 -p "$(cat "$DIR/s1/port")" sentinel master "$MASTER" 2>/dev/null |
				awk 'p{print; exit} /^num-other-sentinels$/{p=1}')
			[ "${seen:-0}" -ge 2 ] && break
		fi
		sleep 0.1
	done
	port=$(primary_port) || die "the sentinels name no primary for $MASTER"
	write_env
	log "up: primary 127.0.0.1:$port, sentinels see ${seen:-0} other sentinels"
	cat "$DIR/env" "$DIR/test-env"
}

down() {
	local p
	for p in $SENTINELS $NODES; do
		stop_pid "$DIR/$p/redis.pid" redis-s 15
	done
	rm -f "$DIR/env" "$DIR/test-env"
}

status() {
	local p bad=0 port
	for p in $NODES $SENTINELS; do
		if running "$p"; then
			log "$p up on 127.0.0.1:$(cat "$DIR/$p/port")"
		else
			log "$p down"
			bad=1
		fi
	done
	if port=$(primary_port); then log "primary: 127.0.0.1:$port"; else bad=1; fi
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
