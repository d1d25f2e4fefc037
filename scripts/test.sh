#!/usr/bin/env bash
# scripts/test.sh — what `make test` runs: every step, whatever the earlier ones did, then a
# summary listing each step as PASS, FAIL or SKIPPED (and why) and every failed test by name;
# exits 1 when a step failed. The steps:
#   1. go test -race ./...  (gotestsum; events in run/test.json), three test binaries at a time,
#      the slowest packages first
#   2. alone, without -race (ALONE; events in run/test-e2e.json): the e2e scenario on two
#      replicated HBases and a system on HBase fanning out over a bulk-loaded graph (the pinned
#      gohbase races on its own under -race), and the tests of how
#      GetFeed's latency rides out a hung primary store, which measure it
#   3. no Redis keys left by the tests: each test purges its namespace (testenv.RedisNamespace)
#   4. the user's Redis (run/redis) untouched by the run
#   5. the tests over 20 s, by name
#   6. make helm-lint
#   7. make test-hbase-cluster: a region server of a three-server HBase cluster killed under load,
#      then under GetFeed with a standby (its own cluster, run/hbase-cluster-test; 1.5–3 min;
#      skipped with SMARTFEED_NO_HBASE=1 or a TEST_PKGS other than ./...)
# Steps 1–3 run under scripts/with-services.sh with SMARTFEED_SERVICES=test: a Redis and two
# HBases of the run's own (run/redis-test, run/hbase-test, run/hbase-test-standby), wiped before
# and after, never the ones of `scripts/redis.sh up`, `make services-up` or `make demo`.
# Env: GO (default go), MAKE (default make), TEST_PKGS (the packages of step 1, default ./...);
# SMARTFEED_TEST_REDIS_ADDR etc. (with-services.sh).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
GO="${GO:-go}"
OUT="$RUN_DIR/test"
STATUS="$OUT/status" # one line per step that ran: NAME<TAB>PASS|FAIL|SKIPPED<TAB>seconds<TAB>note

# step NAME CMD...: runs CMD and records its status.
step() {
	local name="$1" t0 rc
	t0=$(date +%s)
	shift
	printf '\n== %s\n' "$name"
	"$@"
	rc=$?
	if [ "$rc" -eq 0 ]; then
		printf '%s\tPASS\t%s\t\n' "$name" $(($(date +%s) - t0)) >>"$STATUS"
	else
		printf '%s\tFAIL\t%s\texit status %s\n' "$name" $(($(date +%s) - t0)) "$rc" >>"$STATUS"
	fi
	return 0
}

has_status() { awk -F'\t' -v s="$1" '$1 == s { found = 1 } END { exit !found }' "$STATUS"; }

skip() { # skip NAME WHY
	printf '\n== %s: SKIPPED (%s)\n' "$1" "$2"
	printf '%s\tSKIPPED\t0\t%s\n' "$1" "$2" >>"$STATUS"
}

S_TOOLS="tools the tests run (promtool, built once into bin/tools/)"
S_UP="services up (scripts/with-services.sh)"
S_RACE="go test -race ${TEST_PKGS:-./...}"
S_E2E="e2e and hung-primary tests, alone, without -race"
S_KEYS="no Redis keys left by the tests"
S_USER="the user's run/redis untouched"
S_SLOW="tests over 20 s"
S_HELM="helm-lint"
S_CLUSTER="HBase cluster: a region server killed"

# leftover_keys: fails when the test Redis (SMARTFEED_REDIS_ADDR) holds keys without a TTL in
# any database, listing them. asynq's own server and worker heartbeats are not a test's.
leftover_keys() {
	local host="${SMARTFEED_REDIS_ADDR%:*}" port="${SMARTFEED_REDIS_ADDR##*:}" db n total=0 keys
	for db in $(redis-cli -h "$host" -p "$port" info keyspace | sed -n 's/^db\([0-9]*\):.*/\1/p'); do
		keys=$(redis-cli -h "$host" -p "$port" -n "$db" --scan |
			grep -v -e '^asynq:servers' -e '^asynq:workers' |
			while read -r k; do
				[ "$(redis-cli -h "$host" -p "$port" -n "$db" ttl "$k")" = -1 ] && echo "$k"
			done)
		n=$(printf '%s' "$keys" | grep -c . || true)
		total=$((total + n))
		if [ "$n" -gt 0 ]; then
			echo "db $db: $n keys left, the first 20:"
			printf '%s\n' "$keys" | sort | head -20 | sed 's/^/  /'
		fi
	done
	if [ -n "$(redis-cli -h "$host" -p "$port" smembers asynq:queues)" ]; then
		echo "asynq:queues still names: $(redis-cli -h "$host" -p "$port" smembers asynq:queues | sort | head -20 | tr '\n' ' ')"
		total=$((total + 1))
	fi
	[ "$total" -eq 0 ] || { echo "the tests left $total keys in the test Redis; each test should use testenv.RedisNamespace"; return 1; }
	echo "none"
}

# SLOW_FIRST: the packages whose tests take longest (cmd/smartfeed most of the step, then
# zen/zenhbase and zen), longest first. go test starts the packages in the
# order it is given them, -p at a time, so with these first the slots end together instead of
# one running zen/zenhbase alone at the end.
SLOW_FIRST="./cmd/smartfeed ./zen/zenhbase ./zen ./pinlater ./zen/zenmove ./graphsvc ./worker ./zen/zenpebble ./bench"

# ALONE: cmd/smartfeed's tests that step 2 runs with no other test binary beside it: the e2e
# scenario on replicated HBase, and the hung-primary tests, which count the calls that waited
# the primary's 1 s timeout: beside other test binaries under -race, on a 2-core machine, the
# standby's own reads can grow past the hedging cutoff, and the breaker then rightly blames the
# processor, not the primary (feedsvc/hedge, standbyWon). Step 1 skips them.
ALONE='^(TestEndToEndOnReplicatedHBase|TestBulkLoadedGraphFansOutOnHBase|TestHangingPrimaryFeed|TestHangOnsetConcurrentFeed)$'

# race_pkgs: the packages of step 1: TEST_PKGS when set to other than ./..., else every package
# with SLOW_FIRST first.
race_pkgs() {
	if [ "${TEST_PKGS:-./...}" != ./... ]; then
		echo "$TEST_PKGS"
		return
	fi
	local mod p
	mod=$("$GO" list -m)
	echo "$SLOW_FIRST"
	"$GO" list ./... | sed "s|^$mod|.|" | while read -r p; do
		case " $SLOW_FIRST " in *" $p "*) ;; *) echo "$p" ;; esac
	done
}

# race_tests: step 1, three test binaries at a time (TEST_P changes the 3): while tests wait on
# Redis, HBase and timers, a 2-core machine has processor time to spare for a third.
race_tests() {
	"$GO" tool gotestsum --format pkgname-and-test-fails --jsonfile "$RUN_DIR/test.json" -- \
		-race -count=1 -timeout 40m -p "${TEST_P:-3}" -skip "$ALONE" $(race_pkgs)
}

# inner: steps 1–3, run by scripts/with-services.sh with the test services up.
inner() {
	printf '%s\tPASS\t%s\t\n' "$S_UP" $(($(date +%s) - ${T_SERVICES:-$(date +%s)})) >>"$STATUS"
	step "$S_RACE" race_tests
	step "$S_E2E" "$GO" tool gotestsum --format pkgname-and-test-fails --jsonfile "$RUN_DIR/test-e2e.json" -- -count=1 -timeout 10m -run "$ALONE" ./cmd/smartfeed/
	if [ -z "${SMARTFEED_REDIS_ADDR:-}" ]; then
		skip "$S_KEYS" "no test Redis (SMARTFEED_NO_REDIS=1)"
	elif [ -n "${SMARTFEED_TEST_REDIS_ADDR:-}" ]; then
		skip "$S_KEYS" "SMARTFEED_TEST_REDIS_ADDR names a Redis others may write to"
	else
		step "$S_KEYS" leftover_keys
	fi
	return 0
}

if [ "${1:-}" = inner ]; then
	inner
	exit 0
fi

cd "$ROOT" || exit 2
mkdir -p "$OUT"
: >"$STATUS"
rm -f "$RUN_DIR/test.json" "$RUN_DIR/test-e2e.json"
t_start=$SECONDS
# The user's Redis: when it is not running, nothing may write its files during the run.
user_redis_up=0
"$ROOT/scripts/redis.sh" status >/dev/null 2>&1 && user_redis_up=1
touch "$OUT/started"

# Built before the tests, not inside one: the first build takes minutes of CPU that would
# otherwise compete with the parallel test packages and count against a test's timeout.
step "$S_TOOLS" env GO="$GO" "$ROOT/scripts/promtool.sh"
printf '== services: scripts/with-services.sh (SMARTFEED_SERVICES=test)\n'
T_SERVICES=$(date +%s) SMARTFEED_SERVICES=test SMARTFEED_WANT_CHROMIUM=1 "$ROOT/scripts/with-services.sh" "$ROOT/scripts/test.sh" inner
ws_rc=$?
case "$ws_rc" in 130 | 143) interrupted=$ws_rc ;; *) interrupted= ;; esac
if ! has_status "$S_UP"; then
	printf '%s\tFAIL\t0\tscripts/with-services.sh exited %s before running the tests\n' "$S_UP" "$ws_rc" >>"$STATUS"
elif [ "$ws_rc" -ne 0 ] && [ -z "$interrupted" ]; then
	printf 'services stopped\tFAIL\t0\tscripts/with-services.sh exited %s\n' "$ws_rc" >>"$STATUS"
fi
for s in "$S_RACE" "$S_E2E" "$S_KEYS"; do
	has_status "$s" || skip "$s" "not run: ${interrupted:+interrupted; }the services did not come up"
done

if [ -n "$interrupted" ]; then
	skip "$S_USER" interrupted
	skip "$S_SLOW" interrupted
	skip "$S_HELM" interrupted
	skip "$S_CLUSTER" interrupted
else
	if [ "$user_redis_up" = 1 ]; then
		skip "$S_USER" "the user's Redis is running, so its own clients may write to it"
	else
		step "$S_USER" sh -c 'changed=$(find "$1" -type f -newer "$2" 2>/dev/null); [ -z "$changed" ] && echo unchanged || { echo "written during the run:"; echo "$changed"; exit 1; }' \
			sh "$RUN_DIR/redis" "$OUT/started"
	fi
	if [ -s "$RUN_DIR/test.json" ]; then
		step "$S_SLOW" "$GO" tool gotestsum tool slowest --jsonfile "$RUN_DIR/test.json" --threshold 20s
	else
		skip "$S_SLOW" "no run/test.json: the tests did not run"
	fi
	step "$S_HELM" "${MAKE:-make}" --no-print-directory helm-lint
	if [ "${SMARTFEED_NO_HBASE:-}" = 1 ]; then
		skip "$S_CLUSTER" "SMARTFEED_NO_HBASE=1"
	elif [ "${TEST_PKGS:-./...}" != ./... ]; then
		skip "$S_CLUSTER" "TEST_PKGS=$TEST_PKGS"
	else
		# After the other services have stopped: its five JVMs then have the machine's memory.
		step "$S_CLUSTER" "${MAKE:-make}" --no-print-directory test-hbase-cluster
	fi
fi

printf '\n== make test summary (%s s)\n' $((SECONDS - t_start))
awk -F'\t' '{ note = ($4 == "") ? "" : "  (" $4 ")"; printf "  %-8s %-46s %5ss%s\n", $2, $1, $3, note }' "$STATUS"
fails=$("$GO" run ./internal/testenv/cmd/testfails "$RUN_DIR/test.json" "$RUN_DIR/test-e2e.json")
if [ -n "$fails" ]; then
	echo "== failed tests:"
	printf '%s\n' "$fails" | sed 's/^/  /'
fi
nfail=$(awk -F'\t' '$2 == "FAIL"' "$STATUS" | wc -l)
nskip=$(awk -F'\t' '$2 == "SKIPPED"' "$STATUS" | wc -l)
if [ -n "$interrupted" ]; then
	echo "make test: interrupted"
	exit "$interrupted"
fi
nall=$(wc -l <"$STATUS")
if [ "$nfail" -gt 0 ]; then
	echo "make test: FAILED: $nfail of $nall steps failed, $nskip skipped"
	exit 1
fi
echo "make test: passed: $((nall - nskip)) of $nall steps ran and passed, $nskip skipped"
