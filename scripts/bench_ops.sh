#!/usr/bin/env bash
# Micro-benchmarks of matmul and conv2d forward+backward against bare
# OpenBLAS sgemm (GFLOP/s). Builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
build/bin/ops_bench --benchmark_min_time=1 "$@"
