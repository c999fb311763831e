#!/usr/bin/env bash
# ctest-timeout: 300
# The MPI test programs on real ranks: the communicator and the bucketed
# reducer (2, 3, 4 and 10 ranks: an odd world size exercises uneven chunks
# and an inexact 1/3; 10 ranks have more peers than the allreduce buffers at
# once, so its receive slots are reused), and data-parallel equivalence with
# 1 rank (2 and 4).
# Each run has a timeout; a test that fails on any rank fails the program.
source "$(dirname "$0")/lib.bash"
for prog in test_dist_collectives test_dist_equivalence; do
  [ -x "$BUILD/tests/mpi/$prog" ] || fail "$BUILD/tests/mpi/$prog is missing (make all builds it)"
done
run() {
  local n=$1 prog=$2
  HPC_TEST_TIMEOUT=120 run_mpi "$n" "$BUILD/tests/mpi/$prog" --gtest_color=no > "$TMP/$prog.$n.log" 2>&1 \
    || { cat "$TMP/$prog.$n.log"; fail "$prog on $n ranks"; }
  grep -E '^  [0-9]+ ranks vs 1' "$TMP/$prog.$n.log" || true
  pass "$prog on $n ranks: $(grep -m1 -oP '^\[  PASSED  \] \K.*' "$TMP/$prog.$n.log")"
}
for n in 2 3 4 10; do run "$n" test_dist_collectives; done
for n in 2 4; do run "$n" test_dist_equivalence; done
