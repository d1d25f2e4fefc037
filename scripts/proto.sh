#!/usr/bin/env bash
# scripts/proto.sh — regenerates Go code from every proto/**/*.proto (paths=source_relative, so
# proto/a/b.proto -> proto/a/b.pb.go and b_grpc.pb.go). The plugins are built from the versions
# pinned as tools in go.mod; protoc comes from Debian's protobuf-compiler.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
command -v protoc >/dev/null 2>&1 || apt_install protobuf-compiler
mkdir -p bin
go build -o bin/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
mapfile -t files < <(find proto -name '*.proto' -type f | sort)
if [ ${#files[@]} -eq 0 ]; then
	log "no .proto files under proto/; nothing to generate"
	exit 0
fi
log "protoc $(protoc --version | awk '{print $2}') over ${#files[@]} file(s)"
protoc -I proto \
	--plugin=protoc-gen-go="$ROOT/bin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$ROOT/bin/protoc-gen-go-grpc" \
	--go_out=proto --go_opt=paths=source_relative \
	--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
	"${files[@]#proto/}"
