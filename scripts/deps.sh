#!/usr/bin/env bash
# Installs what memra needs to build and test on Debian/Ubuntu (as root, or
# with sudo). nvcc/CUDA is optional: with it the CUDA backend is compiled.
# libmicrohttpd and jansson are for memra-server only (built when found).
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
pkgs=(meson ninja-build pkg-config gcc libcmocka-dev libpcre2-dev libutf8proc-dev libmicrohttpd-dev libjansson-dev python3 python3-pytest python3-numpy valgrind golang-go)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
