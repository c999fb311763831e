#!/usr/bin/env bash
# ctest-timeout: 240
# The parallel grid on real ranks (tests/mpi/test_dist_grid.cpp): every group's
# communicator reaches exactly its members in rank order, numbers its own
# collectives and names its group in the flight record; messages arrive in
# order and whole (posted early, above the MPI count limit); a receive whose
# send never comes is a PeerError naming the peer and the group. 2 and 4 ranks.
source "$(dirname "$0")/lib.bash"
prog=test_dist_grid
[ -x "$BUILD/tests/mpi/$prog" ] || fail "$BUILD/tests/mpi/$prog is missing (make all builds it)"
for n in 2 4; do
  HPC_TEST_TIMEOUT=120 run_mpi "$n" "$BUILD/tests/mpi/$prog" --gtest_color=no > "$TMP/$prog.$n.log" 2>&1 \
    || { cat "$TMP/$prog.$n.log"; fail "$prog on $n ranks"; }
  pass "$prog on $n ranks: $(grep -m1 -oP '^\[  PASSED  \] \K.*' "$TMP/$prog.$n.log")"
done
