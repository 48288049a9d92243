#!/usr/bin/env bash
# CPU training throughput: mirrortrain next to PyTorch, same model, batch and
# thread count, on synthetic Fashion-MNIST-shaped data.
#
#   scripts/bench_cpu.sh              # mirrortrain vs PyTorch: MLP, CNN and
#                                     # the batch-norm resnet config
#   MODELS=resnet scripts/bench_cpu.sh  # only some of them
#   scripts/bench_cpu.sh --strategies # also one_device vs mirrored-1 vs mirrored-2
#   scripts/bench_cpu.sh --contention # MLP quiet vs with a process spinning
#                                     # on the last core (issue: kernel pool
#                                     # under contention)
#   scripts/bench_cpu.sh --baseline OLD_BINARY [--set KEY=VALUE]...
#                                     # this build against another mirrortrain,
#                                     # runs interleaved (before/after a change),
#                                     # both with the given overrides
#
# Needs python3 with torch (pip install torch) for the PyTorch column.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null

THREADS="${THREADS:-$(nproc)}"
BATCH="${BATCH:-128}"
# Runs per number; the median is reported (shared VMs vary by +-15%).
REPEAT="${REPEAT:-3}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

# samples/s of the last logged window (the first window includes warm-up).
MT="${MT:-build/bin/mirrortrain}"
mt_rate() {  # model steps log_every [extra --set args...]
  local model=$1 steps=$2 every=$3
  shift 3
  local dir="$OUT/$model-$RANDOM"
  # The PyTorch twins do not augment, so neither does this run (the resnet
  # config's augmentation is reset to its defaults: none).
  local no_augment=()
  if grep -q '^  augment:' "configs/fashion_mnist_$model.yaml"; then
    no_augment=(--set 'data.augment={}')
  fi
  "$MT" train --config "configs/fashion_mnist_$model.yaml" \
    --run_dir "$dir" --set data.name=synthetic --set data.test_examples=1000 \
    --set data.global_batch_size="$BATCH" --set train.steps="$steps" \
    --set train.log_every_steps="$every" --set train.eval_every_epochs=0 \
    --set checkpoint.every_steps=0 "${no_augment[@]}" "$@" 2>/dev/null
  python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if '\"train\"' in l]; print(round(r[-1]['samples_per_sec'],1))" "$dir/metrics.jsonl"
}

median() { python3 -c "import statistics,sys; print(round(statistics.median(map(float, sys.argv[1:])), 1))" "$@"; }
# Median over REPEAT runs of a command printing one number.
med() {
  local values=()
  for ((i = 0; i < REPEAT; i++)); do values+=("$("$@")"); done
  median "${values[@]}"
}
pt_rate() {  # model steps
  python3 scripts/bench/torch_cpu.py --model "$1" --batch "$BATCH" \
    --threads "$THREADS" --steps "$2" --warmup 5 |
    python3 -c "import json,sys; print(json.load(sys.stdin)['samples_per_sec'])"
}

if [[ "${1:-}" == "--contention" ]]; then
  # Another process takes one core; the ideal is (cores-1)/cores of quiet.
  echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); batch=$BATCH; median of $REPEAT runs"
  quiet=$(med mt_rate mlp 3000 1000)
  taskset -c "$(($(nproc) - 1))" bash -c 'while :; do :; done' &
  spinner=$!
  busy=$(med mt_rate mlp 3000 1000)
  kill "$spinner"
  python3 - "$quiet" "$busy" <<'PY'
import sys
quiet, busy = map(float, sys.argv[1:])
print(f"mlp: quiet {quiet} samples/s, one core busy {busy} samples/s "
      f"= {100 * busy / quiet:.0f}% of quiet")
PY
  exit 0
fi

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); threads=$THREADS batch=$BATCH; median of $REPEAT runs"
for model in ${MODELS:-mlp cnn resnet}; do
  case $model in
    mlp) steps=600; every=300; tsteps=300 ;;
    cnn) steps=40; every=20; tsteps=20 ;;
    resnet) steps=30; every=15; tsteps=15 ;;
  esac
  mt=$(med mt_rate "$model" "$steps" "$every")
  if python3 -c "import torch" 2>/dev/null; then
    pt_version=$(python3 -c "import torch; print(torch.__version__)")
    pt=$(med pt_rate "$model" "$tsteps")
    ratio=$(python3 -c "print(round($mt/$pt, 2))")
    echo "$model: mirrortrain $mt samples/s, pytorch $pt_version $pt samples/s, ratio ${ratio}x"
    if [[ $model == mlp && -x build/bin/ops_bench ]]; then
      # How far 3x PyTorch is from the hardware: the MLP's GEMM flops per
      # example (forward, all weight gradients, the two inner input
      # gradients) against the two-core FMA peak measured now (this VM's
      # speed moves with its neighbours, so the peak is taken in the same run).
      peak=$(build/bin/ops_bench --benchmark_filter='FmaPeak/2' --benchmark_format=json 2>/dev/null |
        python3 -c "import json,sys; print(round(json.load(sys.stdin)['benchmarks'][0]['GFLOP/s'], 1))")
      python3 - "$mt" "$pt" "$peak" <<'PY'
import sys
mt, pt, peak = map(float, sys.argv[1:])
layers = [(784, 256), (256, 128), (128, 10)]
flops = 2 * sum(i * o for i, o in layers) * 2 + 2 * sum(i * o for i, o in layers[1:])
print(f"mlp: {flops / 1e6:.3f} MFLOP/example; mirrortrain {mt * flops / 1e9:.0f} GFLOP/s, "
      f"pytorch {pt * flops / 1e9:.0f} GFLOP/s; 3x pytorch needs {3 * pt * flops / 1e9:.0f} GFLOP/s "
      f"= {300 * pt * flops / 1e9 / peak:.0f}% of the FMA peak measured now ({peak} GFLOP/s, 2 cores)")
PY
    fi
  else
    echo "$model: mirrortrain $mt samples/s (no torch for comparison)"
  fi
done

if [[ "${1:-}" == "--baseline" ]]; then
  baseline="${2:?--baseline needs a mirrortrain binary}"
  overrides=("${@:3}")
  for model in mlp cnn; do
    if [[ $model == mlp ]]; then steps=600; every=300; else steps=40; every=20; fi
    old=() new=()
    for ((i = 0; i < REPEAT; i++)); do  # interleaved: the VM's speed drifts
      old+=("$(MT=$baseline mt_rate "$model" "$steps" "$every" "${overrides[@]}")")
      new+=("$(mt_rate "$model" "$steps" "$every" "${overrides[@]}")")
    done
    python3 - "$model" "$(median "${old[@]}")" "$(median "${new[@]}")" "${old[*]}" "${new[*]}" <<'PY'
import sys
model, old, new = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
print(f"{model}: baseline {old} samples/s, this build {new} samples/s "
      f"({100 * (new - old) / old:+.1f}%); runs: baseline {sys.argv[4]}, "
      f"this build {sys.argv[5]}")
PY
  done
fi

if [[ "${1:-}" == "--strategies" ]]; then
  for model in mlp cnn; do
    if [[ $model == mlp ]]; then steps=600; every=300; else steps=40; every=20; fi
    one=$(med mt_rate "$model" "$steps" "$every" --set distribute.strategy=one_device --set "distribute.devices=[cpu:0]")
    m1=$(med mt_rate "$model" "$steps" "$every" --set distribute.strategy=mirrored --set "distribute.devices=[cpu:0]")
    m2=$(med mt_rate "$model" "$steps" "$every" --set distribute.strategy=mirrored --set "distribute.devices=[cpu:0,cpu:1]")
    python3 - "$model" "$one" "$m1" "$m2" <<'PY'
import sys
model, one, m1, m2 = sys.argv[1], *map(float, sys.argv[2:])
print(f"{model}: one_device {one} samples/s, mirrored-1 {m1} "
      f"(overhead {100 * (one - m1) / one:.1f}%), mirrored-2 {m2} "
      f"(2-replica scaling efficiency {100 * m2 / one:.0f}% of one device on the same cores)")
PY
  done
fi
