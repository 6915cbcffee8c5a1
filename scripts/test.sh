#!/usr/bin/env bash
# One command runs every test: the regular build (CUDA compiled when nvcc is
# present, GPU tests skip without a GPU) and an ASan+UBSan build of the unit
# tests. Fixtures come from $MEMRA_FIXTURES or ../shared/fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
cuda=auto
[ "${MEMRA_REQUIRE_CUDA:-0}" = 1 ] && cuda=enabled
[ -f build/build.ninja ] || meson setup build -Dcuda=$cuda
ninja -C build
meson test -C build --print-errorlogs --num-processes 2
# The Python package (python/) against this build's library, with the first
# python3 that has pytest (scripts/deps.sh installs Debian's python3-pytest).
pytest_py=""
for py in python3 /usr/bin/python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import pytest' 2>/dev/null; then pytest_py=$py; break; fi
done
rm -f build/meson-logs/pytest.xml
if [ -n "$pytest_py" ]; then
  MEMRA_LIBRARY="$PWD/build/libmemra.so" MEMRA_DEFAULT_MODEL="$PWD/test/data/default.gguf" \
    "$pytest_py" -m pytest -q -p no:cacheprovider --junitxml=build/meson-logs/pytest.xml python/tests
else
  echo "pytest not installed (apt-get install python3-pytest): skipping the Python package tests (python/tests)"
fi
# Sanitizers: CPU-only build, unit suite.
[ -f build-asan/build.ninja ] || meson setup build-asan -Dcuda=disabled -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs --num-processes 2 --suite unit
python3 scripts/count-tests.py build build-asan
