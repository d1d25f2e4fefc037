#!/usr/bin/env bash
# scripts/hbase-pe.sh [--zk HOST:PORT] [--rows N] [--warmup W] [--value-size BYTES] [--table NAME]
# HBase's own Java client on a running HBase: org.apache.hadoop.hbase.PerformanceEvaluation
# (PE), from the jars of test/hbase/pe/pom.xml on top of the standalone server's classpath
# (scripts/hbase.sh classpath). Loads the table with `sequentialWrite 1` (N rows of BYTES,
# --presplit 1: an existing table of that name is dropped first), then times `randomRead 1`:
# N Gets of random rows, one thread, one after the other, each timed by PE after the first W
# (PE's --measureAfter: the JVM compiles the client's hot paths during those).
# Prints one JSON line on stdout with PE's read latencies in microseconds:
#   {"command":"randomRead","clients":1,"rows":N,...,"n":..,"mean_us":..,"p50_us":..,"p99_us":..,...}
# PE's own output goes to run/hbase-pe/{write,read}.log. Everything else goes to stderr.
#   --zk          ZooKeeper of the HBase (default $SMARTFEED_HBASE_ZK, else run/hbase/env)
#   --rows        rows written and Gets made (default 10000)
#   --warmup      Gets made before PE starts timing (default 0)
#   --value-size  bytes per value (default 100: about one zen object)
#   --table       table name (default smartfeed_pe)
#   --znode       HBase's znode (default /hbase)
# The jars are resolved once with Maven (a few MB into ~/.m2), cached by the pom's checksum.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ZK="${SMARTFEED_HBASE_ZK:-}"
ROWS=10000
WARMUP=0
VALUE_SIZE=100
TABLE=smartfeed_pe
ZNODE=/hbase
while [ $# -gt 0 ]; do
	case "$1" in
	--zk) ZK="$2"; shift 2 ;;
	--rows) ROWS="$2"; shift 2 ;;
	--warmup) WARMUP="$2"; shift 2 ;;
	--value-size) VALUE_SIZE="$2"; shift 2 ;;
	--table) TABLE="$2"; shift 2 ;;
	--znode) ZNODE="$2"; shift 2 ;;
	-h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (--help)" ;;
	esac
done
ZK=$(hbase_zk "$ZK")
case "$ROWS$WARMUP$VALUE_SIZE" in *[!0-9]*) die "--rows, --warmup and --value-size take numbers" ;; esac

POM="$ROOT/test/hbase/pe/pom.xml"
CPDIR="$RUN_DIR/hbase-cp"
OUT="$RUN_DIR/hbase-pe"
mkdir -p "$CPDIR" "$OUT"

# pe_classpath: the extra jars, resolved once per pom change (keyed by its checksum).
pe_classpath() {
	local sum cp="$CPDIR/pe-cp.txt" stamp="$CPDIR/pe-cp.sum"
	sum=$(sha256sum "$POM" | awk '{print $1}')
	if [ -s "$cp" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
		return 0
	fi
	log "resolving PerformanceEvaluation's jars with Maven (test/hbase/pe/pom.xml)"
	if ! mvn -B -q -f "$POM" \
		org.apache.maven.plugins:maven-dependency-plugin:3.6.1:build-classpath \
		-Dmdep.outputFile="$cp" -Dmdep.includeScope=runtime >"$CPDIR/pe-mvn.log" 2>&1; then
		tail -30 "$CPDIR/pe-mvn.log" >&2
		die "maven could not resolve test/hbase/pe/pom.xml (log: run/hbase-cp/pe-mvn.log)"
	fi
	echo "$sum" >"$stamp"
}

base_cp=$("$ROOT/scripts/hbase.sh" classpath)
pe_classpath
# The server's 2.6.2 jars first: PE's jars add classes, they replace none.
CP="$(cat "$base_cp"):$(cat "$CPDIR/pe-cp.txt")"

pe() {
	java -Xmx512m -XX:ActiveProcessorCount=2 \
		--add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.nio=ALL-UNNAMED \
		--add-opens java.base/sun.nio.ch=ALL-UNNAMED -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true \
		-Dlog4j2.configurationFile="file:$ROOT/test/hbase/conf/log4j2.properties" -Dhbase.log.dir="$OUT" \
		-cp "$CP" org.apache.hadoop.hbase.PerformanceEvaluation \
		-Dhbase.zookeeper.quorum="${ZK%:*}" -Dhbase.zookeeper.property.clientPort="${ZK##*:}" \
		-Dzookeeper.znode.parent="$ZNODE" "$@"
}

log "PE sequentialWrite: $ROWS rows of $VALUE_SIZE bytes into $TABLE on $ZK"
t0=$SECONDS
pe --nomapred --rows="$ROWS" --valueSize="$VALUE_SIZE" --presplit=1 --table="$TABLE" sequentialWrite 1 \
	>"$OUT/write.log" 2>&1 || { tail -20 "$OUT/write.log" >&2; die "PE sequentialWrite failed (log: run/hbase-pe/write.log)"; }
log "PE randomRead: $ROWS Gets, 1 client, the first $WARMUP not timed ($((SECONDS - t0)) s for the load)"
pe --nomapred --rows="$ROWS" --measureAfter="$WARMUP" --table="$TABLE" randomRead 1 \
	>"$OUT/read.log" 2>&1 || { tail -20 "$OUT/read.log" >&2; die "PE randomRead failed (log: run/hbase-pe/read.log)"; }

# PE prints, per client thread:
#   ... RandomReadTest ... Latency (us) : mean=422.33, min=88.00, max=46315.00, stdDev=1304.98, 50th=162.00, 75th=270.00, 95th=1600.00, 99th=4863.00, 99.9th=18935.00, 99.99th=..., 99.999th=...
#   ... Num measures (latency) : 9999
#   ... [ Avg TPS/QPS]	2321	 row per second
line=$(grep -m1 'Latency (us) :' "$OUT/read.log") || die "no 'Latency (us)' line in run/hbase-pe/read.log"
field() { # field NAME: the number after "NAME=" in PE's latency line
	local v
	v=$(printf '%s\n' "$line" | grep -o "[ :,]$1=[0-9.]*" | head -1 | cut -d= -f2)
	[ -n "$v" ] || die "no $1= in PE's latency line: $line"
	echo "$v"
}
n=$(grep -m1 'Num measures (latency) :' "$OUT/read.log" | sed 's/.*: *//')
qps=$(grep -m1 'Avg TPS/QPS' "$OUT/read.log" | awk -F'\t' '{print $2}')
pe_version=$(grep -o '<hbase.pe.version>[^<]*' "$POM" | cut -d'>' -f2)
server_version=$(grep -o '<hbase.version>[^<]*' "$ROOT/test/hbase/pom.xml" | cut -d'>' -f2)
printf '{"tool":"org.apache.hadoop.hbase.PerformanceEvaluation","pe_version":"%s","client_version":"%s","command":"randomRead","clients":1,"rows":%s,"warmup":%s,"value_size":%s,"table":"%s","n":%s,"mean_us":%s,"min_us":%s,"p50_us":%s,"p95_us":%s,"p99_us":%s,"p999_us":%s,"max_us":%s,"ops_per_sec":%s}\n' \
	"$pe_version" "$server_version" "$ROWS" "$WARMUP" "$VALUE_SIZE" "$TABLE" "${n:-0}" "$(field mean)" "$(field min)" "$(field 50th)" \
	"$(field 95th)" "$(field 99th)" "$(field 99.9th)" "$(field max)" "${qps:-0}"
log "PE randomRead: p50 $(field 50th) µs, p99 $(field 99th) µs over ${n:-?} Gets ($((SECONDS - t0)) s in all)"
