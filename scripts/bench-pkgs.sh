#!/usr/bin/env bash
# scripts/bench-pkgs.sh — prints ./dir for every package with a func BenchmarkXxx in its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -rlE --include='*_test.go' '^func Benchmark[A-Za-z0-9_]*\(' . 2>/dev/null \
	| grep -v '/testdata/' | xargs -r -n1 dirname | sort -u
