#!/usr/bin/env bash
# scripts/hbase-scan.sh --table NAME --ranges FILE [--zk HOST:PORT] [--family F] [--limit N]
#                       [--rate R] [--threads T] [--warmup W] [--znode Z]
# HBase's own Java client making a GetFeed's reads of the materialized feed: one Scan of a row
# range per line of FILE (start and stop row in hex), up to --limit rows, at --rate a second
# with at most --threads in flight, each timed from its start, after --warmup reads not timed
# (test/hbase/tools/FeedScan.java, compiled once per change against the classpath that runs
# HBase: scripts/hbase.sh classpath). The bench writes FILE from its serving phase's readers.
# Prints one JSON line on stdout, latencies in microseconds, with the fields of
# scripts/hbase-pe.sh's line:
#   {"tool":"FeedScan","command":"feedScan","n":..,"mean_us":..,"p50_us":..,"p99_us":..,...}
# Everything else goes to stderr.
#   --zk       ZooKeeper of the HBase (default $SMARTFEED_HBASE_ZK, else run/hbase/env)
#   --table    the HBase table (a zen store's "feed" table, with its prefix)
#   --ranges   the reads, one "START STOP" in hex a line
#   --family   column family (default f, zenhbase's)
#   --limit    rows a Scan asks for (default 58: a 50-item page and its 8 spare rows)
#   --rate     reads offered a second (default 200; 0: one after the other)
#   --threads  reads in flight at most (default 32)
#   --warmup   reads made first and not timed (default 500)
#   --znode    HBase's znode (default /hbase)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ZK="${SMARTFEED_HBASE_ZK:-}"
TABLE=""
RANGES=""
FAMILY=f
LIMIT=58
RATE=200
THREADS=32
WARMUP=500
ZNODE=/hbase
while [ $# -gt 0 ]; do
	case "$1" in
	--zk) ZK="$2"; shift 2 ;;
	--table) TABLE="$2"; shift 2 ;;
	--ranges) RANGES="$2"; shift 2 ;;
	--family) FAMILY="$2"; shift 2 ;;
	--limit) LIMIT="$2"; shift 2 ;;
	--rate) RATE="$2"; shift 2 ;;
	--threads) THREADS="$2"; shift 2 ;;
	--warmup) WARMUP="$2"; shift 2 ;;
	--znode) ZNODE="$2"; shift 2 ;;
	-h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (--help)" ;;
	esac
done
ZK=$(hbase_zk "$ZK")
[ -n "$TABLE" ] || die "--table is required"
[ -s "$RANGES" ] || die "--ranges: no file $RANGES, or it is empty"
case "$LIMIT$THREADS$WARMUP" in *[!0-9]*) die "--limit, --threads and --warmup take whole numbers" ;; esac
case "$RATE" in *[!0-9.]*|'') die "--rate takes a number" ;; esac

cp_file=$("$ROOT/scripts/hbase.sh" classpath)
log "FeedScan: $(wc -l <"$RANGES") scans of $TABLE on $ZK, limit $LIMIT, $RATE/s, $THREADS in flight, $WARMUP not timed first"
hbase_java FeedScan 512m "$cp_file" "$ZK" "$ZNODE" "$TABLE" "$FAMILY" "$RANGES" "$LIMIT" "$RATE" "$THREADS" "$WARMUP"
