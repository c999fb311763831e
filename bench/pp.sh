#!/usr/bin/env bash
# Pipeline parallelism (dist.pp, 1F1B) on this node's CPUs: the bubble, the
# activation memory per stage, and which grid to pick on 2 ranks.
#
#   bench/pp.sh [bubble|memory|time|all] [BUILD=build]
#
# bubble: gpt-small (context 128), pp 2 on 2 ranks, M = 2, 4, 8, 16 micro-batches
#   of 2 samples, and interleaved with 2 chunks per stage at M = 4, 8, 16: each
#   stage's waits on its neighbour against its step (the run's own "pipeline:
#   stage … waited" lines, steps after the first), against the bubble in
#   theory, (P − 1)/(V·M + P − 1).
# memory: the same model, batch 16: activations per rank at pp 1 (the whole batch
#   at once, and 8 micro-batches of 2 accumulated) and per stage at pp 2 with 8
#   micro-batches (the stage's models in flight × one micro-batch each): the
#   start-up lines' figures (the model's own count of what it keeps), not RSS.
# time: tokens/s on 2 ranks, the same global batch of 16 × 128 tokens: pp 2
#   (8 micro-batches of 2), dp 2 (8 per rank), tp 2 (16 per replica), against
#   pp 1 on 1 rank; the mean over the steps after the first 3, median of 3 rounds.
# Prints the CPU and the BLAS core first; never run by make test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
what=${1:-all}
hp="$build/hpctrain"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
[ -x "$hp" ] && [ -x "$build/hpcdata" ] || { echo "build/hpctrain or build/hpcdata is missing: make all" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/hpcdata" pack --from text /usr/share/common-licenses/GPL-3 --val-fraction 0 -o "$tmp/t.h5" > /dev/null

echo "# bench/pp.sh $what, $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$root" rev-parse --short HEAD)"
echo "CPU: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//'), $(getconf _NPROCESSORS_ONLN) cores; flags: $(grep -o -w 'avx512f\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "BLAS: $("$hp" --version 2>&1 | grep -m1 'BLAS core' || echo 'core not reported')"
echo
model=(--model.preset gpt-small --model.context 128 --optim.name adamw)
col() { grep '"loss"' "$1/metrics.jsonl" | grep -oP "\"$2\": \K[^,}]*"; }
run() {  # ranks dir args…
  local n=$1 dir=$2; shift 2
  rm -rf "$dir"
  mpirun -np "$n" --oversubscribe --bind-to none "$hp" --data.path "$tmp/t.h5" --log.progress plain \
    --log.every 1 --ckpt.keep 1 --run.dir "$dir" "${model[@]}" "$@" > "$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; exit 1; }
}
mean_tps() { col "$1" tokens_per_s | sed '1,3d' | awk '{ s += $1 } END { print s / NR }'; }
med() { printf "%s\n" "$@" | sort -g | sed -n 2p; }

if [ "$what" = bubble ] || [ "$what" = all ]; then
  echo "| gpt-small, pp 2, micro-batches of 2 × 128 | stage 0 waits ms / step ms | stage 0 bubble | stage 1 waits ms / step ms | stage 1 bubble | theory (P − 1)/(V·M + P − 1) |"
  echo "| --- | --- | --- | --- | --- | --- |"
  for run in 1:2 1:4 1:8 1:16 2:4 2:8 2:16; do
    v=${run%%:*} m=${run#*:}
    run 2 "$tmp/b$v-$m" --train.batch_size $((2 * m)) --train.micro_batches "$m" --train.steps 12 --dist.pp 2 \
      --dist.pp_virtual "$v"
    row="| M = $m$([ "$v" = 1 ] || echo ", interleaved V = $v") |"
    for s in 0 1; do
      line=$(grep "^pipeline: stage $s " "$tmp/b$v-$m.log")
      row+=" $(grep -oP 'waited \K[0-9.]+ of its [0-9.]+' <<< "$line" | sed 's/ of its / \/ /') | $(grep -oP '\(\K[0-9.]+%' <<< "$line") |"
    done
    echo "$row $(awk -v m="$m" -v v="$v" 'BEGIN { printf "%.1f%%", 100 / (v * m + 1) }') |"
  done
  echo
fi

if [ "$what" = memory ] || [ "$what" = all ]; then
  run 1 "$tmp/m1" --train.batch_size 16 --train.steps 1
  run 1 "$tmp/m1m" --train.batch_size 16 --train.micro_batches 8 --train.steps 1
  run 2 "$tmp/m2" --train.batch_size 16 --train.micro_batches 8 --train.steps 1 --dist.pp 2
  echo "| gpt-small, batch 16 × 128 | activations MiB per rank |"
  echo "| --- | --- |"
  echo "| pp 1, the whole batch at once | $(grep -m1 -oP '^activations: \K[0-9.]+' "$tmp/m1.log") |"
  echo "| pp 1, 8 micro-batches of 2 accumulated | $(grep -m1 -oP '^activations: \K[0-9.]+' "$tmp/m1m.log") |"
  for s in 0 1; do
    l=$(grep -P "^ +rank +$s .*stage" "$tmp/m2.log")
    echo "| pp 2, 8 micro-batches of 2: stage $s ($(grep -oP 'layers [^,]+' <<< "$l"), $(grep -oP '[0-9]+(?= in flight)' <<< "$l") in flight) | $(grep -oP 'activations \K[0-9.]+' <<< "$l") |"
  done
  echo
fi

if [ "$what" = time ] || [ "$what" = all ]; then
  declare -A r=()
  for round in 1 2 3; do
    run 1 "$tmp/p1" --train.batch_size 16 --train.steps 10
    run 2 "$tmp/pp2" --train.batch_size 16 --train.micro_batches 8 --train.steps 10 --dist.pp 2
    run 2 "$tmp/dp2" --train.batch_size 8 --train.steps 10
    run 2 "$tmp/tp2" --train.batch_size 16 --train.steps 10 --dist.tp 2
    for k in p1 pp2 dp2 tp2; do r[$k,$round]=$(mean_tps "$tmp/$k"); done
  done
  echo "| gpt-small, 16 × 128 tokens per step | tokens/s | against 1 rank |"
  echo "| --- | --- | --- |"
  base=$(med "${r[p1,1]}" "${r[p1,2]}" "${r[p1,3]}")
  for k in p1:"1 rank (pp 1)" pp2:"pp 2 (8 micro-batches of 2)" dp2:"dp 2 (8 per rank)" tp2:"tp 2"; do
    v=$(med "${r[${k%%:*},1]}" "${r[${k%%:*},2]}" "${r[${k%%:*},3]}")
    printf "| %s | %.0f | %.2f |\n" "${k#*:}" "$v" "$(awk -v a="$v" -v b="$base" 'BEGIN { print a / b }')"
  done
  echo
fi
