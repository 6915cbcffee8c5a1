# Sourced by the device scripts: unpacks the Debian packages the device
# image lacks (carried in .deps/, or the folder GPU_DEPS names) into
# /tmp/deps, never into /, and points pkg-config and the loader at them;
# puts nvcc on PATH.
if ! pkg-config --exists cmocka libutf8proc libpcre2-8 2>/dev/null; then
  rm -rf /tmp/deps && mkdir -p /tmp/deps
  for f in "${GPU_DEPS:-.deps}"/*.deb; do dpkg -x "$f" /tmp/deps || return 2; done
  ml=/tmp/deps/usr/lib/x86_64-linux-gnu
  export PKG_CONFIG_LIBDIR=$ml/pkgconfig:/tmp/deps/usr/share/pkgconfig
  export PKG_CONFIG_PATH=$PKG_CONFIG_LIBDIR
  export PKG_CONFIG_SYSROOT_DIR=/tmp/deps
  export LD_LIBRARY_PATH=$ml${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  command -v pkg-config >/dev/null || export PATH=/tmp/deps/usr/bin:$PATH
fi
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH
# NVLink multicast stays off on shared hosts (device README)
export NCCL_NVLS_ENABLE=0
# binaries from scripts/prebuilt.sh: the library (and a test) travel xz-compressed
if [ -n "${PREBUILT:-}" ]; then
  for z in "$PREBUILT"/libmemra.so.0.xz "$PREBUILT"/test/*.xz; do
    if [ -f "$z" ] && [ ! -f "${z%.xz}" ]; then
      xz -dk "$z" || return 2
    fi
  done
fi
:
