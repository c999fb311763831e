#!/usr/bin/env bash
# ctest-timeout: 120
# train.device with several ranks, on a machine without a GPU (in both the
# CUDA and the CPU-only build): `cuda` is one line and exit 2 on every rank
# (multi-GPU training itself is wired, so the message is about the missing
# GPU, never "not supported"); `auto` trains every rank on the CPU. The GPU
# side (2 NCCL ranks = 1 rank with the doubled batch, 2 ranks on 1 GPU
# refused) is in tests/gpu/run.sh.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
common=(--data.path "$data" --model.preset mlp --train.steps 2 --train.batch_size 16 --log.progress plain
        --ckpt.keep 1)
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then skip "this machine has a GPU (tests/gpu/run.sh covers it)"; fi

rc=0
HPC_TEST_TIMEOUT=60 run_mpi 2 "$hp" "${common[@]}" --train.device cuda --run.dir "$TMP/cuda" \
  > "$TMP/cuda.out" 2> "$TMP/cuda.err" || rc=$?
lines=$(grep -c "^hpctrain:" "$TMP/cuda.err")  # (mpirun adds its own banner)
[ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] || { cat "$TMP/cuda.err"; fail "2 ranks --train.device cuda: exit $rc, $lines stderr lines (want 2, 1 hpctrain line)"; }
grep -qE "^hpctrain: error on rank 0: --train.device cuda: (no CUDA device is visible|this hpctrain was built without CUDA)" \
  "$TMP/cuda.err" || { cat "$TMP/cuda.err"; fail "2 ranks --train.device cuda: wrong message"; }
grep -q "not wire\|multi-GPU" "$TMP/cuda.err" && fail "the old 'multi-GPU not wired' refusal is back"
pass "2 ranks --train.device cuda without a GPU: $(grep "^hpctrain:" "$TMP/cuda.err")"

HPC_TEST_TIMEOUT=90 run_mpi 2 "$hp" "${common[@]}" --train.device auto --run.dir "$TMP/auto" > "$TMP/auto.log" 2>&1 \
  || { cat "$TMP/auto.log"; fail "2 ranks --train.device auto"; }
[ "$(grep -c 'device cpu' "$TMP/auto.log")" -eq 2 ] || { cat "$TMP/auto.log"; fail "auto: both ranks should train on the CPU"; }
grep -q "communicator mpi" "$TMP/auto.log" || fail "auto on CPUs: gradients should go through MPI"
pass "2 ranks --train.device auto without a GPU: both on the CPU, gradients over MPI"
