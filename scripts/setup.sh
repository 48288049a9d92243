#!/usr/bin/env bash
# Installs every dependency (idempotent) and builds a Release tree in build/
# with the CLI at build/bin/mirrortrain.
#   scripts/setup.sh            # apt-get install + build
#   BUILD_DIR=build-x scripts/setup.sh -DMIRRORTRAIN_CUDA=OFF   # extra CMake args
#   scripts/setup.sh --offline DIR   # no apt: libraries from scripts/bundle_deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."

OFFLINE=""
if [[ "${1:-}" == "--offline" ]]; then
  OFFLINE="$(cd "${2:?--offline needs the bundle folder}" && pwd)"
  shift 2
fi

PACKAGES=(
  g++ cmake ninja-build pkg-config
  libabsl-dev libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libgmock-dev
  libbenchmark-dev libopenblas-dev zlib1g-dev libdeflate-dev dataset-fashion-mnist
  # Text for the `text` data source: /usr/share/games/fortunes/.
  fortunes
  # Multi-process jobs (mpirun) and their tests.
  libopenmpi-dev openmpi-bin
)

CMAKE_ARGS=()
if [[ -n "$OFFLINE" ]]; then
  ROOT="$OFFLINE/root"
  [[ -d "$ROOT/usr" ]] || python3 scripts/extract_debs.py "$OFFLINE/debs" "$ROOT" >/dev/null
  LIB="$ROOT/usr/lib/x86_64-linux-gnu"
  # shellcheck disable=SC2054  # The commas are the linker flag's own.
  CMAKE_ARGS+=(
    -DCMAKE_PREFIX_PATH="$ROOT/usr"
    -Dabsl_DIR="$LIB/cmake/absl" -Dyaml-cpp_DIR="$LIB/cmake/yaml-cpp"
    -DGTest_DIR="$LIB/cmake/GTest" -Dbenchmark_DIR="$LIB/cmake/benchmark"
    # Header-only, so its CMake package lives under share/, not lib/.
    -Dnlohmann_json_DIR="$ROOT/usr/share/cmake/nlohmann_json"
    -DMT_DEPS_ROOT="$ROOT"
    # DT_RPATH (not RUNPATH) also serves the libraries' own dependencies
    # (libopenblas -> libgfortran), so nothing needs LD_LIBRARY_PATH.
    -DCMAKE_BUILD_RPATH="$LIB;$LIB/openblas-pthread"
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags
  )
  echo "setup: offline, libraries from $ROOT; Fashion-MNIST in $ROOT/usr/share/datasets/fashion-mnist (--set data.dir=...)" >&2
  PACKAGES=()
fi

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
# CI compiles the CUDA sources on every run (DESIGN.md): there a missing
# nvcc fails the configure instead of building a CPU-only tree unsaid.
# Arguments given after this one (-DMIRRORTRAIN_CUDA=OFF) still win.
[[ -n "${CI:-}" ]] && CMAKE_ARGS+=(-DMIRRORTRAIN_CUDA=ON)

BUILD_DIR="${BUILD_DIR:-build}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${CMAKE_ARGS[@]}" "$@" >/dev/null
# MT_BUILD_TARGETS (space-separated): only these targets, for a device call
# whose minutes are counted (scripts/bench/gpu_host.sh: the GPU tests' binaries).
targets=()
[[ -n "${MT_BUILD_TARGETS:-}" ]] && read -r -a targets <<<"$MT_BUILD_TARGETS"
cmake --build "$BUILD_DIR" -j "$(nproc)" ${targets[@]+--target "${targets[@]}"}
