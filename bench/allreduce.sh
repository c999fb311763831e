#!/usr/bin/env bash
# The AllReduce table (bench_allreduce) on 2 and 4 ranks of this node: hpctrain's
# communicator against raw MPI_Allreduce, 4 KiB … 64 MiB. Ranks are bound to a
# core each when there are enough cores (else --bind-to none: then the ranks
# share cores and the numbers say more about scheduling than about algorithms).
#
#   bench/allreduce.sh [--quick] [BUILD=build]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$build/bench/bench_allreduce" ] || { echo "build/bench/bench_allreduce is missing: make all" >&2; exit 2; }
for n in 2 4; do
  bind=core
  [ "$n" -le "$(nproc)" ] || bind=none
  echo "## $n ranks (--bind-to $bind)"
  timeout 1800 mpirun -np "$n" --oversubscribe --bind-to "$bind" "$build/bench/bench_allreduce" "$@"
  echo
done
