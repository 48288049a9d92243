#!/usr/bin/env bash
# A session's GPU work as one device call, in priority order within a time
# budget, every result written under $OUT as it comes: a call cut off at its
# limit still returns what it got so far (the device tool collects $OUT
# whatever the exit). Carry deps-bundle (scripts/bundle_deps.sh) with it.
#
#   scripts/gpu_session.sh [SECONDS]      # default 540
#   PARTS="cnn tta" TRACES="cnn_bf16" scripts/gpu_session.sh 200
#   BENCH_RESERVE=120 scripts/gpu_session.sh 330   # more left for steps 4-5
#   REPEAT="cuda_graph_test:*OfLogicalReplicas*:12" scripts/gpu_session.sh
#
# Steps, each given what the budget has left and skipped (with a line that
# says so) when that is too little:
#   1. unpack the carried bundle (a carried deps-bundle replaces the one
#      unpacked by an earlier call, so every call unpacks it again);
#   2. build the CLI and the gpu-labelled tests (GPU_TARGETS) and run
#      `ctest -L gpu` (scripts/test_gpu.sh without sanitizers);
#   2b. REPEAT (space-separated BINARY:GTEST_FILTER:COUNT): each test
#      binary of build/bin run COUNT times with that filter, for failures
#      that come and go; every run's exit code and a failing run's output
#      (CUDA errors name the kernel when CUDA_LAUNCH_BLOCKING=1 is set);
#   2c. build/bin/conv_gpu_bench (CONV_BENCH=0 skips it): each conv layer
#      of the benchmark models, forward and backward replayed as a CUDA
#      graph, on the direct kernels and the implicit input gradient or on
#      im2col + GEMMs + col2im (tests/bench/conv_gpu_bench.cc); each
#      benchmark runs 0.02 s of GPU time (20 replays an iteration, so
#      about 0.4 s of wall time), some 20 s in all;
#   2d. GEMM_CANDIDATES (off unless set, e.g. "mlp tf32 bf16"): each
#      product of one step of that model timed as cuBLAS picks it and as
#      the fastest of cuBLASLt's first 32 answers
#      (scripts/bench/gemm_candidates.cu; about 20 s per model and
#      precision), so a session learns what an algorithm search would win;
#      2c and 2d leave step 3 at least BENCH_MIN seconds (default 180);
#   3. scripts/bench_gpu.sh $PARTS (default "cnn tta mlp comm resnet gpt";
#      its torch.compile runs come last; TORCH_COMPILE=0 skips them);
#   4. scripts/trace_gpu.sh $TRACES (default "cnn_one_device cnn_bf16
#      mlp_one_device mlp_bf16");
#   5. compute-sanitizer (scripts/test_gpu.sh's memcheck and racecheck).
# Writes $OUT/session.txt (every step's output, appended as it runs) and
# $OUT/results.tgz (the steps' result folders, packed again after each
# step): two files, within what the device tool brings back.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
# nvcc for the steps run here (gemm_candidates); the other scripts add it
# in their own processes (gpu_preflight).
[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
BUDGET="${1:-540}"
OUT="${OUT:-runs/gpu_session-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/session.txt"
RESULTS="$(mktemp -d)"
PARTS="${PARTS:-cnn tta mlp comm resnet gpt}"
TRACES="${TRACES:-cnn_one_device cnn_bf16 mlp_one_device mlp_bf16}"
: >"$LOG"

say() { printf '\n=== %s (+%ds of %ds)\n' "$1" "$SECONDS" "$BUDGET" | tee -a "$LOG"; }
left() { echo $((BUDGET - SECONDS)); }
pack() { tar czf "$OUT/results.tgz.tmp" -C "$RESULTS" . && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }

# step NAME MIN_SECONDS RESERVE COMMAND...: runs COMMAND with at most what
# is left minus RESERVE seconds (kept for the steps after it), its output
# appended to the log; skipped when that is under MIN_SECONDS.
step() {
  local name=$1 min=$2 reserve=$3 rc=0
  shift 3
  local limit=$(($(left) - reserve))
  say "$name (limit ${limit}s)"
  if ((limit < min)); then
    echo "skipped: ${limit}s left for it, needs ${min}s" | tee -a "$LOG"
    return 0
  fi
  timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1 || rc=$?
  echo "$name: exit $rc at +${SECONDS}s" | tee -a "$LOG"
  pack
}

if [[ -d deps-bundle/debs && ! -d deps-bundle/root/usr ]]; then
  say "unpack deps-bundle"
  python3 scripts/extract_debs.py deps-bundle/debs deps-bundle/root >/dev/null
fi
# The dataset where the tests and the time-to-accuracy runs look first.
if [[ ! -e /usr/share/datasets/fashion-mnist && -d deps-bundle/root/usr/share/datasets/fashion-mnist ]]; then
  mkdir -p /usr/share/datasets 2>/dev/null &&
    ln -sfn "$PWD/deps-bundle/root/usr/share/datasets/fashion-mnist" /usr/share/datasets/fashion-mnist
fi

# Reserves: what the later steps need at least, so a slow build or test run
# does not leave the benchmarks nothing.
step "build and ctest -L gpu" 60 100 env OUT="$RESULTS/test" GPU_TARGETS=1 \
  CTEST_JOBS=8 CTEST_TIMEOUT=120 SANITIZER_TOOLS= RACECHECK= TEST_BUDGET=100000 \
  scripts/test_gpu.sh
# Repeated runs: passes and failures per entry, each failing run's tail.
repeat_runs() {
  local entry binary filter count i rc
  for entry in $REPEAT; do
    # The filter may hold colons itself (gtest's pattern separator).
    binary=${entry%%:*}
    count=${entry##*:}
    filter=${entry#*:}
    filter=${filter%:*}
    local failed=0
    for ((i = 1; i <= count; i++)); do
      rc=0
      "build/bin/$binary" --gtest_filter="$filter" >"$RESULTS/repeat_run.txt" 2>&1 || rc=$?
      if ((rc != 0)); then
        failed=$((failed + 1))
        echo "--- $binary $filter run $i: exit $rc"
        tail -40 "$RESULTS/repeat_run.txt"
      fi
    done
    echo "repeat $binary:$filter: $((count - failed)) of $count passed"
  done
  rm -f "$RESULTS/repeat_run.txt"
}
if [[ -n ${REPEAT:-} ]]; then
  export -f repeat_runs
  export REPEAT RESULTS
  step "repeat $REPEAT" 20 60 bash -c repeat_runs
fi
# BENCH_RESERVE: seconds the benchmarks leave for the traces and sanitizers.
RESERVE="${BENCH_RESERVE:-40}"
# What steps 2c and 2d leave for bench_gpu.sh at least: "cnn tta mlp" with
# AB=1 takes about 150 s.
BENCH_MIN="${BENCH_MIN:-180}"
conv_bench() {  # results folder
  # A failed build shows its compiler errors, not only an exit code.
  mkdir -p "$1" &&
    { cmake --build "${BUILD_DIR:-build}" --target conv_gpu_bench >"$1/build.log" 2>&1 ||
      { tail -30 "$1/build.log"; false; }; } &&
    "${BUILD_DIR:-build}/bin/conv_gpu_bench" --benchmark_min_time=0.02 \
      --benchmark_out="$1/conv_gpu_bench.json"
}
if [[ ${CONV_BENCH:-1} != 0 ]]; then
  export -f conv_bench
  # shellcheck disable=SC2016  # $1 is bash -c's argument.
  step "conv_gpu_bench" 30 $((RESERVE + BENCH_MIN)) bash -c 'conv_bench "$1"' _ \
    "$RESULTS/conv"
fi
gemm_candidates() {  # results folder, then gemm_candidates' arguments
  local dir=$1
  shift
  mkdir -p "$dir" &&
    nvcc -O2 -std=c++17 -arch="sm_${CUDA_ARCH:-90}" -o "$dir/gemm_candidates" \
      ${CUBLAS_ROOT:+-I"$CUBLAS_ROOT/include" -L"$CUBLAS_ROOT/lib"} \
      scripts/bench/gemm_candidates.cu -lcublas -lcublasLt &&
    "$dir/gemm_candidates" "$@" >"$dir/gemm_candidates.jsonl"
  local rc=$?
  rm -f "$dir/gemm_candidates"
  cat "$dir/gemm_candidates.jsonl"
  return "$rc"
}
if [[ -n ${GEMM_CANDIDATES:-} ]]; then
  export -f gemm_candidates
  # shellcheck disable=SC2016,SC2086  # $1 is bash -c's; the words are arguments.
  step "gemm_candidates $GEMM_CANDIDATES" 30 $((RESERVE + BENCH_MIN)) \
    bash -c 'gemm_candidates "$@"' _ "$RESULTS/gemm" $GEMM_CANDIDATES
fi
# shellcheck disable=SC2086
step "bench_gpu.sh $PARTS" 30 "$RESERVE" env OUT="$RESULTS/bench" SKIP_BUILD=1 \
  BENCH_BUDGET=$(($(left) - RESERVE)) scripts/bench_gpu.sh $PARTS
# shellcheck disable=SC2086
step "trace_gpu.sh $TRACES" 20 20 env OUT="$RESULTS/trace" SKIP_BUILD=1 \
  scripts/trace_gpu.sh $TRACES
step "compute-sanitizer" 30 5 env OUT="$RESULTS/sanitizer" SKIP_BUILD=1 \
  SKIP_CTEST=1 TEST_BUDGET=$(($(left) - 5)) scripts/test_gpu.sh
say "done"
grep -hE "tests passed|\((Failed|Timeout)\)|skipped: [0-9]|FAILED|all GPU tests passed" \
  "$RESULTS"/test/test_gpu.txt "$RESULTS"/sanitizer/test_gpu.txt 2>/dev/null | tee -a "$LOG"
repeats="$(grep -h "^repeat .* passed$" "$LOG")"
[[ -z $repeats ]] || echo "$repeats" | tee -a "$LOG"
if [[ -f $RESULTS/bench/bench_gpu_table.txt ]]; then
  tee -a "$LOG" <"$RESULTS/bench/bench_gpu_table.txt"
fi
pack
