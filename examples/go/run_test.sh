#!/bin/sh
# meson test wrapper: run_test.sh GO SRC_DIR OUT_DIR. Builds the Go example
# with cgo against this build's library (PKG_CONFIG_PATH and LD_LIBRARY_PATH
# come from the test environment) and runs it on the bundled default model.
set -eu
GO=$1 SRC=$2 OUT=$3
mkdir -p "$OUT"
# caches inside the build dir: CI homes may be read-only, and nothing is downloaded
export GOCACHE="$OUT/cache" GOPATH="$OUT/gopath" GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1
cd "$SRC"
"$GO" build -o "$OUT/memra-go-generate" .
exec "$OUT/memra-go-generate"
