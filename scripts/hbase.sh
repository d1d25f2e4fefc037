#!/usr/bin/env bash
# scripts/hbase.sh up|down|status [NAME] — a throwaway standalone HBase 2.6 (master + region
# server + in-process ZooKeeper, one JVM) assembled from Maven Central jars (see test/hbase/pom.xml).
# NAME (default "hbase") names the instance: its folder is run/NAME and its env line is
# SMARTFEED_HBASE_ZK for "hbase", SMARTFEED_<NAME>_ZK otherwise ("hbase-standby" →
# SMARTFEED_HBASE_STANDBY_ZK), so two instances (a primary and a standby) run side by side with
# their own ZooKeeper, master and region server ports and data dirs.
#   up:     resolves the classpath (cached in ~/.m2 after the first run), wipes run/hbase/ data,
#           starts HMaster on a free ZooKeeper port, waits until tables can be created, then prints
#           SMARTFEED_HBASE_ZK=127.0.0.1:<port> and writes it to run/hbase/env.
#   restart: starts a stopped or killed instance again on its port with its data kept (HBase
#           replays the dead region server's WAL), for crash tests.
#   down:   stops only the pid that `up` started and waits for it to exit.
#   status: prints the env line and exits 0 when it is up, exits 1 otherwise.
#   classpath: resolves the classpath (as up does) and prints the path of the file holding it
#           (run/hbase-cp/cp.txt), for Java tools run against the same jars (scripts/hbase-pe.sh).
#   prepare: resolves the classpath and builds the readiness probe, as up does, so that several
#           ups started at once after it (scripts/with-services.sh) find both ready.
#   replicate PRIMARY STANDBY: HBase's own replication from instance PRIMARY to STANDBY (both
#           up; either may be a cluster of scripts/hbase-cluster.sh): adds a serial peer on PRIMARY (idempotent; an existing peer is made serial) through
#           test/hbase/tools/Replication.java,
#           compiled against the same jars, then checks that a row written on PRIMARY reaches
#           STANDBY. Tables replicate when their column family has REPLICATION_SCOPE 1
#           (zenhbase.Options.Replicated); the standby must have the same tables.
# Env: HBASE_WAIT_SECS (default 180), HBASE_HEAP (default 768m), HBASE_STOP_SECS (default 10).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NAME="${2:-hbase}"
case "$NAME" in hbase*) ;; *) die "instance name must start with hbase: $NAME" ;; esac
DIR="$RUN_DIR/$NAME"
CPDIR="$RUN_DIR/hbase-cp" # the classpath is shared by every instance
if [ "$NAME" = hbase ]; then ENVVAR=SMARTFEED_HBASE_ZK; else ENVVAR="SMARTFEED_$(echo "$NAME" | tr 'a-z-' 'A-Z_')_ZK"; fi
PIDFILE="$DIR/hbase.pid"
ENVFILE="$DIR/env"
POM="$ROOT/test/hbase/pom.xml"
CONF_SRC="$ROOT/test/hbase/conf"
MAIN_CLASS=org.apache.hadoop.hbase.master.HMaster

ensure_tools() {
	local pkgs=()
	command -v java >/dev/null 2>&1 || pkgs+=(openjdk-17-jre-headless)
	command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
	[ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"
	local jv
	jv=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
	case "$jv" in
	1.*|[0-9].*|1[0-6].*) die "HBase 2.6 here needs JDK 17+, found java $jv" ;;
	esac
}

# classpath: resolve once per pom change; cp.txt is keyed by the pom's checksum.
classpath() {
	local sum cp="$CPDIR/cp.txt" stamp="$CPDIR/cp.sum"
	mkdir -p "$CPDIR"
	sum=$(sha256sum "$POM" | awk '{print $1}')
	if [ -s "$cp" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
		return 0
	fi
	log "resolving the HBase classpath with Maven (first run downloads ~150 MB into ~/.m2)"
	local t0=$SECONDS
	if ! mvn -B -q -f "$POM" \
		org.apache.maven.plugins:maven-dependency-plugin:3.6.1:build-classpath \
		-Dmdep.outputFile="$cp" -Dmdep.includeScope=runtime >"$CPDIR/mvn.log" 2>&1; then
		tail -30 "$CPDIR/mvn.log" >&2
		die "maven could not resolve test/hbase/pom.xml (log: run/hbase-cp/mvn.log)"
	fi
	echo "$sum" >"$stamp"
	log "classpath resolved in $((SECONDS - t0))s ($(tr ':' '\n' <"$cp" | wc -l) jars)"
}

waiter() { # builds the readiness probe once
	local bin="$CPDIR/hbasewait"
	if [ ! -x "$bin" ] || [ -n "$(find "$ROOT/internal/testenv/cmd/hbasewait" -newer "$bin" -name '*.go' 2>/dev/null)" ]; then
		(cd "$ROOT" && go build -o "$bin" ./internal/testenv/cmd/hbasewait) || die "cannot build hbasewait"
	fi
	echo "$bin"
}

running_port() {
	[ -f "$PIDFILE" ] && [ -f "$DIR/port" ] || return 1
	local pid
	pid=$(cat "$PIDFILE")
	pid_alive "$pid" && pid_cmd_matches "$pid" "$MAIN_CLASS" || return 1
	cat "$DIR/port"
}

up() {
	local port
	if port=$(running_port) && [ -s "$ENVFILE" ]; then
		log "already running, ZooKeeper on 127.0.0.1:$port"
		cat "$ENVFILE"
		return 0
	fi
	# A stale JVM of ours (pid file present, not answering) is stopped before the wipe.
	[ -f "$PIDFILE" ] && stop_pid "$PIDFILE" "$MAIN_CLASS" 30
	mkdir -p "$DIR"
	ensure_tools
	classpath
	rm -rf "$DIR/data" "$DIR/zk" "$DIR/tmp" "$DIR/logs" "$DIR/conf" "$ENVFILE" "$DIR/port"
	mkdir -p "$DIR/logs" "$DIR/conf" "$DIR/tmp"
	port=$(free_port)
	sed -e "s#@ROOT@#$DIR#g" -e "s#@ZKPORT@#$port#g" "$CONF_SRC/hbase-site.xml" >"$DIR/conf/hbase-site.xml"
	cp "$CONF_SRC/log4j2.properties" "$DIR/conf/"
	start_jvm "$port"
}

# restart starts the instance again on its port with its data, as after a crash (kill -9):
# HBase replays the write-ahead log of the region server that died.
restart() {
	local port
	if port=$(running_port) && [ -s "$ENVFILE" ]; then
		log "already running, ZooKeeper on 127.0.0.1:$port"
		cat "$ENVFILE"
		return 0
	fi
	[ -s "$DIR/port" ] && [ -f "$DIR/conf/hbase-site.xml" ] || die "$NAME has no data to restart with (scripts/hbase.sh up $NAME)"
	port=$(cat "$DIR/port")
	mv -f "$DIR/logs/hbase.out" "$DIR/logs/hbase.out.$(date +%s)" 2>/dev/null || true
	start_jvm "$port"
}

# start_jvm PORT starts HMaster (with its region server and ZooKeeper) on the prepared DIR and
# waits until it serves.
start_jvm() {
	local port="$1" pid bin
	bin=$(waiter)

	local jdk17_opts=(
		-XX:+IgnoreUnrecognizedVMOptions
		--add-opens java.base/java.lang=ALL-UNNAMED
		--add-opens java.base/java.lang.reflect=ALL-UNNAMED
		--add-opens java.base/java.nio=ALL-UNNAMED
		--add-opens java.base/java.nio.channels.spi=ALL-UNNAMED
		--add-opens java.base/java.util=ALL-UNNAMED
		--add-opens java.base/java.util.concurrent=ALL-UNNAMED
		--add-opens java.base/jdk.internal.ref=ALL-UNNAMED
		--add-opens java.base/jdk.internal.misc=ALL-UNNAMED
		--add-opens java.base/sun.nio.ch=ALL-UNNAMED
		--add-exports java.base/sun.nio.ch=ALL-UNNAMED
		--add-exports java.base/jdk.internal.misc=ALL-UNNAMED
		--add-exports java.security.jgss/sun.security.krb5=ALL-UNNAMED
		--add-exports java.base/sun.security.x509=ALL-UNNAMED
	)
	log "starting HBase $(grep -o '<hbase.version>[^<]*' "$POM" | cut -d'>' -f2) standalone, ZooKeeper on 127.0.0.1:$port (log: run/$NAME/logs/hbase.out)"
	local t0=$SECONDS
	# setsid: own process group, so a Ctrl-C in the caller's terminal does not hit the JVM.
	setsid java -Xms128m -Xmx"${HBASE_HEAP:-768m}" -XX:+UseG1GC -XX:ActiveProcessorCount=2 \
		-Djava.net.preferIPv4Stack=true "${jdk17_opts[@]}" \
		-Dhbase.log.dir="$DIR/logs" -Dhbase.log.file=hbase.log -Dhbase.home.dir="$DIR" \
		-Dhbase.id.str="smartfeed-$NAME" -Dproc_master \
		-Dlog4j2.configurationFile="file:$DIR/conf/log4j2.properties" \
		-Djava.util.logging.config.class=org.apache.hadoop.hbase.logging.JulToSlf4jInitializer \
		-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true \
		-cp "$DIR/conf:$(cat "$CPDIR/cp.txt")" \
		"$MAIN_CLASS" start </dev/null >"$DIR/logs/hbase.out" 2>&1 &
	pid=$!
	echo "$pid" >"$PIDFILE"
	echo "$port" >"$DIR/port"
	log "HMaster pid $pid; waiting for it to serve (up to ${HBASE_WAIT_SECS:-180}s)"
	if ! "$bin" -zk "127.0.0.1:$port" -timeout "${HBASE_WAIT_SECS:-180}s" -pid "$pid" >/dev/null; then
		log "HBase did not become ready; last log lines:"
		grep -E 'ERROR|FATAL|Exception' "$DIR/logs/hbase.out" | tail -20 >&2 || true
		tail -40 "$DIR/logs/hbase.out" >&2 || true
		stop_pid "$PIDFILE" "$MAIN_CLASS" 20 || true
		die "HBase start failed"
	fi
	echo "$ENVVAR=127.0.0.1:$port" >"$ENVFILE"
	log "up in $((SECONDS - t0))s (pid $pid)"
	cat "$ENVFILE"
}

down() {
	# The data is wiped on the next up, so a slow graceful shutdown buys nothing: 10 s, then KILL.
	stop_pid "$PIDFILE" "$MAIN_CLASS" "${HBASE_STOP_SECS:-10}"
	rm -f "$ENVFILE" "$DIR/port"
}

status() {
	local port
	if port=$(running_port) && [ -s "$ENVFILE" ]; then
		cat "$ENVFILE"
	else
		log "not running"
		return 1
	fi
}

# zk_of NAME prints the ZooKeeper address of a running instance, or of a cluster of
# scripts/hbase-cluster.sh (its ZooKeeper's port is in run/NAME/zk/port).
zk_of() {
	local f="$RUN_DIR/$1/port"
	[ -s "$f" ] || f="$RUN_DIR/$1/zk/port"
	[ -s "$f" ] || die "instance $1 is not up (scripts/hbase.sh up $1, or scripts/hbase-cluster.sh up $1)"
	echo "127.0.0.1:$(cat "$f")"
}

# tool runs test/hbase/tools/Replication.java (compiled once per change) with ARGS.
tool() {
	classpath
	hbase_java Replication 256m "$CPDIR/cp.txt" "$@"
}

replicate() {
	local primary="${1:-}" standby="${2:-}"
	[ -n "$primary" ] && [ -n "$standby" ] || die "usage: $0 replicate PRIMARY STANDBY"
	local pzk szk
	pzk=$(zk_of "$primary"); szk=$(zk_of "$standby")
	log "replication $primary ($pzk) -> $standby ($szk)"
	tool peer "$pzk" "$szk" 2>>"$CPDIR/replication.log" | sed 's/^/  /' >&2
	tool check "$pzk" "$szk" "${HBASE_REPL_CHECK_SECS:-60}" 2>>"$CPDIR/replication.log" | sed 's/^/  /' >&2 \
		|| die "replication $primary -> $standby does not carry rows (log: run/hbase-cp/replication.log)"
}

case "${1:-}" in
up) up ;;
restart) restart ;;
down) down ;;
status) status ;;
replicate) replicate "${2:-}" "${3:-}" ;;
classpath) ensure_tools; classpath; echo "$CPDIR/cp.txt" ;;
prepare) ensure_tools; classpath; waiter >/dev/null ;;
*) echo "usage: $0 up|restart|down|status [NAME] | replicate PRIMARY STANDBY | classpath | prepare" >&2; exit 2 ;;
esac
