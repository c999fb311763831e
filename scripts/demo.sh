#!/usr/bin/env bash
# make demo: prepare the MNIST sample as HDF5 and train the cnn preset on 2 MPI ranks.
#   scripts/demo.sh DEMO_DIR     (make demo passes build/demo)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build/demo}
build=${BUILD:-$root/build}
mkdir -p "$dir"

echo "== data: MNIST sample -> $dir/mnist.h5"
"$root/data_tools/fetch-mnist-sample" "$dir/mnist-idx"
"$build/hpcdata" pack --from mnist-idx "$dir/mnist-idx" -o "$dir/mnist.h5" --force

echo "== training: cnn preset, 2 MPI ranks x batch 32, 3 epochs"
launcher=(mpirun -np 2 --oversubscribe --bind-to none)
# Open MPI refuses to run as root unless told that this is intended (containers, CI).
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
rm -rf "$dir/run"
"${launcher[@]}" "$build/hpctrain" train --data.path "$dir/mnist.h5" --model.preset cnn \
  --train.batch_size 32 --train.epochs 3 --optim.name adam --optim.lr 1e-3 --optim.schedule cosine \
  --log.every 50 --run.dir "$dir/run"
echo "== metrics: $dir/run/metrics.jsonl, configuration: $dir/run/config.ini"
