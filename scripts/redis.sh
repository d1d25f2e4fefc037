#!/usr/bin/env bash
# scripts/redis.sh up|down|status|wipe [NAME] — the pinlater Redis on loopback, run as a real dependency.
# NAME (default "redis", must start with "redis") names the instance and its folder run/NAME:
# `make test` runs its own, "redis-test", so the tests never write into the Redis a user gets
# from `scripts/redis.sh up` or `make demo` (run/redis).
#   up:     installs Debian's redis-server if missing, starts it (data, pid, log under run/NAME/),
#           prints SMARTFEED_REDIS_ADDR=127.0.0.1:<port> and writes it to run/NAME/env.
#           Durable: AOF on (appendfsync REDIS_APPENDFSYNC, default everysec; "always" fsyncs
#           every write), and the data and the port are kept across down/up, so queued tasks
#           survive a restart and clients reconnect to the same address. The first up picks a
#           free port; later ups reuse it (a new one only if it was taken meanwhile).
#   down:   stops only the pid that `up` started (SIGTERM: Redis flushes its AOF).
#   status: prints the env line and exits 0 when it is up, exits 1 otherwise.
#   wipe:   down, then delete the data (a fresh Redis on the next up).
# The trade-off (docs/reliability.md): everysec loses at most about a second of acknowledged
# enqueues if the machine (not just Redis) dies; always loses none and costs an fsync per write.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NAME="${2:-redis}"
case "$NAME" in redis*) ;; *) die "instance name must start with redis: $NAME" ;; esac
case "$NAME" in */*|*..*) die "instance name must be a plain folder name: $NAME" ;; esac
DIR="$RUN_DIR/$NAME"
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
	rm -f "$PIDFILE" "$ENVFILE"
	port=""
	if [ -s "$DIR/port.kept" ]; then
		port=$(cat "$DIR/port.kept")
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			log "port $port (kept from the last run) is taken; picking another"
			port=""
		fi
	fi
	[ -n "$port" ] || port=$(free_port)
	local fsync="${REDIS_APPENDFSYNC:-everysec}"
	case "$fsync" in everysec|always|no) ;; *) die "REDIS_APPENDFSYNC=$fsync: want everysec, always or no" ;; esac
	log "starting redis-server on 127.0.0.1:$port ($(redis-server --version | awk '{print $3}'), AOF appendfsync $fsync, data in run/$NAME)"
	redis-server --bind 127.0.0.1 --port "$port" --daemonize yes \
		--pidfile "$PIDFILE" --dir "$DIR" --logfile "$DIR/redis.log" \
		--save '' --appendonly yes --appendfsync "$fsync" --protected-mode yes >/dev/null
	# Up to 10 s to answer; longer while it answers LOADING (replaying a large AOF), for as
	# long as the server lives, up to 10 minutes.
	local i
	for i in $(seq 1 6000); do
		ping "$port" && [ -s "$PIDFILE" ] && break
		if [ "$i" -ge 100 ]; then
			redis-cli -h 127.0.0.1 -p "$port" ping 2>&1 | grep -q LOADING || break
			[ $((i % 100)) -eq 0 ] && log "redis-server is loading its data ($((i / 10)) s)"
		fi
		sleep 0.1
	done
	ping "$port" || { tail -20 "$DIR/redis.log" >&2 || true; die "redis-server did not answer PING"; }
	echo "$port" >"$DIR/port"
	echo "$port" >"$DIR/port.kept"
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

wipe() {
	down
	rm -rf "$DIR/appendonlydir" "$DIR"/*.aof "$DIR/dump.rdb" "$DIR/port.kept"
	log "data wiped"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
wipe) wipe ;;
*) echo "usage: $0 up|down|status|wipe [NAME]" >&2; exit 2 ;;
esac
