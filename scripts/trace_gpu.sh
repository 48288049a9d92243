#!/usr/bin/env bash
# GPU timelines of the benchmark runs (a diagnostic next to
# scripts/bench_gpu.sh): builds scripts/bench/cupti_trace.cc, runs short
# mirrortrain jobs (and the PyTorch CNN twin) under it and prints
# scripts/bench/trace_report.py for each: GPU busy share, per-stream time and
# overlap, top kernels, host time in the CUDA runtime.
#
#   scripts/trace_gpu.sh                 # all runs below
#   scripts/trace_gpu.sh mlp_mirrored2   # some of them
#   scripts/trace_gpu.sh mlp_mirrored2_reduce   # named only: sum_in_update off
#
# Builds like scripts/bench_gpu.sh (SKIP_BUILD=1 reuses $BUILD_DIR). Writes
# $OUT (default runs/trace_gpu-DATE/): trace_gpu.txt and <run>.tsv.gz.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench/gpu_host.sh
source scripts/bench/gpu_host.sh
gpu_results_dir trace_gpu
exec > >(tee "$RES/trace_gpu.txt") 2>&1
RUNS=("$@")
((${#RUNS[@]})) || RUNS=(cnn_one_device cnn_bf16 cnn_mirrored2 mlp_one_device mlp_bf16 mlp_mirrored2
  mlp_mirrored2_nocomm torch_cnn)

gpu_section "host"
gpu_preflight
gpu_section "build"
gpu_build
cupti_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/extras/CUPTI/lib64 /usr/local/cuda/lib \
  "$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null || true)"; do
  if [[ -n $d ]] && ls "$d"/libcupti.so* >/dev/null 2>&1; then
    cupti_lib=$d
    break
  fi
done
[[ -n $cupti_lib ]] || { echo "no libcupti found"; exit 1; }
TRACER="$BUILD_DIR/cupti_trace.so"
nvcc -O2 -shared -Xcompiler -fPIC -o "$TRACER" scripts/bench/cupti_trace.cc \
  -L"$cupti_lib" -lcupti -Xlinker -rpath="$cupti_lib"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
CNN=(--config configs/fashion_mnist_cnn_gpu.yaml --set data.name=synthetic
  --set data.test_examples=1000 --set train.steps=200 --set train.log_every_steps=100
  --set train.eval_every_epochs=0 --set train.cuda_graph=auto)
MLP=(--config configs/mlp_4096_gpu.yaml --set train.steps=150 --set train.log_every_steps=50
  --set train.cuda_graph=auto)
ONE=(--set distribute.strategy=one_device --set "distribute.devices=[gpu:0]")
ONE_MIRRORED=(--set distribute.strategy=mirrored --set "distribute.devices=[gpu:0]")
TWO=(--set distribute.strategy=mirrored --set "distribute.devices=[gpu:0,gpu:0]")

for run in "${RUNS[@]}"; do
  gpu_section "$run"
  case $run in
    cnn_one_device) args=("${CNN[@]}" "${ONE[@]}") ;;
    cnn_bf16) args=("${CNN[@]}" "${ONE[@]}" --set precision=bf16) ;;
    cnn_mirrored1) args=("${CNN[@]}" "${ONE_MIRRORED[@]}") ;;
    # One epoch on Fashion-MNIST from process launch: the start-up and the
    # first steps' warm-up as the time-to-accuracy run has them.
    cnn_fashion)
      DATA="$(gpu_data_dir)" || { echo "no Fashion-MNIST"; continue; }
      args=(--config configs/fashion_mnist_cnn_gpu.yaml --set "data.dir=$DATA"
        --set train.epochs=1 --set train.cuda_graph=auto) ;;
    cnn_mirrored2) args=("${CNN[@]}" "${TWO[@]}") ;;
    mlp_one_device) args=("${MLP[@]}" "${ONE[@]}") ;;
    mlp_bf16) args=("${MLP[@]}" "${ONE[@]}" --set precision=bf16) ;;
    mlp_mirrored2) args=("${MLP[@]}" "${TWO[@]}") ;;
    mlp_mirrored2_reduce) args=("${MLP[@]}" "${TWO[@]}" --set distribute.sum_in_update=false) ;;
    mlp_mirrored2_nocomm) args=("${MLP[@]}" "${TWO[@]}" --set distribute.cross_device_ops=none) ;;
    torch_cnn) args=() ;;
    *) echo "unknown run $run"; continue ;;
  esac
  trace="$WORK/$run.tsv"
  # --foreground: the run stays in this script's process group, so a caller's
  # timeout that stops the script (gpu_session.sh's step limit) stops the
  # run too instead of leaving it on the GPU.
  if [[ $run == torch_cnn ]]; then
    timeout --foreground 120 env CUPTI_TRACE_OUT="$trace" LD_PRELOAD="$TRACER" python3 scripts/bench/torch_gpu.py \
      --bench cnn_rate --cnn_precision fp32 --steps 200 --warmup 20 --repeat 1 || true
  else
    timeout --foreground 120 env CUPTI_TRACE_OUT="$trace" LD_PRELOAD="$TRACER" "$BUILD_DIR/bin/mirrortrain" train \
      "${args[@]}" --run_dir "$WORK/run_$run" | tail -3 || true
  fi
  [[ -s $trace ]] || { echo "no trace"; continue; }
  python3 scripts/bench/trace_report.py "$trace" || true
  gzip -c "$trace" >"$RES/$run.tsv.gz"
done
