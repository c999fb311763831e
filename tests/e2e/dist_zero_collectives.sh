#!/usr/bin/env bash
# ctest-timeout: 240
# ZeRO's sharded collectives on real ranks (tests/mpi/test_dist_shards.cpp):
# the reduce-scatter leaves bitwise the allreduce's values in each rank's
# shard for any boundaries and bucketing, the all-gather copies exactly.
# 2, 3, 4 and 10 ranks: uneven and empty shards, more peers than receive slots;
# dist.reduce native (the library's MPI_Iallreduce / MPI_Ireduce_scatter) to rounding.
# ShardedParams (tests/mpi/test_sharded_params.cpp) on 2 and 3 ranks: stage 3
# and stage 2's staged gradients train the replicated bits.
# Checkpoints written from shards (tests/mpi/test_ckpt_stream.cpp) on 2, 3, 4
# ranks: the bits of a whole-tensor write; a failed write still drains.
source "$(dirname "$0")/lib.bash"
run() {
  local prog=$1; shift
  [ -x "$BUILD/tests/mpi/$prog" ] || fail "$BUILD/tests/mpi/$prog is missing (make all builds it)"
  for n in "$@"; do
    HPC_TEST_TIMEOUT=120 run_mpi "$n" "$BUILD/tests/mpi/$prog" --gtest_color=no > "$TMP/$prog.$n.log" 2>&1 \
      || { cat "$TMP/$prog.$n.log"; fail "$prog on $n ranks"; }
    pass "$prog on $n ranks: $(grep -m1 -oP '^\[  PASSED  \] \K.*' "$TMP/$prog.$n.log")"
  done
}
run test_dist_shards 2 3 4 10
run test_sharded_params 2 3
run test_ckpt_stream 2 3 4
