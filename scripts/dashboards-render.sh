#!/usr/bin/env bash
# scripts/dashboards-render.sh [OUT] — draws the chart's Grafana dashboards from a real run, for
# docs/operations.md (OUT defaults to docs/dashboards). No Grafana is needed: a Prometheus on
# loopback (Debian's, installed if missing) scrapes a `smartfeed demo` for DURATION (default 5m)
# with the chart's rules file loaded (the SLO panels read its recorded series), then
# internal/observability/cmd/dashrender evaluates every panel's queries over the run with
# query_range and draws one PNG per dashboard. The PNGs show the panels' data, not Grafana's
# styling. The target carries namespace="demo" and pod="smartfeed-demo" labels, as the chart's
# ServiceMonitor would give it, so the namespace-filtered and per-pod panels have their series.
#
# Everything runs under run/dashboards-render (wiped at the start) on free ports with a Redis of
# its own (scripts/redis.sh ... redis-dashboards, wiped after); every process it starts is
# stopped on exit. Running it again draws the pictures again from a new run.
# Env: DURATION (the demo's --duration), SCRAPE (scrape interval, default 5s), GO (default go).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
GO="${GO:-go}"
OUT="${1:-docs/dashboards}"
DURATION="${DURATION:-5m}"
SCRAPE="${SCRAPE:-5s}"
DIR="$RUN_DIR/dashboards-render"
REDIS_NAME=redis-dashboards

if ! command -v prometheus >/dev/null 2>&1; then
	apt_install prometheus
fi

prom_pid=""
demo_pid=""
cleanup() {
	if [ -n "$demo_pid" ] && pid_alive "$demo_pid"; then
		log "stopping the demo (pid $demo_pid)"
		kill -INT "$demo_pid" 2>/dev/null || true
		wait "$demo_pid" 2>/dev/null || true
	fi
	if [ -n "$prom_pid" ] && pid_alive "$prom_pid"; then
		log "stopping prometheus (pid $prom_pid)"
		kill -TERM "$prom_pid" 2>/dev/null || true
		wait "$prom_pid" 2>/dev/null || true
	fi
	scripts/redis.sh wipe "$REDIS_NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT

rm -rf "$DIR"
mkdir -p "$DIR/prometheus"
log "building bin/smartfeed"
"$GO" build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed

redis_env=$(scripts/redis.sh up "$REDIS_NAME" | tail -1)
export "${redis_env?}"

grpc_port=$(free_port)
admin_port=$(free_port)
admin_grpc_port=$(free_port)
prom_port=$(free_port)

cat >"$DIR/prometheus.yml" <<YAML
global:
  scrape_interval: $SCRAPE
  evaluation_interval: $SCRAPE
rule_files:
  - $ROOT/charts/smartfeed/files/prometheus/rules.yaml
scrape_configs:
  - job_name: smartfeed
    static_configs:
      - targets: ["127.0.0.1:$admin_port"]
        labels: {namespace: demo, pod: smartfeed-demo}
YAML
log "prometheus $(prometheus --version 2>&1 | awk 'NR==1{print $3}') on 127.0.0.1:$prom_port (data in ${DIR#"$ROOT"/}/prometheus)"
prometheus --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/prometheus/data" \
	--web.listen-address="127.0.0.1:$prom_port" >"$DIR/prometheus/prometheus.log" 2>&1 &
prom_pid=$!
prom="http://127.0.0.1:$prom_port"
for _ in $(seq 1 300); do
	curl -fsS "$prom/-/ready" >/dev/null 2>&1 && break
	pid_alive "$prom_pid" || { tail -20 "$DIR/prometheus/prometheus.log" >&2; die "prometheus exited"; }
	sleep 0.1
done
curl -fsS "$prom/-/ready" >/dev/null || die "prometheus is not ready (${DIR#"$ROOT"/}/prometheus/prometheus.log)"

log "smartfeed demo for $DURATION (metrics on http://127.0.0.1:$admin_port/metrics; output in ${DIR#"$ROOT"/}/demo.out)"
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
bin/smartfeed demo --duration "$DURATION" --data-dir "$DIR/demo" \
	--grpc-addr "127.0.0.1:$grpc_port" --admin-addr "127.0.0.1:$admin_port" \
	--admin-grpc-addr "127.0.0.1:$admin_grpc_port" >"$DIR/demo.out" 2>&1 &
demo_pid=$!
if ! wait "$demo_pid"; then
	demo_pid=""
	tail -20 "$DIR/demo.out" >&2
	die "the demo failed"
fi
demo_pid=""
end=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "demo done; drawing the dashboards over $start – $end into $OUT"
"$GO" run ./internal/observability/cmd/dashrender -prometheus "$prom" -start "$start" -end "$end" \
	-scrape-interval "$SCRAPE" -namespace demo -out "$OUT" \
	-what "a $DURATION smartfeed demo (scripts/dashboards-render.sh)"
