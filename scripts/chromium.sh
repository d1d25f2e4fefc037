#!/usr/bin/env bash
# scripts/chromium.sh path
# Prints the path of a headless-capable Chromium for the console's browser tests, installing
# Debian's chromium package first when none is on PATH (idempotent: an installed one is used as
# is). Exits non-zero, with the reason on stderr, when none can be found or installed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

find_chromium() {
	local c
	for c in chromium chromium-browser google-chrome; do
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return 0
		fi
	done
	return 1
}

case "${1:-path}" in
path)
	if find_chromium; then exit 0; fi
	# apt_install dies (exit 1) with the reason when it cannot install.
	apt_install chromium
	find_chromium || die "chromium was installed but is not on PATH"
	;;
*)
	echo "usage: $0 path" >&2
	exit 2
	;;
esac
