#!/usr/bin/env bash
# bench/loader_wait.sh [BUILD] [STEPS]: the data wait as a share of the step
# time while hpctrain trains the mlp and cnn presets on the MNIST sample, from
# the trainer's own numbers (metrics.jsonl: data_ms, compute_ms, comm_ms per
# step), for the memory-mapped file and for a chunked + gzip copy (the
# H5Dread fallback). The first logging window (start-up, first touch) is left
# out. Target: data wait < 2% of the step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${2:-300}
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loader-wait.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

data="$build/testdata/mnist.h5"
if [ ! -f "$data" ]; then
  "$root/data_tools/fetch-mnist-sample" "$tmp/idx" >&2
  "$build/hpcdata" pack --from mnist-idx "$tmp/idx" -o "$tmp/mnist.h5" > /dev/null
  data="$tmp/mnist.h5"
fi
"$python" - "$data" "$tmp/chunked.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f, h5py.File(sys.argv[2], "w") as g:
    for split in f:
        for k in ("x", "y"):
            d = f[split][k]
            g.create_dataset(f"{split}/{k}", data=d[:], chunks=(100,) + d.shape[1:], compression="gzip").attrs.update(d.attrs)
PY

printf "# %-5s %-9s %7s %10s %10s %10s %8s\n" preset file workers data_ms compute_ms step_ms "wait %"
for preset in mlp cnn; do
  for file in mapped chunked; do
    path=$data; [ $file = chunked ] && path="$tmp/chunked.h5"
    "$build/hpctrain" --data.path "$path" --model.preset $preset --train.steps "$steps" \
      --train.batch_size 64 --log.every 25 --log.progress none --run.dir "$tmp/$preset-$file" > "$tmp/log" 2>&1 ||
      { cat "$tmp/log"; exit 1; }
    "$python" - "$tmp/$preset-$file/metrics.jsonl" "$preset" "$file" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"data_ms"' in l][1:]
n = len(rows)
data = sum(r["data_ms"] for r in rows) / n
comp = sum(r["compute_ms"] for r in rows) / n
comm = sum(r["comm_ms"] for r in rows) / n
step = data + comp + comm
print(f"  {sys.argv[2]:<5} {sys.argv[3]:<9} {2:>7} {data:>10.3f} {comp:>10.2f} {step:>10.2f} {100 * data / step:>7.2f}%")
PY
  done
done
