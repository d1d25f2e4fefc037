# Shared helpers for scripts/*.sh. Source it; do not run it.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/run"

log() { printf '[%s %s] %s\n' "$(date +%H:%M:%S)" "$(basename "$0" .sh)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# as_root runs a command as root: directly when we are root, else through sudo.
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# apt_install PKG... installs Debian packages non-interactively; apt-get update runs once per
# machine boot-ish (marker under /tmp) so repeated calls stay cheap.
apt_install() {
	local marker=/tmp/.smartfeed-apt-updated
	if [ ! -e "$marker" ]; then
		log "apt-get update"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
		touch "$marker" 2>/dev/null || true
	fi
	log "apt-get install -y $*"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 \
		|| die "apt-get install $* failed"
}

# free_port prints a TCP port that is free on every interface right now.
free_port() {
	if command -v python3 >/dev/null 2>&1; then
		python3 -c 'import socket
s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1]); s.close()'
		return
	fi
	local p i
	for i in $(seq 1 200); do
		p=$(( 20000 + RANDOM % 30000 ))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# pid_alive PID reports whether the process exists (and is not a zombie).
pid_alive() {
	local pid="$1"
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	local st
	st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
	[ "$st" != "Z" ]
}

# pid_cmd_matches PID WORD: true when the process's command line contains WORD (guards against
# a recycled pid before we signal it).
pid_cmd_matches() {
	local pid="$1" word="$2"
	[ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$word"
}

# stop_pid PIDFILE WORD [TIMEOUT]: TERM the pid from PIDFILE (if it is ours), wait, then KILL.
stop_pid() {
	local pidfile="$1" word="$2" timeout="${3:-30}" pid i
	[ -f "$pidfile" ] || { log "not running (no $pidfile)"; return 0; }
	pid=$(cat "$pidfile")
	if ! pid_alive "$pid" || ! pid_cmd_matches "$pid" "$word"; then
		log "pid $pid is not running"
		rm -f "$pidfile"
		return 0
	fi
	log "stopping pid $pid"
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 $((timeout * 5))); do
		pid_alive "$pid" || break
		sleep 0.2
	done
	if pid_alive "$pid"; then
		log "pid $pid still alive after ${timeout}s; sending KILL"
		kill -KILL "$pid" 2>/dev/null || true
		for i in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.2; done
	fi
	rm -f "$pidfile"
	log "stopped"
}

# hbase_zk ZK prints the one ZooKeeper host:port of the HBase a Java client script talks to:
# ZK when given, else the one scripts/hbase.sh up wrote into run/hbase/env; it dies otherwise.
hbase_zk() {
	local zk="$1"
	if [ -z "$zk" ] && [ -s "$RUN_DIR/hbase/env" ]; then
		zk=$(sed -n 's/^SMARTFEED_HBASE_ZK=//p' "$RUN_DIR/hbase/env")
	fi
	[ -n "$zk" ] || die "no HBase: pass --zk HOST:PORT or set SMARTFEED_HBASE_ZK (scripts/hbase.sh up)"
	case "$zk" in *,*) die "--zk: one ZooKeeper host:port, got $zk" ;; *:*) ;; *) die "--zk: want HOST:PORT, got $zk" ;; esac
	echo "$zk"
}

# hbase_java TOOL HEAP CP_FILE ARGS... runs test/hbase/tools/TOOL.java (compiled once per change
# of it) with ARGS, on the HBase jars listed in CP_FILE (scripts/hbase.sh classpath prints it),
# with HEAP and two processors; HBase's client logs go under run/hbase-cp.
hbase_java() {
	local tool="$1" heap="$2" cp_file="$3"
	shift 3
	local src="$ROOT/test/hbase/tools/$tool.java" out="$RUN_DIR/hbase-cp/classes-$tool"
	if [ ! -f "$out/$tool.class" ] || [ "$src" -nt "$out/$tool.class" ]; then
		mkdir -p "$out"
		javac -nowarn -d "$out" -cp "$(cat "$cp_file")" "$src" >&2 || die "cannot compile $src"
	fi
	java -Xmx"$heap" -XX:ActiveProcessorCount=2 \
		--add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED \
		--add-opens java.base/sun.nio.ch=ALL-UNNAMED -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true \
		-Dlog4j2.configurationFile="file:$ROOT/test/hbase/conf/log4j2.properties" -Dhbase.log.dir="$RUN_DIR/hbase-cp" \
		-cp "$out:$(cat "$cp_file")" "$tool" "$@"
}
