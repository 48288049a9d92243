#!/usr/bin/env bash
# Collects what a build needs into a folder, for a GPU host without network
# or Debian packages (the lent device machine):
#   scripts/bundle_deps.sh [DIR]            # default: deps-bundle/ (git-ignored)
# then, there:
#   scripts/setup.sh --offline DIR
# CUDA, cuBLAS and NCCL come from the host (NCCL also from the nvidia-nccl
# wheel: set NCCL_ROOT). The bundle is the Debian .deb files of the
# libraries (about 50 MB with the dataset; zlib too, which images often lack
# the headers of), unpacked on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-deps-bundle}"
PACKAGES=(
  libabsl-dev libabsl20220623 libyaml-cpp-dev libyaml-cpp0.7 nlohmann-json3-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
  libopenblas-dev libopenblas0 libopenblas-pthread-dev libopenblas0-pthread
  libgfortran5 zlib1g zlib1g-dev libdeflate0 libdeflate-dev dataset-fashion-mnist
)
mkdir -p "$DIR/debs"
(
  cd "$DIR/debs"
  apt-get download "${PACKAGES[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
)
n=$(find "$DIR/debs" -maxdepth 1 -name '*.deb' | wc -l)
[[ $n -eq ${#PACKAGES[@]} ]] || { echo "bundle_deps: expected ${#PACKAGES[@]} packages, got $n" >&2; exit 1; }
echo "bundle_deps: $n packages, $(du -sh "$DIR/debs" | cut -f1) in $DIR/debs"
