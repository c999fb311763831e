#!/usr/bin/env bash
# ctest-timeout: 300
# NcclComm on GPUs: build/tests/mpi/test_dist_nccl with 1 rank, and with 2
# ranks where a node has 2 GPUs. Without a GPU (or in a CPU-only build) every
# test skips and this script reports SKIPPED (exit 77) with the reason.
# The CPU-side rules (dist.backend nccl on a CPU run) are in dist_train.sh.
source "$(dirname "$0")/lib.bash"
bin="$BUILD/tests/mpi/test_dist_nccl"
[ -x "$bin" ] || fail "$bin is missing (make all builds it)"

HPC_TEST_TIMEOUT=120 run_mpi 1 "$bin" --gtest_color=no > "$TMP/one.log" 2>&1 || { cat "$TMP/one.log"; fail "1 rank"; }
if ! grep -q '^\[  PASSED  \] [1-9]' "$TMP/one.log"; then
  grep -q 'SKIPPED \]' "$TMP/one.log" || { cat "$TMP/one.log"; fail "no test passed and none skipped"; }
  # GoogleTest prints "FILE:LINE: Skipped" and the reason on the next line.
  skip "NcclComm tests need a GPU: $(grep -m1 -A1 ': Skipped$' "$TMP/one.log" | tail -1)"
fi
pass "NcclComm, 1 rank"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 0)
if [ "$gpus" -ge 2 ]; then
  HPC_TEST_TIMEOUT=120 run_mpi 2 "$bin" --gtest_color=no > "$TMP/two.log" 2>&1 || { cat "$TMP/two.log"; fail "2 ranks"; }
  pass "NcclComm, 2 ranks"
else
  # Two ranks on one GPU: the one-rank-per-GPU rule must refuse it (the tests check the message and skip).
  HPC_TEST_TIMEOUT=120 run_mpi 2 "$bin" --gtest_color=no > "$TMP/two.log" 2>&1 || { cat "$TMP/two.log"; fail "2 ranks, 1 GPU"; }
  pass "2 ranks on 1 GPU refused with a clear error"
fi
