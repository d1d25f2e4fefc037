#!/usr/bin/env bash
# scripts/hbase-cluster.sh up|down|status|wipe|kill-rs N|start-rs N [NAME] — a distributed HBase
# 2.6 on loopback, from the same Maven jars as scripts/hbase.sh: a ZooKeeper, one HMaster and
# three HRegionServers, each a JVM of its own (hbase.cluster.distributed=true), sharing a local
# root dir (file://run/NAME/data) as they would share HDFS. NAME (default "hbase-cluster", must
# start with "hbase") names the cluster and its folder run/NAME, one subfolder per process
# (zk, master, rs1, rs2, rs3) holding its port, pid, config and logs.
#   up:       starts whatever is not running (ZooKeeper, then the master, then the region
#             servers), keeping the data and the ports of an earlier run; waits until tables can
#             be created and written and every region server has registered; prints the lines
#             that point smartfeed and the tests at it (also written to run/NAME/env):
#               SMARTFEED_HBASE_CLUSTER_ZK=127.0.0.1:<zk port>
#               SMARTFEED_HBASE_CLUSTER=<run/NAME>
#             Pass the first to smartfeed as its --hbase-*-zk flags; the fault test
#             (zen/zenhbase TestRegionServerKill) reads both.
#   down:     stops every process `up` started (region servers, master, ZooKeeper), data kept.
#   status:   prints each process's state and the env lines; exits 1 when something is down.
#   wipe:     down, then deletes the data (a fresh cluster on the next up).
#   kill-rs N: kill -9 region server N (1..3), as a machine failure: its ZooKeeper session
#             expires after HBASE_ZK_SESSION_MS, the master splits its write-ahead log and
#             reassigns its regions, which replay the log where they reopen.
#   start-rs N: starts region server N again on its port (the master takes it back; it carries
#             no regions until something moves some to it) and waits until it has registered.
# Env: HBASE_RS_HEAP (default 384m, each region server), HBASE_MASTER_HEAP (default 384m),
# HBASE_ZK_SESSION_MS (default 10000: how long a dead region server goes unnoticed),
# HBASE_WAIT_SECS (default 240), HBASE_STOP_SECS (default 10).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

NAME="${2:-hbase-cluster}"
case "$1" in kill-rs|start-rs) NAME="${3:-hbase-cluster}" ;; esac
case "$NAME" in hbase*) ;; *) die "cluster name must start with hbase: $NAME" ;; esac
case "$NAME" in */*|*..*) die "cluster name must be a plain folder name: $NAME" ;; esac
DIR="$RUN_DIR/$NAME"
REGIONSERVERS="rs1 rs2 rs3"
CPDIR="$RUN_DIR/hbase-cp"
POM="$ROOT/test/hbase/pom.xml"

# main_of NODE: the Java main class of a node.
main_of() {
	case "$1" in
	zk) echo org.apache.zookeeper.server.ZooKeeperServerMain ;;
	master) echo org.apache.hadoop.hbase.master.HMaster ;;
	rs*) echo org.apache.hadoop.hbase.regionserver.HRegionServer ;;
	esac
}

# marker NODE: a word on the node's java command line that names it, so a pid is signalled
# only while it still is that node's JVM.
marker() { echo "-Dsmartfeed.hbase.node=$NAME/$1"; }

# port_of NODE: the node's port, chosen the first time and kept across restarts.
port_of() {
	local f="$DIR/$1/port"
	if [ ! -s "$f" ]; then
		mkdir -p "$DIR/$1"
		free_port >"$f"
	fi
	cat "$f"
}

running() {
	local pidfile="$DIR/$1/pid" pid
	[ -s "$pidfile" ] || return 1
	pid=$(cat "$pidfile")
	pid_alive "$pid" && pid_cmd_matches "$pid" "$(marker "$1")"
}

zk_addr() { echo "127.0.0.1:$(port_of zk)"; }

# zk_cmd WORD: a ZooKeeper four-letter command, answered on stdout; a ZooKeeper that accepts the
# connection but does not answer within 10 s counts as not answering (callers poll again).
zk_cmd() {
	local out
	out=$(timeout 10 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf "%s" "$2" >&3 && cat <&3' zk_cmd "$(port_of zk)" "$1" 2>/dev/null) || return 1
	printf '%s\n' "$out"
}

# live_rs prints the region servers registered in ZooKeeper, one "localhost,port,startcode" a line.
live_rs() {
	zk_cmd dump | sed -n 's#^[[:space:]]*/hbase/rs/##p' | sort -u
}

site_xml() { # site_xml NODE: the node's hbase-site.xml
	local node="$1" rsport=0
	case "$node" in rs*) rsport=$(port_of "$node") ;; esac
	cat <<EOF
<?xml version="1.0"?>
<!-- Written by scripts/hbase-cluster.sh for $NAME/$node. -->
<configuration>
  <property><name>hbase.cluster.distributed</name><value>true</value></property>
  <property><name>hbase.rootdir</name><value>file://$DIR/data</value></property>
  <property><name>hbase.tmp.dir</name><value>$DIR/$node/tmp</value></property>
  <property><name>hbase.zookeeper.quorum</name><value>127.0.0.1</value></property>
  <property><name>hbase.zookeeper.property.clientPort</name><value>$(port_of zk)</value></property>
  <property><name>zookeeper.session.timeout</name><value>${HBASE_ZK_SESSION_MS:-10000}</value></property>
  <!-- LocalFileSystem cannot hflush/hsync; without this the master aborts on the WAL check. -->
  <property><name>hbase.unsafe.stream.capability.enforce</name><value>false</value></property>
  <property><name>hbase.wal.provider</name><value>filesystem</value></property>
  <property><name>hbase.master.info.port</name><value>-1</value></property>
  <property><name>hbase.regionserver.info.port</name><value>-1</value></property>
  <property><name>hbase.master.hostname</name><value>localhost</value></property>
  <property><name>hbase.unsafe.regionserver.hostname</name><value>localhost</value></property>
  <property><name>hbase.master.ipc.address</name><value>127.0.0.1</value></property>
  <property><name>hbase.regionserver.ipc.address</name><value>127.0.0.1</value></property>
  <property><name>hbase.master.port</name><value>$(port_of master)</value></property>
  <property><name>hbase.regionserver.port</name><value>$rsport</value></property>
  <!-- No balancer runs on its own: regions move when an operator or a test moves them. -->
  <property><name>hbase.balancer.period</name><value>2147483647</value></property>
  <property><name>hbase.client.scanner.timeout.period</name><value>5000</value></property>
  <!-- Replication to a standby (scripts/hbase.sh replicate NAME STANDBY): the WAL reader of a
       replication source sleeps this long when it finds nothing new; HBase's default (1 s) puts
       seconds of lag on a quiet cluster. -->
  <property><name>replication.source.sleepforretries</name><value>50</value></property>
  <property><name>replication.source.maxretriesmultiplier</name><value>10</value></property>
  <property><name>hbase.regionserver.handler.count</name><value>10</value></property>
  <property><name>hbase.master.handler.count</name><value>10</value></property>
</configuration>
EOF
}

zoo_cfg() {
	cat <<EOF
# Written by scripts/hbase-cluster.sh for $NAME/zk.
tickTime=1000
dataDir=$DIR/zk/data
clientPort=$(port_of zk)
clientPortAddress=127.0.0.1
maxClientCnxns=0
minSessionTimeout=2000
maxSessionTimeout=60000
4lw.commands.whitelist=*
admin.enableServer=false
EOF
}

start_node() {
	local node="$1" heap d="$DIR/$1"
	if running "$node"; then return 0; fi
	mkdir -p "$d/conf" "$d/logs" "$d/tmp"
	cp "$ROOT/test/hbase/conf/log4j2.properties" "$d/conf/"
	local args=() opts=(
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
	case "$node" in
	zk)
		heap=128m
		mkdir -p "$d/data"
		zoo_cfg >"$d/conf/zoo.cfg"
		args=("$d/conf/zoo.cfg")
		;;
	master)
		heap="${HBASE_MASTER_HEAP:-384m}"
		site_xml "$node" >"$d/conf/hbase-site.xml"
		args=(start)
		;;
	*)
		heap="${HBASE_RS_HEAP:-384m}"
		site_xml "$node" >"$d/conf/hbase-site.xml"
		args=(start)
		;;
	esac
	[ ! -f "$d/logs/out" ] || mv -f "$d/logs/out" "$d/logs/out.$(date +%s)"
	log "starting $node on 127.0.0.1:$(port_of "$node") (log: run/$NAME/$node/logs/out)"
	# setsid: own process group, so a Ctrl-C in the caller's terminal does not hit the JVM.
	setsid java "$(marker "$node")" -Xms64m -Xmx"$heap" -XX:+UseSerialGC -XX:ActiveProcessorCount=2 \
		-Djava.net.preferIPv4Stack=true "${opts[@]}" \
		-Dhbase.log.dir="$d/logs" -Dhbase.log.file=hbase.log -Dhbase.home.dir="$d" \
		-Dhbase.id.str="smartfeed-$NAME-$node" -Dzookeeper.4lw.commands.whitelist='*' \
		-Dlog4j2.configurationFile="file:$d/conf/log4j2.properties" \
		-Djava.util.logging.config.class=org.apache.hadoop.hbase.logging.JulToSlf4jInitializer \
		-Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true \
		-cp "$d/conf:$(cat "$CPDIR/cp.txt")" \
		"$(main_of "$node")" "${args[@]}" </dev/null >"$d/logs/out" 2>&1 &
	echo $! >"$d/pid"
}

# wait_for WHAT SECS CMD...: runs CMD every 0.2 s until it succeeds; dies after SECS.
wait_for() {
	local what="$1" secs="$2" i
	shift 2
	for i in $(seq 1 $((secs * 5))); do
		"$@" && return 0
		sleep 0.2
	done
	die "$what: not after ${secs}s"
}

zk_ok() { zk_cmd ruok | grep -q imok; }

# rs_registered NODE [NOT]: region server NODE has registered in ZooKeeper (under a name other
# than NOT: a restarted server registers with a new start code while its dead predecessor's name
# may linger until its session expires).
rs_registered() { live_rs | grep "^localhost,$(port_of "$1")," | grep -qvxF "${2:-none}"; }

all_rs_registered() {
	local n
	for n in $REGIONSERVERS; do rs_registered "$n" || return 1; done
}

waiter() { # builds the readiness probe once (as scripts/hbase.sh does)
	local bin="$CPDIR/hbasewait"
	if [ ! -x "$bin" ] || [ -n "$(find "$ROOT/internal/testenv/cmd/hbasewait" -newer "$bin" -name '*.go' 2>/dev/null)" ]; then
		(cd "$ROOT" && go build -o "$bin" ./internal/testenv/cmd/hbasewait) || die "cannot build hbasewait"
	fi
	echo "$bin"
}

write_env() {
	{
		echo "SMARTFEED_HBASE_CLUSTER_ZK=$(zk_addr)"
		echo "SMARTFEED_HBASE_CLUSTER=$DIR"
	} >"$DIR/env"
}

all_running() {
	local n
	for n in zk master $REGIONSERVERS; do running "$n" || return 1; done
}

up() {
	local n t0=$SECONDS cp
	if all_running && [ -s "$DIR/env" ] && all_rs_registered; then
		log "already running, ZooKeeper on $(zk_addr)"
		cat "$DIR/env"
		return 0
	fi
	cp=$("$ROOT/scripts/hbase.sh" classpath) || die "cannot resolve the HBase classpath"
	[ "$cp" = "$CPDIR/cp.txt" ] || die "unexpected classpath file $cp"
	mkdir -p "$DIR/data"
	# ZooKeeper first (its port must answer before HBase's processes start), then the master,
	# then the region servers.
	start_node zk
	wait_for "ZooKeeper on $(zk_addr)" 60 zk_ok
	start_node master
	for n in $REGIONSERVERS; do start_node "$n"; done
	log "waiting until HBase serves at $(zk_addr) (up to ${HBASE_WAIT_SECS:-240}s)"
	if ! "$(waiter)" -zk "$(zk_addr)" -timeout "${HBASE_WAIT_SECS:-240}s" -pid "$(cat "$DIR/master/pid")" >/dev/null; then
		grep -hE 'ERROR|FATAL' "$DIR"/*/logs/out | tail -20 >&2 || true
		die "HBase at $(zk_addr) did not become ready (logs: run/$NAME/*/logs/out)"
	fi
	wait_for "three region servers registered in ZooKeeper" "${HBASE_WAIT_SECS:-240}" all_rs_registered
	write_env
	log "up in $((SECONDS - t0))s: ZooKeeper, master and region servers $(for n in $REGIONSERVERS; do printf '%s:%s ' "$n" "$(port_of "$n")"; done)"
	cat "$DIR/env"
}

down() {
	local n
	for n in $REGIONSERVERS master zk; do
		[ -f "$DIR/$n/pid" ] || continue
		stop_pid "$DIR/$n/pid" "$(marker "$n")" "${HBASE_STOP_SECS:-10}"
	done
	rm -f "$DIR/env"
}

status() {
	local n bad=0
	for n in zk master $REGIONSERVERS; do
		if running "$n"; then log "$n up (pid $(cat "$DIR/$n/pid"), port $(port_of "$n"))"; else log "$n down"; bad=1; fi
	done
	if running zk; then log "region servers in ZooKeeper: $(live_rs | tr '\n' ' ')"; fi
	[ "$bad" -eq 0 ] && [ -s "$DIR/env" ] || return 1
	cat "$DIR/env"
}

wipe() {
	down
	rm -rf "${DIR:?}"
	log "data wiped"
}

rs_node() { # rs_node N: the region server node name of N, checked
	case "$1" in 1|2|3) echo "rs$1" ;; *) die "region server number 1..3, got ${1:-nothing}" ;; esac
}

kill_rs() {
	local node pid
	node=$(rs_node "${1:-}")
	running "$node" || die "$node is not running"
	pid=$(cat "$DIR/$node/pid")
	log "kill -9 $node (pid $pid, port $(port_of "$node"))"
	kill -KILL "$pid"
	wait_for "$node (pid $pid) to exit" 30 eval '! pid_alive '"$pid"
	rm -f "$DIR/$node/pid"
}

start_rs() {
	local node
	node=$(rs_node "${1:-}")
	running zk && running master || die "the cluster is not up (scripts/hbase-cluster.sh up $NAME)"
	[ -s "$CPDIR/cp.txt" ] || "$ROOT/scripts/hbase.sh" classpath >/dev/null
	if running "$node"; then
		log "$node is already running on port $(port_of "$node")"
		return 0
	fi
	local before
	before=$(live_rs | grep "^localhost,$(port_of "$node")," || true)
	start_node "$node"
	wait_for "$node registered in ZooKeeper" "${HBASE_WAIT_SECS:-240}" rs_registered "$node" "${before:-none}"
	log "$node is back on port $(port_of "$node")"
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
wipe) wipe ;;
kill-rs) kill_rs "${2:-}" ;;
start-rs) start_rs "${2:-}" ;;
*) echo "usage: $0 up|down|status|wipe [NAME] | kill-rs N [NAME] | start-rs N [NAME]" >&2; exit 2 ;;
esac
