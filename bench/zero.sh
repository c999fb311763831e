#!/usr/bin/env bash
# ZeRO (dist.zero) on this node's CPUs: per-rank memory and step time.
#
#   bench/zero.sh [memory|time|reduce|all] [BUILD=build]
#
# memory: gpt-small and gpt2-124m shapes (model.context 32, batch 1, 2 steps,
#   Adam), 1, 2 and 4 ranks × zero 0/1/2: the tracked optimizer_state_mb and
#   grad_buffer_mb of rank 0 (metrics.jsonl) and every rank's peak RSS
#   (/usr/bin/time), the largest reported.
# time: gpt-small (model.context 64, batch 4), 2 ranks, zero 0, 1, 2 interleaved, 3 rounds of
#   16 steps; the median over rounds of the mean step time of steps 6–16
#   (compute_ms + comm_ms + data_ms per step from metrics.jsonl), and the
#   ratio to zero 0 of the same round.
# reduce: dist.reduce ordered against native (MPI_Iallreduce) on 2, 4 and 8 ranks
#   (oversubscribed where the cores are fewer): the mlp preset, batch 32, 40 steps,
#   mean step time of steps 6–40 and comm_ms, median of 3 interleaved rounds.
# Prints the CPU model and flags and the BLAS core first; never run by make test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
what=${1:-all}
hp="$build/hpctrain"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
[ -x "$hp" ] && [ -x "$build/hpcdata" ] || { echo "build/hpctrain or build/hpcdata is missing: make all" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text=/usr/share/common-licenses/GPL-3
"$build/hpcdata" pack --from text "$text" --val-fraction 0 -o "$tmp/t.h5" > /dev/null

echo "# bench/zero.sh, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "CPU: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//'), $(getconf _NPROCESSORS_ONLN) cores; flags: $(grep -o -w 'avx512f\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
blas=$(OPENBLAS_VERBOSE=2 "$hp" --help 2>&1 | grep -i -m1 'core' || true)
echo "BLAS: OpenBLAS, ${blas:-core not reported}"
echo
last() { grep '"loss"' "$1/metrics.jsonl" | tail -1 | grep -oP "\"$2\": \K[^,}]*"; }
run() {  # ranks zero dir args…
  local n=$1 z=$2 dir=$3; shift 3
  rm -rf "$dir"
  mpirun -np "$n" --oversubscribe --bind-to none \
    bash -c '/usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$dir" \
    "$hp" --data.path "${data:-$tmp/t.h5}" --dist.zero "$z" --log.progress plain --ckpt.keep 1 --run.dir "$dir" "$@" \
    > "$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; exit 1; }
}

if [ "$what" = memory ] || [ "$what" = all ]; then
  echo "| model | ranks | zero | optimizer_state_mb (rank 0) | grad_buffer_mb | peak RSS rank 0, the checkpoint writer (MiB) | peak RSS, largest other rank (MiB) |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  for m in ${ZERO_BENCH_MODELS:-gpt-small gpt2-124m}; do
    for n in ${ZERO_BENCH_RANKS:-1 2 4}; do
      for z in ${ZERO_BENCH_STAGES:-0 1 2}; do
        [ "$n" = 1 ] && [ "$z" != 0 ] && continue
        d="$tmp/m-$m-$n-$z"
        run "$n" "$z" "$d" --model.preset "$m" --model.context 32 --optim.name adam --train.batch_size 1 \
          --train.steps 2 --log.every 1
        rss0=$(cat "$d.rss.0")
        other=$(cat "$d".rss.* | sed 1d | sort -n | tail -1)  # rss.0 sorts first
        [ "$n" = 1 ] && other=0
        printf "| %s | %d | %d | %.1f | %.1f | %.0f | %s |\n" "$m" "$n" "$z" "$(last "$d" optimizer_state_mb)" \
          "$(last "$d" grad_buffer_mb)" "$(awk -v k="$rss0" 'BEGIN { print k / 1024 }')" \
          "$([ "$n" = 1 ] && echo - || awk -v k="$other" 'BEGIN { printf "%.0f", k / 1024 }')"
      done
    done
  done
  echo
fi

step_ms() {  # mean of data+compute+comm (or the keys given) over steps 6…
  grep '"loss"' "$1/metrics.jsonl" | awk -F'[:,]' -v keys="${2:-data_ms compute_ms comm_ms}" '
    BEGIN { nk = split(keys, K, " ") }
    { for (i = 1; i < NF; i++) { k = $i; gsub(/[ "{]/, "", k); v[k] = $(i + 1) }
      if (v["step"] > 5) { for (j = 1; j <= nk; j++) s += v[K[j]]; n++ } }
    END { printf "%.3f\n", s / n }'
}

if [ "$what" = time ] || [ "$what" = all ]; then
  for round in 1 2 3; do
    for z in 0 1 2; do
      run 2 "$z" "$tmp/t-$round-$z" --model.preset gpt-small --model.context 64 --optim.name adamw \
        --train.batch_size 4 --train.steps 16 --log.every 1 --data.drop_last false
      step_ms "$tmp/t-$round-$z" > "$tmp/t-$round-$z.ms"
    done
  done
  echo "| gpt-small, 2 ranks, batch 4 × 64 tokens | step ms (median of 3 rounds) | ratio to zero 0 (median of per-round ratios) |"
  echo "| --- | --- | --- |"
  for z in 0 1 2; do
    ms=$(cat "$tmp"/t-*-$z.ms | sort -n | sed -n 2p)
    ratio=$(for r in 1 2 3; do awk -v a="$(cat "$tmp/t-$r-$z.ms")" -v b="$(cat "$tmp/t-$r-0.ms")" 'BEGIN { printf "%.4f\n", a / b }'; done | sort -n | sed -n 2p)
    echo "| zero $z | $ms | $ratio |"
  done
fi

if [ "$what" = reduce ] || [ "$what" = all ]; then
  data=$build/testdata/mnist.h5  # made by the tests (tests/e2e/lib.bash mnist_h5), else from the sample
  [ -f "$data" ] || { data=$tmp/mnist.h5; "$build/hpcdata" pack --from mnist-idx "$root/../shared/data/mnist-sample" -o "$data" > /dev/null; }
  for round in 1 2 3; do
    for n in 2 4 8; do
      for r in ordered native; do
        d="$tmp/r-$round-$n-$r"
        run "$n" 0 "$d" --model.preset mlp --optim.name sgd --train.batch_size 32 --train.steps 40 --log.every 1 \
          --dist.reduce "$r"
        step_ms "$d" > "$d.ms"
        step_ms "$d" comm_ms > "$d.comm"
      done
    done
  done
  echo
  echo "| mlp preset (669,706 params, 2.6 MB of gradients), batch 32 per rank | ranks | step ms, ordered | step ms, native | comm_ms ordered | comm_ms native | native / ordered (step) |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  med() { sort -n | sed -n 2p; }
  for n in 2 4 8; do
    o=$(cat "$tmp"/r-*-$n-ordered.ms | med); v=$(cat "$tmp"/r-*-$n-native.ms | med)
    oc=$(cat "$tmp"/r-*-$n-ordered.comm | med); vc=$(cat "$tmp"/r-*-$n-native.comm | med)
    echo "| | $n | $o | $v | $oc | $vc | $(awk -v a="$v" -v b="$o" 'BEGIN { printf "%.3f", a / b }') |"
  done
fi
