#!/usr/bin/env bash
# Tensor parallelism (dist.tp) on this node's CPUs: throughput against tp 1,
# the tp group's traffic against the theory, and memory per rank.
#
#   bench/tp.sh [time|memory|all] [BUILD=build]
#
# time: for gpt-small, llama-small (context 128, batch 8) and gpt2-124m shapes
#   (context 64, batch 2), interleaved, 3 rounds: tp 1 on 1 rank, tp 2 on 2
#   ranks (the same batch: one replica split over two cores) and dp 2 on 2
#   ranks (half the batch each, the same global batch). tokens/s is the mean
#   over the steps after the first 5 (metrics.jsonl), the median over rounds;
#   the ratio tp 2 / tp 1 is what splitting one model over two cores buys
#   (2 would be perfect; the issue's target is 1.6). The tp group's traffic is
#   the run's own count ("tensor parallel:" line: elements per rank per step and
#   the time spent in those collectives), against the theory for Megatron's
#   scheme, 4 all-reduces of batch × context × width per block plus the
#   embedding's and the head's (one each way): (4·L + 2)·b·T·C elements.
# memory: gpt-small, batch 8, tp 1, 2 and 4 (4 ranks oversubscribed: memory
#   only): the start-up lines' parameters, gradients, optimizer state and
#   activations per rank, against 1/tp of the unsplit figures.
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

echo "# bench/tp.sh $what, $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$root" rev-parse --short HEAD)"
echo "CPU: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//'), $(getconf _NPROCESSORS_ONLN) cores; flags: $(grep -o -w 'avx512f\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "BLAS: $("$hp" --version 2>&1 | grep -m1 'BLAS core' || echo 'core not reported')"
echo
col() { grep '"loss"' "$1/metrics.jsonl" | grep -oP "\"$2\": \K[^,}]*"; }
run() {  # ranks dir args…
  local n=$1 dir=$2; shift 2
  rm -rf "$dir"
  mpirun -np "$n" --oversubscribe --bind-to none "$hp" --data.path "$tmp/t.h5" --log.progress plain \
    --log.every 1 --ckpt.keep 1 --run.dir "$dir" "$@" > "$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; exit 1; }
}
mean_tps() { col "$1" tokens_per_s | sed '1,5d' | awk '{ s += $1 } END { print s / NR }'; }
med() { printf "%s\n" "$@" | sort -g | sed -n 2p; }

if [ "$what" = time ] || [ "$what" = all ]; then
  echo "| model (b × T) | tp 1, 1 rank tokens/s | tp 2, 2 ranks tokens/s | tp 2 / tp 1 | dp 2, 2 ranks tokens/s | dp 2 / tp 1 | tp traffic M elements/step (theory) | ms/step in tp collectives | step ms (tp 2) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  # name | preset options | batch | layers width context
  for m in "gpt-small|--model.preset gpt-small --model.context 128|8|4 256 128" \
           "llama-small|--model.preset llama-small --model.context 128|8|4 256 128" \
           "gpt2-124m shapes|--model.preset gpt2-124m --model.context 64|2|12 768 64"; do
    IFS='|' read -r name opts b shape <<< "$m"
    read -r L C T <<< "$shape"
    steps=$([ "$name" = "gpt2-124m shapes" ] && echo 10 || echo 20)
    declare -A r=()
    for round in 1 2 3; do
      # shellcheck disable=SC2086
      run 1 "$tmp/tp1" $opts --optim.name adamw --train.batch_size "$b" --train.steps "$steps"
      # shellcheck disable=SC2086
      run 2 "$tmp/tp2" $opts --optim.name adamw --train.batch_size "$b" --train.steps "$steps" --dist.tp 2
      # shellcheck disable=SC2086
      run 2 "$tmp/dp2" $opts --optim.name adamw --train.batch_size $((b / 2)) --train.steps "$steps"
      r[tp1,$round]=$(mean_tps "$tmp/tp1")
      r[tp2,$round]=$(mean_tps "$tmp/tp2")
      r[dp2,$round]=$(mean_tps "$tmp/dp2")
      line=$(grep "^tensor parallel: .* per step" "$tmp/tp2.log")
      r[el,$round]=$(grep -oP '[0-9.]+(?= M elements)' <<< "$line")
      r[ms,$round]=$(grep -oP '[0-9.]+(?= ms per step in them)' <<< "$line")
      r[step,$round]=$(paste <(col "$tmp/tp2" data_ms) <(col "$tmp/tp2" compute_ms) <(col "$tmp/tp2" comm_ms) |
        sed '1,5d' | awk '{ s += $1 + $2 + $3 } END { print s / NR }')
    done
    tp1=$(med "${r[tp1,1]}" "${r[tp1,2]}" "${r[tp1,3]}")
    tp2=$(med "${r[tp2,1]}" "${r[tp2,2]}" "${r[tp2,3]}")
    dp2=$(med "${r[dp2,1]}" "${r[dp2,2]}" "${r[dp2,3]}")
    theory=$(awk -v L="$L" -v b="$b" -v T="$T" -v C="$C" 'BEGIN { print (4 * L + 2) * b * T * C / 1e6 }')
    printf "| %s (%d × %d) | %.0f | %.0f | %.2f | %.0f | %.2f | %.2f (%.2f) | %.1f | %.1f |\n" "$name" "$b" "$T" \
      "$tp1" "$tp2" "$(awk -v a="$tp2" -v b="$tp1" 'BEGIN { print a / b }')" \
      "$dp2" "$(awk -v a="$dp2" -v b="$tp1" 'BEGIN { print a / b }')" \
      "$(med "${r[el,1]}" "${r[el,2]}" "${r[el,3]}")" "$theory" \
      "$(med "${r[ms,1]}" "${r[ms,2]}" "${r[ms,3]}")" "$(med "${r[step,1]}" "${r[step,2]}" "${r[step,3]}")"
    unset r
  done
  echo
fi

if [ "$what" = memory ] || [ "$what" = all ]; then
  echo "| gpt-small, batch 8 × 128 | tp | parameters MiB | gradients MiB | optimizer state MiB | activations MiB | parameters / tp 1 |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  base=""
  for t in 1 2 4; do
    run "$t" "$tmp/m$t" --model.preset gpt-small --model.context 128 --optim.name adamw --train.batch_size 8 \
      --train.steps 1 --dist.tp "$t"
    mem=$(grep -m1 "^memory per rank:" "$tmp/m$t.log")
    p=$(grep -oP 'parameters \K[0-9.]+' <<< "$mem")
    [ -n "$base" ] || base=$p
    printf "| | %d | %s | %s | %s | %s | %.3f |\n" "$t" "$p" "$(grep -oP 'gradients \K[0-9.]+' <<< "$mem")" \
      "$(grep -oP 'optimizer state \K[0-9.]+' <<< "$mem")" \
      "$(grep -m1 -oP '^activations: \K[0-9.]+' "$tmp/m$t.log")" "$(awk -v a="$p" -v b="$base" 'BEGIN { print a / b }')"
  done
  echo
fi
