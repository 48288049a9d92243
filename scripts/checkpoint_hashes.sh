#!/usr/bin/env bash
# Trains the shipped mlp and cnn configs for a few dozen steps on 1 and 2
# logical replicas and prints the SHA-256 of every tensor of the final
# checkpoints, one "run tensor hash" line each. Run it with two binaries and
# diff the outputs to prove a refactoring changed no arithmetic:
#   MT=old/bin/mirrortrain scripts/checkpoint_hashes.sh > old.txt
#   scripts/checkpoint_hashes.sh > new.txt && diff old.txt new.txt
# CONFIGS names other configs (configs/NAME.yaml); SETS adds --set
# overrides to every run, e.g. SETS="precision=bf16".
set -euo pipefail
cd "$(dirname "$0")/.."
MT="${MT:-build/bin/mirrortrain}"
STEPS="${STEPS:-40}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
extra=()
for kv in ${SETS:-}; do extra+=(--set "$kv"); done
for cfg in ${CONFIGS:-fashion_mnist_mlp fashion_mnist_cnn}; do
  data=()
  [[ "$cfg" == fashion_mnist_* ]] && data=(--set data.test_examples=500)
  for devices in "[cpu:0]" "[cpu:0,cpu:1]"; do
    run="$cfg-$(tr -cd ',' <<<"$devices" | wc -c | awk '{print $1 + 1}')"
    "$MT" train --config "configs/$cfg.yaml" --run_dir "$work/$run" \
      --set "train.steps=$STEPS" --set "checkpoint.every_steps=$STEPS" \
      ${data[@]+"${data[@]}"} --set "distribute.strategy=mirrored" \
      --set "distribute.devices=$devices" ${extra[@]+"${extra[@]}"} >/dev/null 2>"$work/$run.log" ||
      { cat "$work/$run.log" >&2; exit 1; }
    python3 - "$work/$run/checkpoints/ckpt-$STEPS.safetensors" "$run" <<'PY'
import hashlib, sys
sys.path.insert(0, "scripts")
from read_checkpoint import load
tensors, _ = load(sys.argv[1])
for name in sorted(tensors):
    print(sys.argv[2], name, hashlib.sha256(tensors[name].tobytes()).hexdigest()[:16])
PY
  done
done
