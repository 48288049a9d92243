# shellcheck shell=bash
# Shared by scripts/bench_gpu.sh and scripts/test_gpu.sh (sourced, not run):
# the results folder, a look at the GPU host, and the build.
#
# Environment:
#   OUT          results folder (the device tool collects it); default
#                runs/<script>-<date>/
#   DEPS_BUNDLE  the offline bundle (scripts/bundle_deps.sh); default deps-bundle
#   NCCL_ROOT    NCCL if not with the CUDA toolkit; found in the Python
#                nvidia-nccl wheel when unset
#   CUBLAS_ROOT  likewise for cuBLAS (the nvidia-cublas wheel)
#   BUILD_DIR    default build
#   SKIP_BUILD   set: use $BUILD_DIR as it is
#   GPU_TARGETS  set: build only the CLI and the test binaries labelled gpu
#                (a shorter build on a device whose minutes are counted)

# Results folder: $OUT or runs/NAME-DATE. Sets RES.
gpu_results_dir() {  # name
  RES="${OUT:-runs/$1-$(date +%Y%m%d-%H%M%S)}"
  mkdir -p "$RES"
  RES="$(cd "$RES" && pwd)"
}

gpu_section() { printf '\n== %s (%s, +%ds)\n' "$1" "$(date +%H:%M:%S)" "$SECONDS"; }

# Fails unless a GPU answers; prints what the host has for the build.
gpu_preflight() {
  [[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
    echo "no GPU: nvidia-smi is missing or failed" >&2
    return 1
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
  local tool
  for tool in nvcc cmake ninja g++ python3 compute-sanitizer; do
    if command -v "$tool" >/dev/null; then
      printf '%-18s %s\n' "$tool" "$("$tool" --version 2>&1 | grep -m1 -iE 'release|version|[0-9]+\.[0-9]+' || true)"
    else
      printf '%-18s MISSING\n' "$tool"
    fi
  done
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())" 2>&1 || true
  python3 -c "import numpy; print('numpy', numpy.__version__)" 2>&1 || echo "numpy MISSING (torch_gpu.py reads IDX files with torch alone)"
  if [[ -z "${NCCL_ROOT:-}" ]] && ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
    # The nvidia-nccl-cu* wheel: nvidia/nccl/{include,lib}.
    NCCL_ROOT="$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null || true)"
    [[ -n "$NCCL_ROOT" ]] && export NCCL_ROOT
  fi
  echo "NCCL_ROOT=${NCCL_ROOT:-<unset: NCCL from the CUDA toolkit>}"
  if [[ -n "${NCCL_ROOT:-}" && -d "$NCCL_ROOT/lib" ]]; then
    export LD_LIBRARY_PATH="$NCCL_ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  local cuda_include
  cuda_include="$(dirname "$(dirname "$(command -v nvcc)")")/include"
  if [[ -z "${CUBLAS_ROOT:-}" && ! -f "$cuda_include/cublas_v2.h" ]]; then
    # The nvidia-cublas wheel of nvcc's major version (CUDA 13:
    # nvidia/cu13/{include,lib}).
    local major
    major="$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
    CUBLAS_ROOT="$(python3 -c "import nvidia, os, sys; print(next(p for p in (os.path.join(d, 'cu' + sys.argv[1]) for d in nvidia.__path__) if os.path.exists(os.path.join(p, 'include', 'cublas_v2.h'))))" "$major" 2>/dev/null || true)"
    [[ -n "$CUBLAS_ROOT" ]] && export CUBLAS_ROOT
  fi
  # No LD_LIBRARY_PATH for it: the binaries' RPATH names that folder, and
  # the folder also holds other CUDA libraries of the wheels.
  echo "CUBLAS_ROOT=${CUBLAS_ROOT:-<unset: cuBLAS from the CUDA toolkit>}"
}

# Builds $BUILD_DIR (default build) with scripts/setup.sh: offline from the
# bundle when there is one, else with the host's Debian packages. Ninja makes
# a second call cheap. Log in $RES/build.log.
gpu_build() {
  local bundle="${DEPS_BUNDLE:-deps-bundle}" rc=0
  BUILD_DIR="${BUILD_DIR:-build}"
  export BUILD_DIR
  local start=$SECONDS
  if [[ -n "${SKIP_BUILD:-}" ]]; then
    echo "build: skipped (SKIP_BUILD); $("$BUILD_DIR/bin/mirrortrain" --version)"
    return 0
  fi
  if [[ -n "${GPU_TARGETS:-}" ]]; then
    # tests/CMakeLists.txt: mt_test(NAME SOURCE ... LABELS ... gpu ...).
    MT_BUILD_TARGETS="mirrortrain $(sed -n 's/^mt_test(\([a-z0-9_]*\) .*LABELS.* gpu\b.*/\1/p' tests/CMakeLists.txt | tr '\n' ' ')"
    export MT_BUILD_TARGETS
    echo "build: targets $MT_BUILD_TARGETS"
  fi
  if [[ -d "$bundle/debs" || -d "$bundle/root/usr" ]]; then
    echo "build: scripts/setup.sh --offline $bundle -> $BUILD_DIR (log: $RES/build.log)"
    scripts/setup.sh --offline "$bundle" -DMIRRORTRAIN_CUDA=ON >"$RES/build.log" 2>&1 || rc=$?
  else
    echo "build: no $bundle/ (carry it: scripts/bundle_deps.sh on a machine with apt); trying scripts/setup.sh"
    scripts/setup.sh -DMIRRORTRAIN_CUDA=ON >"$RES/build.log" 2>&1 || rc=$?
  fi
  if ((rc != 0)); then
    echo "build FAILED (exit $rc); last lines of $RES/build.log:"
    tail -40 "$RES/build.log"
    return 1
  fi
  echo "build: ok in $((SECONDS - start)) s; $("$BUILD_DIR/bin/mirrortrain" --version)"
}

# Fashion-MNIST: $DATA_DIR, the system package, or the unpacked bundle.
gpu_data_dir() {
  local d
  for d in "${DATA_DIR:-}" /usr/share/datasets/fashion-mnist \
    "${DEPS_BUNDLE:-deps-bundle}/root/usr/share/datasets/fashion-mnist"; do
    if [[ -n "$d" ]] && ls "$d"/train-images-idx3-ubyte* >/dev/null 2>&1; then
      (cd "$d" && pwd)
      return 0
    fi
  done
  return 1
}
