#!/usr/bin/env bash
# Installs the Debian packages specpipe builds against (idempotent,
# non-interactive), then configures and builds into ./build.
#   tools/setup.sh            install + build (CUDA when nvcc is found)
#   SPECPIPE_CUDA=OFF tools/setup.sh   CPU-only build
#   SPECPIPE_NO_INSTALL=1 tools/setup.sh   skip apt-get
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libcaf-dev libboost1.81-all-dev libboost-json1.81-dev libpcre2-dev
          libgtest-dev libgmock-dev)

if [[ -z "${SPECPIPE_NO_INSTALL:-}" ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=()
    [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

build_dir=${SPECPIPE_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-Release} \
  -DSPECPIPE_CUDA=${SPECPIPE_CUDA:-AUTO} ${SPECPIPE_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "$(nproc)"
