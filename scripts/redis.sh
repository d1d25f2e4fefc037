#!/usr/bin/env bash
# scripts/redis.sh up|down|status — a throwaway redis-server on a free loopback port for tests.
#   up:     installs Debian's redis-server if missing, starts it (data, pid, log under run/redis/),
#           prints SMARTFEED_REDIS_ADDR=127.0.0.1:<port> and writes it to run/redis/env.
#   down:   stops only the pid that `up` started.
#   status: prints the env line and exits 0 when it is up, exits 1 otherwise.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

DIR="$RUN_DIR/redis"
PIDFILE="$DIR/redis.pid"
ENVFILE="$DIR/env"

ping() { # ping PORT
	redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG
}

running_port() {
	[ -f "$PIDFILE" ] && [ -f "$DIR/port" ] || return 1
	local pid port
	pid=$(cat "$PIDFILE"); port=$(cat "$DIR/port")
	pid_alive "$pid" && pid_cmd_matches "$pid" redis-server && ping "$port" || return 1
	echo "$port"
}

up() {
	local port
	if port=$(running_port); then
		log "already running on 127.0.0.1:$port"
		echo "SMARTFEED_REDIS_ADDR=127.0.0.1:$port"
		return 0
	fi
	if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
		apt_install redis-server
	fi
	mkdir -p "$DIR"
	rm -f "$PIDFILE" "$ENVFILE" "$DIR/dump.rdb"
	port=$(free_port)
	log "starting redis-server on 127.0.0.1:$port ($(redis-server --version | awk '{print $3}'))"
	redis-server --bind 127.0.0.1 --port "$port" --daemonize yes \
		--pidfile "$PIDFILE" --dir "$DIR" --logfile "$DIR/redis.log" \
		--save '' --appendonly no --protected-mode yes >/dev/null
	local i
	for i in $(seq 1 100); do
		ping "$port" && [ -s "$PIDFILE" ] && break
		sleep 0.1
	done
	ping "$port" || { tail -20 "$DIR/redis.log" >&2 || true; die "redis-server did not answer PING"; }
	echo "$port" >"$DIR/port"
	echo "SMARTFEED_REDIS_ADDR=127.0.0.1:$port" >"$ENVFILE"
	log "up (pid $(cat "$PIDFILE"))"
	cat "$ENVFILE"
}

down() {
	stop_pid "$PIDFILE" redis-server 15
	rm -f "$ENVFILE" "$DIR/port"
}

status() {
	local port
	if port=$(running_port); then
		echo "SMARTFEED_REDIS_ADDR=127.0.0.1:$port"
	else
		log "not running"
		return 1
	fi
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
*) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
