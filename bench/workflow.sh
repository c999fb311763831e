#!/usr/bin/env bash
# bench/workflow.sh [BUILD] [STEPS]: issue 18's figures, on the MNIST sample.
#  1. data.augment "flip, crop:4" against none while hpctrain trains the cnn
#     and resnet20 presets on 1 and 2 ranks (batch 64 per rank): training
#     samples/s and the data wait as a share of the step, from the trainer's
#     own metrics.jsonl (data_ms, compute_ms, comm_ms; the first logging
#     window — start-up, first touch — left out). Target: wait < 2%.
#  2. hpctrain eval of the resulting checkpoints on 1 and 2 ranks (2000
#     validation samples): samples/s, against the same run's training
#     samples/s (forward + backward + update) measured above.
# Prints the CPU model and flags and OpenBLAS's core (OPENBLAS_VERBOSE=2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${2:-60}
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/workflow-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
data="$build/testdata/mnist.h5"
if [ ! -f "$data" ]; then
  "$root/data_tools/fetch-mnist-sample" "$tmp/idx" >&2
  "$build/hpcdata" pack --from mnist-idx "$tmp/idx" -o "$tmp/mnist.h5" > /dev/null
  data="$tmp/mnist.h5"
fi
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores;" \
     "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE 'avx2|avx512f|fma' | sort -u | tr '\n' ' ')"
echo "# blas: $( (OPENBLAS_VERBOSE=2 "$build/hpctrain" --version 2>&1 || true) | grep -m1 -i 'core')"
printf "# %-9s %5s %-13s %10s %8s %10s %8s\n" preset ranks augment samples/s data_ms step_ms "wait %"
for preset in cnn resnet20; do
  n=$steps; [ $preset = resnet20 ] && n=$((steps / 3))
  for ranks in 1 2; do
    for aug in none "flip, crop:4"; do
      dir="$tmp/$preset-$ranks-${aug//[ ,:]/}"
      mpirun -np $ranks --oversubscribe --bind-to none "$build/hpctrain" --data.path "$data" --model.preset $preset \
        --train.steps "$n" --train.batch_size 64 --log.every $((n / 4)) --log.progress none --data.augment "$aug" \
        --run.dir "$dir" > "$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
      "$python" - "$dir/metrics.jsonl" "$preset" "$ranks" "$aug" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"data_ms"' in l][1:]
d = sum(r["data_ms"] for r in rows) / len(rows)
step = sum(r["data_ms"] + r["compute_ms"] + r["comm_ms"] for r in rows) / len(rows)
sps = sum(r["samples_per_s"] for r in rows) / len(rows)
print(f"  {sys.argv[2]:<9} {sys.argv[3]:>5} {sys.argv[4]:<13} {sps:10.1f} {d:8.3f} {step:10.2f} {100 * d / step:8.2f}")
PY
    done
  done
done
printf "# %-9s %5s %12s %16s %8s\n" preset ranks "eval samp/s" "train samp/s" ratio
for preset in cnn resnet20; do
  for ranks in 1 2; do
    dir="$tmp/$preset-$ranks-none"
    ckpt=$(ls "$dir"/ckpt-*.h5 | tail -1)
    mpirun -np $ranks --oversubscribe --bind-to none "$build/hpctrain" eval --checkpoint "$ckpt" --data.path "$data" \
      --out "$tmp/e.json" > "$tmp/elog" 2>&1 || { cat "$tmp/elog"; exit 1; }
    "$python" - "$tmp/e.json" "$dir/metrics.jsonl" "$preset" "$ranks" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))
rows = [json.loads(l) for l in open(sys.argv[2]) if '"data_ms"' in l][1:]
train = sum(r["samples_per_s"] for r in rows) / len(rows)
ev = e["count"] / e["seconds"]
print(f"  {sys.argv[3]:<9} {sys.argv[4]:>5} {ev:12.1f} {train:16.1f} {ev / train:8.2f}")
PY
  done
done
