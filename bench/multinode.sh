#!/usr/bin/env bash
# Two nodes over a network, on one machine: the namespace test cluster
# (tests/cluster/netns-cluster.bash, one rank per node, Open MPI over TCP on
# the link), with 0, 1 and 5 ms added to every packet node-b sends.
#   1. AllReduce busbw across the two nodes, hpctrain's allreduce against raw
#      MPI_Allreduce on the same link (bench_allreduce --quick: 1, 2, 4 MiB,
#      median of 3 rounds).
#   2. A training step's exposed communication (comm_ms: the wait for the
#      gradients after backward) with dist.overlap true and false: an MLP
#      (784-1024-1024-1024-10, 11 MiB of gradients; --dist.bucket_mb 2 cut at
#      tensor boundaries gives 3 buckets of 4.0, 4.0 and 3.1 MiB) on the
#      MNIST sample, 30 steps, the first 10 left out.
# Without netem the delay is a userspace forwarder (tests/cluster/linkdelay),
# which also caps the delayed direction at roughly 400 MB/s on 2 busy cores:
# with any delay, comm without overlap is then about the same at 1 and 5 ms.
# Measured on 2 quiet cores (exposed comm_ms, no overlap / overlap):
#   before buckets went all at once in eager-sized pieces across nodes:
#     0 ms 12.8 / 8.4, 1 ms 46.9 / 53.1, 5 ms 85.4 / 58.1
#   after: 0 ms 12.1 / 0.5, 1 ms 29.7 / 16.6, 5 ms 29.7 / 11.5
# With overlap, compute_ms grows by about what comm_ms loses (21 → 31-42 ms):
# 2 cores run 2 ranks, their progress threads, TCP and the forwarder, so the
# communication's CPU work is moved into backward rather than removed.
# Writes the table to stdout and to $BUILD/bench-multinode.md. Needs root and
# Slurm like the multinode tests; not part of `make test` (about 5 minutes on 2 busy cores).
#
#   bench/multinode.sh [BUILD_DIR]     (default build; needs BUILD/hpctrain,
#                                       BUILD/bench/bench_allreduce, and BUILD/hpcdata
#                                       unless BUILD/testdata/mnist.h5 exists)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
source "$ROOT/tests/cluster/netns-cluster.bash"
for b in hpctrain bench/bench_allreduce; do
  [ -x "$BUILD/$b" ] || { echo "$BUILD/$b is missing: make BUILD=$BUILD $BUILD/$b" >&2; exit 2; }
done
why=$(cluster_check_available) || { echo "cannot build the test cluster: $why" >&2; exit 2; }
data=$BUILD/testdata/mnist.h5
if [ ! -f "$data" ]; then
  mkdir -p "$BUILD/testdata"
  "$ROOT/data_tools/fetch-mnist-sample" "$BUILD/testdata/mnist-idx" >&2
  "$BUILD/hpcdata" pack --from mnist-idx "$BUILD/testdata/mnist-idx" -o "$data" --force >&2
fi
WORK=$(mktemp -d "$BUILD/bench-multinode.XXXXXX")
trap 'cluster_stop; rm -rf "$WORK"' EXIT
trap 'exit 1' INT TERM
cluster_start "$WORK/cluster" >&2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=$CLUSTER_IF OMPI_MCA_oob_tcp_if_include=$CLUSTER_IF
launch=(nsenter --net="/run/netns/$CLUSTER_NS_A" srun -N 2 --ntasks-per-node=1 -c 2 --mpi=pmix)
cd "$WORK"

# busbw (GB/s) at SIZE from bench_allreduce's table for SERIES.
busbw() { awk -v s="$2" -v size="$3" '/^# series: / {cur = $3} cur == s && $1 == size {print $7}' "$1"; }
# Mean of KEY over the training records after step 10.
mean() {
  /usr/bin/python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l]
v = [r[sys.argv[2]] for r in rows if r["step"] > 10]
print("%.1f" % (sum(v) / len(v)))' "$1/metrics.jsonl" "$2"
}

rows=()
for ms in 0 1 5; do
  cluster_delay b "$ms" >&2
  echo "== node-b's packets +$ms ms" >&2
  timeout 600 "${launch[@]}" "$BUILD/bench/bench_allreduce" --quick --min 1048576 >"ar-$ms.txt"
  row="| $ms ms"
  for size in 1048576 4194304; do
    row+=" | $(busbw "ar-$ms.txt" MPI_Allreduce $size) | $(busbw "ar-$ms.txt" hpctrain-allreduce $size)"
  done
  for overlap in false true; do
    timeout 600 "${launch[@]}" "$BUILD/hpctrain" --data.path "$data" --model.preset mlp \
      --model.hidden 1024,1024,1024 --train.steps 30 --train.batch_size 64 --dist.bucket_mb 2 \
      --dist.overlap "$overlap" --log.every 1 --log.progress plain --ckpt.every_steps 0 \
      --run.dir "$WORK/train-$ms-$overlap" >"train-$ms-$overlap.log" 2>&1 ||
      { tail -20 "train-$ms-$overlap.log" >&2; exit 1; }
    row+=" | $(mean "$WORK/train-$ms-$overlap" compute_ms) | $(mean "$WORK/train-$ms-$overlap" comm_ms)"
  done
  rows+=("$row |")
done
cluster_delay b 0 >&2

{
  echo "# Two nodes (network namespaces, veth, Open MPI TCP), 1 rank per node, $(nproc) CPUs shared"
  echo
  echo "AllReduce busbw in GB/s (float32 sum; bench_allreduce, median of 3 rounds) and a training step's"
  echo "compute and exposed communication in ms (comm_ms: waiting for gradients after backward; mean of"
  echo "steps 11-30), with the delay added to every packet node-b sends."
  echo
  echo "| delay | MPI 1 MiB | hpctrain 1 MiB | MPI 4 MiB | hpctrain 4 MiB | compute (no overlap) | comm (no overlap) | compute (overlap) | comm (overlap) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} | tee "$BUILD/bench-multinode.md"
