#!/usr/bin/env bash
# bench/ops.sh [BUILD]: what operating features cost, measured in one run on
# this machine (never part of `make test`):
#   1. the step-time stall a checkpoint causes, synchronous (--ckpt.async
#      false) vs asynchronous (the default), for gpt-small and a
#      gpt2-124m-shaped model (context 64 to keep CPU steps short) on 1 rank,
#      as the trainer measures it at the step boundary (the sync save's
#      time; the async snapshot's "training stalled" time), plus the wall
#      time of each whole run; target: async stall ≤ 10% of the sync write;
#   2. the timeline's overhead (--log.trace on every step vs off), mlp and
#      gpt-small, 2 ranks: throughput from metrics.jsonl (first window left out).
# OPS_BENCH=ckpt or trace runs one part. Prints the CPU model and flags, and the BLAS core
# (OPENBLAS_VERBOSE=2).
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

only=${OPS_BENCH:-all}  # all | ckpt | trace
if [ "$only" != trace ]; then
echo
echo "## checkpoint stall (1 rank)"
# The stall is what the trainer measures at the step boundary: for a synchronous save the whole
# save (gather, snapshot, write, prune), for an asynchronous one the gather and the snapshot
# ("training stalled X s" in its line). Wall times of the whole runs are printed beside them.
printf '%-10s %7s %5s %9s %9s %9s %12s %12s %12s %7s\n' model params ckpts "none s" "sync s" "async s" \
  "sync stall" "async stall" "async write" "ratio"
for spec in "gpt-small 40 10 4" "gpt2-124m 5 2 1"; do
  read -r preset steps every batch <<<"$spec"
  extra=(--model.preset "$preset" --train.batch_size "$batch" --train.steps "$steps" --data.path "$tmp/text.h5"
         --log.every 1000 --log.progress plain)
  [ "$preset" = gpt2-124m ] && extra+=(--model.context 64)
  t_none=$(run_timed "$tmp/none.log" "$hp" "${extra[@]}" --run.dir "$tmp/none")
  t_sync=$(run_timed "$tmp/sync.log" "$hp" "${extra[@]}" --run.dir "$tmp/sync" --ckpt.every_steps "$every" --ckpt.async false)
  t_async=$(run_timed "$tmp/async.log" "$hp" "${extra[@]}" --run.dir "$tmp/async" --ckpt.every_steps "$every")
  params=$(grep -oP 'total parameters: \K[0-9]+' "$tmp/none.log" | awk '{ printf "%.1fM", $1 / 1e6 }')
  mean() { awk '{ s += $1; n++ } END { printf "%.4f %d\n", n ? s / n : 0, n }'; }
  read -r sync_stall k < <(grep -oP '^checkpoint: .*every [0-9]+ steps, [0-9.]+ [kMG]B, \K[0-9.]+(?= s\))' "$tmp/sync.log" | mean)
  read -r async_stall _ < <(grep -oP 'training stalled \K[0-9.]+(?= s\))' "$tmp/async.log" | mean)
  read -r async_write _ < <(grep -oP ', \K[0-9.]+(?= s in the background)' "$tmp/async.log" | mean)
  waited=$({ grep -oP '^checkpoint: waited \K[0-9.]+' "$tmp/async.log" || true; } | awk '{ s += $1 } END { printf "%.2f", s }')
  awk -v m="$preset" -v p="$params" -v k="$k" -v a="$t_none" -v b="$t_sync" -v c="$t_async" -v ss="$sync_stall" \
      -v st="$async_stall" -v wr="$async_write" -v w="$waited" 'BEGIN {
    printf "%-10s %7s %5d %9.2f %9.2f %9.2f %10.3f s %10.4f s %10.3f s %7.4f   (waits for a write in flight: %s s)\n",
           m, p, k, a, b, c, ss, st, wr, (ss > 0 ? st / ss : 0), w }'
  rm -rf "$tmp/none" "$tmp/sync" "$tmp/async"
done

fi
[ "$only" = ckpt ] && exit 0
echo
echo "## trace overhead (2 ranks, every step traced)"
printf '%-10s %14s %14s %8s\n' model "off items/s" "on items/s" "on/off"
for spec in "mlp 300 $data_mnist" "gpt-small 40 $tmp/text.h5"; do
  read -r preset steps data <<<"$spec"
  base=(--model.preset "$preset" --train.steps "$steps" --data.path "$data" --log.every 5 --log.progress plain
        --train.batch_size 8)
  for mode in off on off2 on2; do
    extra=()
    [ "${mode%2}" = on ] && extra=(--log.trace "$tmp/trace.json" --log.trace_steps "1:$steps")
    mpirun -np 2 --oversubscribe --bind-to none "$hp" "${base[@]}" "${extra[@]}" --run.dir "$tmp/t-$mode" >"$tmp/t-$mode.log" 2>&1 ||
      { cat "$tmp/t-$mode.log"; exit 1; }
  done
  "$python" - "$preset" "$tmp"/t-{off,on,off2,on2}/metrics.jsonl <<'PY'
import json, sys
def rate(p):
    rows = [json.loads(l) for l in open(p) if '"samples_per_s"' in l]
    rows = rows[1:]  # the first window holds start-up
    return sum(r["samples_per_s"] for r in rows) / len(rows)
off1, on1, off2, on2 = (rate(p) for p in sys.argv[2:])
off, on = (off1 + off2) / 2, (on1 + on2) / 2
print(f"{sys.argv[1]:<10} {off:14.1f} {on:14.1f} {on / off:8.3f}   (runs off {off1:.1f} / {off2:.1f}, on {on1:.1f} / {on2:.1f})")
PY
  rm -rf "$tmp"/t-*
done
