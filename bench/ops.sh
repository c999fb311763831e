#!/usr/bin/env bash
# bench/ops.sh [BUILD]: what operating features cost, measured in one run on
# this machine (never part of `make test`):
#   1. the step-time stall a checkpoint causes, synchronous (--ckpt.async
#      false) vs asynchronous (the default), for gpt-small and a
#      gpt2-124m-shaped model (context 64 to keep CPU steps short) on 1 rank:
#      stall per checkpoint = (wall time with K periodic checkpoints − wall
#      time without) / K, against the synchronous write time the trainer
#      logs; target: async stall ≤ 10% of the sync write time;
#   2. the timeline's overhead (--log.trace on every step vs off), mlp and
#      gpt-small, 2 ranks: throughput from metrics.jsonl (first window left out).
# Prints the CPU model and flags, and the BLAS core (OPENBLAS_VERBOSE=2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ops-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
hp="$build/hpctrain"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE '\b(avx2|avx512f|fma|avx512_bf16|amx_tile)\b' | sort -u | tr '\n' ' ')"
echo "blas: $(OPENBLAS_VERBOSE=2 "$hp" --version 2>&1 | grep -i 'core' | head -1 || echo unknown)"

cat "$root"/README.md "$root"/docs/*.md >"$tmp/text.txt"
"$build/hpcdata" pack --from text "$tmp/text.txt" -o "$tmp/text.h5" >/dev/null
data_mnist="$build/testdata/mnist.h5"
[ -f "$data_mnist" ] || { echo "needs $data_mnist (run tests/e2e/train_mnist.sh once)"; exit 1; }

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }
run_timed() {  # run_timed LOG args…: prints the wall seconds
  local log=$1 t0 t1
  shift
  t0=$(date +%s%N)
  "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  t1=$(date +%s%N)
  secs "$t0" "$t1"
}

echo
echo "## checkpoint stall (1 rank)"
printf '%-12s %7s %5s %10s %10s %10s %12s %12s %8s\n' model params ckpts "none s" "sync s" "async s" "sync write" "async stall" "ratio"
for spec in "gpt-small 40 10" "gpt2-124m 4 2"; do
  read -r preset steps every <<<"$spec"
  extra=(--model.preset "$preset" --train.batch_size 4 --train.steps "$steps" --data.path "$tmp/text.h5"
         --log.every 1000 --log.progress plain)
  [ "$preset" = gpt2-124m ] && extra+=(--model.context 64 --train.batch_size 1)
  k=$(( (steps - 1) / every ))
  t_none=$(run_timed "$tmp/none.log" "$hp" "${extra[@]}" --run.dir "$tmp/none")
  t_sync=$(run_timed "$tmp/sync.log" "$hp" "${extra[@]}" --run.dir "$tmp/sync" --ckpt.every_steps "$every" --ckpt.async false)
  t_async=$(run_timed "$tmp/async.log" "$hp" "${extra[@]}" --run.dir "$tmp/async" --ckpt.every_steps "$every")
  params=$(grep -oP 'total parameters: \K[0-9]+' "$tmp/none.log" | awk '{ printf "%.1fM", $1 / 1e6 }')
  write=$(grep -oP '^checkpoint: .*every [0-9]+ steps, [0-9.]+ [kMG]B, \K[0-9.]+(?= s\))' "$tmp/sync.log" |
          awk '{ s += $1; n++ } END { printf "%.3f", n ? s / n : 0 }')
  "$python" - "$preset" "$params" "$k" "$t_none" "$t_sync" "$t_async" "$write" <<'PY'
import sys
preset, params, k, none, sync, asy, write = sys.argv[1], sys.argv[2], int(sys.argv[3]), *map(float, sys.argv[4:])
stall_sync = (sync - none) / k
stall_async = max(0.0, (asy - none) / k)
print(f"{preset:<12} {params:>7} {k:5d} {none:10.2f} {sync:10.2f} {asy:10.2f} "
      f"{write:10.3f} s {stall_async:10.3f} s {stall_async / write if write else float('nan'):8.3f}"
      f"   (sync stall {stall_sync:.3f} s per checkpoint)")
PY
  rm -rf "$tmp/none" "$tmp/sync" "$tmp/async"
done

echo
echo "## trace overhead (2 ranks, every step traced)"
printf '%-10s %14s %14s %8s\n' model "off items/s" "on items/s" "on/off"
for spec in "mlp 300 $data_mnist" "gpt-small 40 $tmp/text.h5"; do
  read -r preset steps data <<<"$spec"
  base=(--model.preset "$preset" --train.steps "$steps" --data.path "$data" --log.every 5 --log.progress plain
        --train.batch_size 8)
  for mode in off on; do
    extra=()
    [ $mode = on ] && extra=(--log.trace "$tmp/trace.json" --log.trace_steps "1:$steps")
    mpirun -np 2 --oversubscribe --bind-to none "$hp" "${base[@]}" "${extra[@]}" --run.dir "$tmp/t-$mode" >"$tmp/t-$mode.log" 2>&1 ||
      { cat "$tmp/t-$mode.log"; exit 1; }
  done
  "$python" - "$preset" "$tmp/t-off/metrics.jsonl" "$tmp/t-on/metrics.jsonl" <<'PY'
import json, sys
def rate(p):
    rows = [json.loads(l) for l in open(p) if '"samples_per_s"' in l]
    rows = rows[1:]  # the first window holds start-up
    return sum(r["samples_per_s"] for r in rows) / len(rows)
off, on = rate(sys.argv[2]), rate(sys.argv[3])
print(f"{sys.argv[1]:<10} {off:14.1f} {on:14.1f} {on / off:8.3f}")
PY
  rm -rf "$tmp/t-off" "$tmp/t-on"
done
