# SmartFeed: the single entry point. `make help` lists the targets.
.DEFAULT_GOAL := help
GO ?= go
FUZZTIME ?= 10s
K8S_VERSION ?= 1.33.0
TEST_PKGS ?= ./...
SERVICES := scripts/with-services.sh
# The test targets run on services of their own (run/redis-test, run/hbase-test...), wiped
# before and after, never on the user's (scripts/with-services.sh, SMARTFEED_SERVICES=test).
TEST_SERVICES := SMARTFEED_SERVICES=test scripts/with-services.sh

.PHONY: help build test test-long test-memory test-failover test-hbase-cluster test-short lint proto check-generated bench bench-full bench-hbase bench-docs bench-micro fuzz demo dashboards-render helm-lint kubeconform image rules services-up services-down
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build the smartfeed binary into bin/
	$(GO) build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed

test: ## all tests, -race, on a Redis and two HBases of the run's own (run/*-test, wiped before and after) and Chromium (installed if missing), then the chart's; every step runs, then a summary (scripts/test.sh)
	@GO="$(GO)" MAKE="$(MAKE)" TEST_PKGS="$(TEST_PKGS)" scripts/test.sh

test-long: ## soak runs CI does not do: 50 random seeds per model comparison, the 1M-follower fanout, Redis lost mid 100k-follower fanout, a 20 s Redis outage, 30 minutes of load with memory sampled, HBase region servers killed (the one holding hbase:meta too) with longer load (SMARTFEED_LONG=1)
	SMARTFEED_LONG=1 SMARTFEED_FANOUT_1M=1 $(TEST_SERVICES) $(GO) test -count=1 -timeout 90m ./zen/... ./worker/
	SMARTFEED_LONG=1 $(TEST_SERVICES) $(GO) test -count=1 -timeout 10m -run TestRedisOutageLosesNothing -v ./cmd/smartfeed/
	SMARTFEED_LONG=1 SMARTFEED_NO_HBASE=1 $(TEST_SERVICES) $(GO) test -count=1 -timeout 45m -run TestMemoryPlateau -v ./cmd/smartfeed/
	SMARTFEED_LONG=1 $(MAKE) --no-print-directory test-hbase-cluster CLUSTER_TESTS='TestClusterRegionsBalanced|TestRegionServerKill|TestMetaRegionServerKill'

test-memory: ## the memory run shortened to 3 minutes (CreatePin 10/s x 50 followers, GetFeed 100/s; samples in run/memory-plateau/)
	SMARTFEED_MEMORY_RUN=3m SMARTFEED_NO_HBASE=1 $(TEST_SERVICES) $(GO) test -count=1 -timeout 15m -run TestMemoryPlateau -v ./cmd/smartfeed/

test-failover: ## kill -9 the primary feed HBase under read and write load, restart it, compare with the standby (starts two HBases of its own)
	SMARTFEED_HBASE_FAILOVER=1 SMARTFEED_NO_HBASE_STANDBY=1 $(TEST_SERVICES) $(GO) test -count=1 -timeout 20m -run TestHBasePrimaryKill -v ./cmd/smartfeed/

CLUSTER_TESTS ?= TestClusterRegionsBalanced|TestRegionServerKill
test-hbase-cluster: ## kill -9 one of three HBase region servers under a fanout and a read load: nothing acknowledged lost or duplicated, recovery time logged; then under GetFeed: every page answered, by the standby while the regions move (starts a cluster of its own, run/hbase-cluster-test, wiped after)
	@scripts/hbase-cluster.sh wipe hbase-cluster-test >/dev/null 2>&1; \
	trap 'scripts/hbase-cluster.sh wipe hbase-cluster-test >/dev/null 2>&1' EXIT; \
	scripts/hbase-cluster.sh up hbase-cluster-test >/dev/null || exit 1; \
	set -a && . run/hbase-cluster-test/env && set +a; \
	rc=0; $(GO) test -count=1 -timeout 20m -run '$(CLUSTER_TESTS)' -v ./zen/zenhbase/ || rc=1; \
	$(GO) test -count=1 -timeout 10m -run 'TestGetFeedDuringRegionTransit' -v ./cmd/smartfeed/ || rc=1; \
	exit $$rc

test-short: ## fast loop: unit tests only, no Redis or HBase
	$(GO) test -short ./...

lint: ## gofmt check, go vet, staticcheck, and the import rules (internal/lint)
	@out=$$(git ls-files --cached --others --exclude-standard '*.go' | xargs -r gofmt -l); if [ -n "$$out" ]; then echo "gofmt: these files need gofmt -w:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) test -count=1 ./internal/lint

proto: ## regenerate the Go code of proto/**/*.proto (plugins from go.mod tools, Debian protoc)
	scripts/proto.sh

check-generated: proto ## fail when the committed generated code under proto/ is stale
	@out=$$(git status --porcelain proto); if [ -n "$$out" ]; then echo "generated code under proto/ is stale; run make proto and commit:"; echo "$$out"; exit 1; fi
	@echo "proto/: generated code is up to date"

BENCH_OUT ?= bench/out
bench: ## the end-to-end benchmark, quick profile (about 15 min here, 100,000 users loaded): results.json, report.md, plots in BENCH_OUT (default bench/out)
	$(GO) build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed
	SMARTFEED_NO_HBASE=1 $(SERVICES) bin/smartfeed bench --profile quick --out $(BENCH_OUT)

bench-full: ## the end-to-end benchmark, full profile (1,000,000 users, the scale curve at 10,000 and 100,000; about 40 min here)
	$(GO) build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed
	SMARTFEED_NO_HBASE=1 $(SERVICES) bin/smartfeed bench --profile full --out $(BENCH_OUT)

BENCH_HBASE_OUT ?= bench/out/hbase
bench-hbase: ## the quick profile on one standalone HBase (app replication, 6 GB heap: HBASE_HEAP), with HBase's own Java client (PerformanceEvaluation) on it; out in BENCH_HBASE_OUT
	$(GO) build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed
	HBASE_HEAP=$${HBASE_HEAP:-6g} SMARTFEED_NO_HBASE_STANDBY=1 $(SERVICES) sh -c 'bin/smartfeed bench --profile quick --storage hbase --hbase-pools-zk "$$SMARTFEED_HBASE_ZK" \
		--hbase-primary-zk "$$SMARTFEED_HBASE_ZK" --hbase-standby-zk "$$SMARTFEED_HBASE_ZK" --hbase-replication app --out $(BENCH_HBASE_OUT)'

bench-docs: ## run the quick profile and regenerate docs/benchmarks.md and docs/bench/*.png from it
	$(GO) build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed
	SMARTFEED_NO_HBASE=1 $(SERVICES) bin/smartfeed bench --profile quick --out $(BENCH_OUT) --docs docs

bench-micro: ## the Go microbenchmarks (-benchtime 1x each), with Redis and HBase up
	@pkgs=$$(scripts/bench-pkgs.sh); if [ -z "$$pkgs" ]; then echo "no benchmarks yet"; exit 0; fi; \
	$(SERVICES) $(GO) test -run '^$$' -bench . -benchtime 1x $$pkgs

fuzz: ## run each Fuzz target for FUZZTIME (default 10s)
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

demo: ## start Redis and run the smartfeed demo (Pebble under run/demo; DEMO_ARGS="--duration 1m" to bound it; REDIS=sentinel or REDIS=cluster for Redis with failover; HBASE=cluster for the stores on three HBase region servers, KILL_RS=2@30 to kill one 30 s in)
	$(GO) build -buildvcs=auto -o bin/smartfeed ./cmd/smartfeed
	REDIS="$(REDIS)" HBASE="$(HBASE)" KILL_RS="$(KILL_RS)" scripts/demo.sh $(DEMO_ARGS)

rules: ## promtool check rules and test rules on the chart's Prometheus rules (promtool built into bin/tools/ the first time, scripts/promtool.sh)
	scripts/promtool.sh check rules charts/smartfeed/files/prometheus/rules.yaml
	scripts/promtool.sh test rules internal/observability/testdata/rules_test.yaml

dashboards-render: ## draw the chart's Grafana dashboards as PNGs into docs/dashboards/ from a demo run (DURATION, default 5m) that a loopback Prometheus scraped (Debian's, installed if missing): the panels' data, not Grafana screenshots (scripts/dashboards-render.sh)
	GO="$(GO)" scripts/dashboards-render.sh

helm-lint: ## helm lint + helm template of charts/smartfeed, decoded strictly into Kubernetes types (helm pinned in charts/go.mod), then kubeconform
	cd charts && $(GO) tool helm lint --strict smartfeed && $(GO) tool helm lint --strict smartfeed -f smartfeed/ci/hbase-values.yaml && $(GO) test -count=1 ./...
	GO="$(GO)" scripts/kubeconform.sh

kubeconform: ## every manifest the chart renders (defaults, ci/*.yaml, insecure, mTLS) validated offline against the Kubernetes JSON schemas (K8S_VERSION, default 1.33.0), kubeconform -strict (scripts/kubeconform.sh)
	GO="$(GO)" K8S_VERSION="$(K8S_VERSION)" scripts/kubeconform.sh

IMAGE_TAG ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
image: ## the container image without a Docker engine: an OCI layout + archive in run/image/ (IMAGE_TAG, default git describe), checked by running the binary from its layers (scripts/image.sh)
	GO="$(GO)" scripts/image.sh $(IMAGE_TAG)

services-up: ## start Redis, HBase and its standby (HBase replication) in the background (env lines in run/*/env)
	scripts/redis.sh up
	scripts/hbase.sh up
	scripts/hbase.sh up hbase-standby
	scripts/hbase.sh replicate hbase hbase-standby
	@echo "# export them with:  set -a; . run/redis/env; . run/hbase/env; . run/hbase-standby/env; set +a"

services-down: ## stop the Redis and HBases that services-up started
	-scripts/hbase.sh down hbase-standby
	-scripts/hbase.sh down
	-scripts/redis.sh down
