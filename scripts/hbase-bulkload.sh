#!/usr/bin/env bash
# scripts/hbase-bulkload.sh --dir DIR [--zk HOST:PORT] [--family F] [--qualifier Q] [--znode Z]
# HBase's own bulk load of the rows zenhbase's bulk staging wrote under DIR (TABLE.NNNNNN.rows
# files, sorted; each removed once read): test/hbase/tools/BulkLoad.java, compiled once per
# change against the classpath that runs HBase (scripts/hbase.sh classpath), writes them as
# HFiles split at the tables' region boundaries and moves them into the tables (BulkLoadHFiles). `smartfeed load
# --storage hbase` and `smartfeed bench --storage hbase` run it (--hbase-bulk-load).
# Prints one JSON line on stdout:
#   {"tables":..,"rows":..,"hfiles":..,"bytes":..,"write_s":..,"load_s":..}
# Everything else goes to stderr.
#   --zk         ZooKeeper of the HBase (default $SMARTFEED_HBASE_ZK, else run/hbase/env)
#   --dir        the staged rows
#   --family     column family (default f, zenhbase's)
#   --qualifier  qualifier (default v, zenhbase's)
#   --znode      HBase's znode (default /hbase)
# Env: BULKLOAD_HEAP (default 1g).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ZK="${SMARTFEED_HBASE_ZK:-}"
DIR=""
FAMILY=f
QUALIFIER=v
ZNODE=/hbase
while [ $# -gt 0 ]; do
	case "$1" in
	--zk) ZK="$2"; shift 2 ;;
	--dir) DIR="$2"; shift 2 ;;
	--family) FAMILY="$2"; shift 2 ;;
	--qualifier) QUALIFIER="$2"; shift 2 ;;
	--znode) ZNODE="$2"; shift 2 ;;
	-h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (--help)" ;;
	esac
done
ZK=$(hbase_zk "$ZK")
[ -d "$DIR" ] || die "--dir: no directory $DIR"

cp_file=$("$ROOT/scripts/hbase.sh" classpath)
log "BulkLoad: $(ls "$DIR" | grep '\.rows$' | sed 's/\.[0-9]*\.rows$//' | sort -u | wc -l) tables from $DIR into the HBase on $ZK"
hbase_java BulkLoad "${BULKLOAD_HEAP:-1g}" "$cp_file" "$ZK" "$ZNODE" "$FAMILY" "$QUALIFIER" "$DIR"
