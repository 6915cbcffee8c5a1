#!/bin/sh
# meson test wrapper: run_test.sh GO SRC_DIR OUT_DIR. Runs `go test` on the
# module against this build's library (PKG_CONFIG_PATH and LD_LIBRARY_PATH
# come from the test environment); nothing is downloaded.
set -eu
GO=$1 SRC=$2 OUT=$3
mkdir -p "$OUT"
export GOCACHE="$OUT/cache" GOPATH="$OUT/gopath" GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=1
cd "$SRC"
exec "$GO" test -count=1 -v ./...
