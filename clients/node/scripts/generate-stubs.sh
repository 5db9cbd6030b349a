#!/usr/bin/env bash
# Generates the TypeScript stubs of proto/tickd/v1/tickd.proto (the Timers service) and
# sinks.proto (the Sinks service) into the directory given
# (src/gen for the committed copy; the check generates into a temp dir and compares).
#
# ts-proto emits static, typed code (messages with encode/decode and a grpc-js service
# definition), so nothing loads a .proto at run time. Options, and why:
#   outputServices=grpc-js  a @grpc/grpc-js client constructor (makeGenericClientConstructor)
#   forceLong=string        int64/uint64 as strings: JavaScript numbers lose precision past 2^53
#   esModuleInterop=true    default imports that match this package's tsconfig
#   env=node                bytes as Buffer-compatible Uint8Array, no browser shims
#   useDate=true            google.protobuf.Timestamp as a JavaScript Date
#   annotateFilesWithVersion=false  no protoc version in the header: the stale-stub check compares
#                           the code, and Debian releases ship different protoc versions
set -euo pipefail
out=${1:?usage: generate-stubs.sh OUTPUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
proto_root=${TICKD_PROTO_ROOT:-$here/../../proto}
plugin=$here/node_modules/.bin/protoc-gen-ts_proto
# The well-known types (duration.proto, timestamp.proto): Debian's libprotobuf-dev.
wkt_include=${PROTOC_WKT_INCLUDE:-/usr/include}
mkdir -p "$out"
protoc \
  --plugin=protoc-gen-ts_proto="$plugin" \
  --proto_path="$proto_root" \
  --proto_path="$wkt_include" \
  --ts_proto_out="$out" \
  --ts_proto_opt=outputServices=grpc-js,forceLong=string,esModuleInterop=true,env=node,useDate=true,annotateFilesWithVersion=false \
  tickd/v1/tickd.proto tickd/v1/sinks.proto
