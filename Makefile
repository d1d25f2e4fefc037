# SmartFeed: the single entry point. `make help` lists the targets.
.DEFAULT_GOAL := help
GO ?= go

.PHONY: help build test-short
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build the smartfeed binary into bin/
	$(GO) build -o bin/smartfeed ./cmd/smartfeed

test-short: ## fast loop: unit tests only, no Redis or HBase
	$(GO) test -short ./...
