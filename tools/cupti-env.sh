# Sourced by tools/trace-token.sh and tools/trace-prefill.sh (device only):
# the build folder $B (default $PREBUILT, else /tmp/build-gpu) and $OUT
# (default /tmp); builds the CUPTI tracer (tools/cupti-trace.c) next to the
# binaries in $B unless $TRACER names one, and points the loader at CUPTI.
# Sets $so.
B=${B:-${PREBUILT:-/tmp/build-gpu}}
OUT=${OUT:-/tmp}
so=${TRACER:-$B/cupti-trace.so}
[ -f "$so" ] || gcc -O2 -shared -fPIC -I/usr/local/cuda/include tools/cupti-trace.c -L/usr/local/cuda/lib64 -lcupti \
  -o "$so" || exit 1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
