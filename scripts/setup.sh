#!/usr/bin/env bash
# Installs every dependency (idempotent) and builds a Release tree in build/
# with the CLI at build/bin/mirrortrain.
#   scripts/setup.sh            # apt-get install + build
#   BUILD_DIR=build-x scripts/setup.sh -DMIRRORTRAIN_CUDA=OFF   # extra CMake args
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  g++ cmake ninja-build pkg-config
  libabsl-dev libyaml-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev zlib1g-dev dataset-fashion-mnist
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The CUDA toolkit is not a Debian package here; it is used when present.
[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"

BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
