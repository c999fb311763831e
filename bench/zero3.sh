#!/usr/bin/env bash
# ZeRO stage 3 (dist.zero 3) on this node's CPUs: checkpoint memory and time,
# step time against zero 0, and the largest model under a memory cap.
#
#   bench/zero3.sh [ckpt|time|largest|all] [BUILD=build]
#
# ckpt: gpt2-124m shapes (model.context 32, batch 1, Adam, 1 step, ckpt.async
#   false), 2 and 4 ranks × zero 0 and 3: the end-of-training save's time and
#   the peak host memory it added on rank 0 (the writer) and on the largest
#   other rank (VmHWM over the save, "checkpoint memory:" line), and every
#   rank's peak RSS over the run (/usr/bin/time); then a run resumed from that
#   checkpoint with the same ranks and zero (one more step): the resume's time
#   and the peak host memory it added on rank 0 (the reader) and on the
#   largest other rank ("resume memory:" line), and rank 0's peak RSS over it.
# time: gpt-small (model.context 64, batch 4 per rank), 2 ranks: zero 0, zero 3
#   with prefetch, zero 3 without, interleaved, 3 rounds of ZERO3_STEPS (64)
#   steps; the median over rounds of tokens/s (steps 6 on of metrics.jsonl), the ratio to
#   zero 0 of the same round, and the share of the step spent waiting for
#   parameter gathers (gather_ms / step ms).
# largest: the largest gpt (12 layers × width, context 64, batch 1, Adam) that
#   trains 2 steps and saves its checkpoint on 2 ranks with every rank under a
#   memory cap of ZERO3_CAP_MB (2048) MiB, at zero 0, 2 and 3. The cap is a
#   memory cgroup per rank (v1 memory.limit_in_bytes or v2 memory.max, no
#   swap: a rank over it is killed), so it counts the memory a rank touches;
#   where no memory cgroup can be made (not root), ulimit -v instead, which
#   counts reserved address space (thread stacks, malloc arenas, the CUDA
#   libraries' mappings: run that case with a CPU-only build, make CUDA=0
#   BUILD=build-cpu; BUILD=build-cpu, as cuDNN aborts when it cannot map its
#   parts). Prints the peak RSS of the largest fitting run's largest rank.
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
"$build/hpcdata" pack --from text /usr/share/common-licenses/GPL-3 --val-fraction 0 -o "$tmp/t.h5" > /dev/null

echo "# bench/zero3.sh $what, $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$root" rev-parse --short HEAD)"
echo "CPU: $(lscpu | grep -m1 'Model name' | sed 's/.*: *//'), $(getconf _NPROCESSORS_ONLN) cores; flags: $(grep -o -w 'avx512f\|avx2\|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "BLAS: $("$hp" --version 2>&1 | grep -m1 'BLAS core' || echo 'core not reported')"
echo
col() { grep '"loss"' "$1/metrics.jsonl" | grep -oP "\"$2\": \K[^,}]*"; }
run() {  # ranks dir args…: every rank under /usr/bin/time (peak RSS in DIR.rss.RANK)
  local n=$1 dir=$2; shift 2
  rm -rf "$dir"
  mpirun -np "$n" --oversubscribe --bind-to none \
    bash -c '/usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$dir" \
    "$hp" --data.path "$tmp/t.h5" --log.progress plain --ckpt.keep 1 --run.dir "$dir" "$@" > "$dir.log" 2>&1
}

if [ "$what" = ckpt ] || [ "$what" = all ]; then
  echo "| gpt2-124m shapes | ranks | zero | save s | save peak, rank 0 (MiB) | save peak, largest other (MiB) | peak RSS rank 0 (MiB) | peak RSS largest other (MiB) | resume s | resume peak, rank 0 (MiB) | resume peak, largest other (MiB) | resumed run: peak RSS rank 0 (MiB) |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  for n in ${ZERO3_RANKS:-2 4}; do
    for z in 0 3; do
      d="$tmp/c-$n-$z"
      run "$n" "$d" --model.preset gpt2-124m --model.context 32 --optim.name adam --train.batch_size 1 \
        --train.steps 1 --dist.zero "$z" --ckpt.async false || { tail -20 "$d.log" >&2; exit 1; }
      line=$(grep "^checkpoint memory:" "$d.log")
      save=$(grep -oP '"save_s": \K[^,}]*' "$d/metrics.jsonl")
      run "$n" "$d-r" --model.preset gpt2-124m --model.context 32 --optim.name adam --train.batch_size 1 \
        --train.steps 2 --dist.zero "$z" --ckpt.async false --resume "$(ls "$d"/ckpt-*.h5)" \
        || { tail -20 "$d-r.log" >&2; exit 1; }
      rline=$(grep "^resume memory:" "$d-r.log" || true)  # an hpctrain before 2026-12-06 prints none: n/a
      rs=$(grep -oP '"resume_s": \K[0-9.]+' "$d-r/metrics.jsonl" || true)
      printf "| | %d | %d | %.2f | %s | %s | %.0f | %.0f | %s | %s | %s | %.0f |\n" "$n" "$z" "$save" \
        "$(grep -oP 'peak \+\K[0-9.]+' <<<"$line")" "$(grep -oP 'at most \+\K[0-9.]+' <<<"$line")" \
        "$(awk -v k="$(cat "$d.rss.0")" 'BEGIN { print k / 1024 }')" \
        "$(cat "$d".rss.* | sed 1d | sort -n | tail -1 | awk '{ print $1 / 1024 }')" \
        "$([ -n "$rs" ] && printf '%.2f' "$rs" || echo n/a)" \
        "$(grep -oP 'peak \+\K[0-9.]+' <<<"$rline" || echo n/a)" "$(grep -oP 'at most \+\K[0-9.]+' <<<"$rline" || echo n/a)" \
        "$(awk -v k="$(cat "$d-r.rss.0")" 'BEGIN { print k / 1024 }')"
    done
  done
  echo
fi

if [ "$what" = time ] || [ "$what" = all ]; then
  declare -A tps share
  for round in 1 2 3; do
    for v in z0 z3 z3-noprefetch; do
      case $v in
        z0) opts=(--dist.zero 0) ;;
        z3) opts=(--dist.zero 3) ;;
        z3-noprefetch) opts=(--dist.zero 3 --dist.zero_prefetch false) ;;
      esac
      d="$tmp/t-$v-$round"
      run 2 "$d" --model.preset gpt-small --model.context 64 --optim.name adamw --train.batch_size 4 \
        --train.steps "${ZERO3_STEPS:-64}" --log.every 1 "${opts[@]}" || { tail -20 "$d.log" >&2; exit 1; }
      tps[$v,$round]=$(col "$d" tokens_per_s | sed -n '6,$p' | awk '{ s += $1 } END { print s / NR }')
      step=$(paste <(col "$d" data_ms) <(col "$d" compute_ms) <(col "$d" comm_ms) | sed -n '6,$p' | awk '{ s += $1 + $2 + $3 } END { print s / NR }')
      g=$({ col "$d" gather_ms || true; } | sed -n '6,$p' | awk '{ s += $1 } END { print NR ? s / NR : 0 }')  # none at zero 0
      share[$v,$round]=$(awk -v g="$g" -v s="$step" 'BEGIN { print g / s }')
    done
  done
  med() { printf "%s\n" "$@" | sort -g | sed -n 2p; }
  echo "| gpt-small, 2 ranks, 4 × 64 tokens per rank | tokens/s (median of 3) | ratio to zero 0 (median of per-round ratios) | gather wait / step (median) |"
  echo "| --- | --- | --- | --- |"
  for v in z0 z3 z3-noprefetch; do
    printf "| %s | %.0f | %.4f | %.3f |\n" "$v" "$(med "${tps[$v,1]}" "${tps[$v,2]}" "${tps[$v,3]}")" \
      "$(med "$(awk -v a="${tps[$v,1]}" -v b="${tps[z0,1]}" 'BEGIN { print a / b }')" \
             "$(awk -v a="${tps[$v,2]}" -v b="${tps[z0,2]}" 'BEGIN { print a / b }')" \
             "$(awk -v a="${tps[$v,3]}" -v b="${tps[z0,3]}" 'BEGIN { print a / b }')")" \
      "$(med "${share[$v,1]}" "${share[$v,2]}" "${share[$v,3]}")"
  done
  echo
fi

if [ "$what" = largest ] || [ "$what" = all ]; then
  cap=${ZERO3_CAP_MB:-2048}
  cgroot="" limit=""  # a memory cgroup per rank where this shell may make one
  if [ -w /sys/fs/cgroup/memory ]; then
    cgroot=/sys/fs/cgroup/memory limit=memory.limit_in_bytes
  elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null && [ -w /sys/fs/cgroup ]; then
    cgroot=/sys/fs/cgroup limit=memory.max
  fi
  if [ -n "$cgroot" ]; then
    how="a memory cgroup of $cap MiB per rank ($cgroot)"
    # shellcheck disable=SC2016  # expanded by the rank's shell
    capped=(bash -c 'g=$0-$OMPI_COMM_WORLD_RANK; mkdir -p "$g"; echo "$1" > "$g/$2"; echo $$ > "$g/cgroup.procs"; shift 2; exec "$@"'
            "$cgroot/hpctrain-zero3-$$" $((cap * 1048576)) "$limit")
  else
    how="ulimit -v $cap MiB per rank (no memory cgroup could be made)"
    capped=(bash -c "ulimit -v $((cap * 1024)); exec \"\$@\"" _)
  fi
  cleanup_cg() { [ -n "$cgroot" ] && rmdir "$cgroot"/hpctrain-zero3-$$-* 2>/dev/null; true; }
  trap 'cleanup_cg; rm -rf "$tmp"' EXIT
  echo "Largest gpt (12 layers, context 64, batch 1, Adam, 2 steps and the final save) on 2 ranks, $how:"
  echo
  echo "| zero | largest that trains (layers × width) | parameters | its peak RSS, largest rank (MiB) | smallest that fails |"
  echo "| --- | --- | --- | --- | --- |"
  fits() {  # zero layers width: trains within the cap (a run that fails to start may hang: 300 s at most)
    local d="$tmp/l-$1-$2-$3" pid t=0
    rm -rf "$d"
    cleanup_cg
    # shellcheck disable=SC2016  # expanded by the rank's shell
    setsid mpirun -np 2 --oversubscribe --bind-to none "${capped[@]}" \
      bash -c '/usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$d" \
      "$hp" --data.path "$tmp/t.h5" --log.progress none --run.dir "$d" --model.preset gpt-small --model.layers "$2" \
      --model.width "$3" --model.heads 8 --model.context 64 --optim.name adam --train.batch_size 1 --train.steps 2 \
      --dist.zero "$1" --ckpt.async false --train.device cpu > "$d.log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null && [ $t -lt 300 ]; do sleep 1; t=$((t + 1)); done
    if kill -0 "$pid" 2>/dev/null; then
      pkill -9 -s "$pid" || true  # the session setsid made: mpirun and the ranks it started
      wait "$pid" 2>/dev/null || true
      return 1
    fi
    wait "$pid"
  }
  peak() {  # zero layers width: the largest rank's peak RSS in that run, MiB
    cat "$tmp/l-$1-$2-$3".rss.* | sort -n | tail -1 | awk '{ printf "%.0f", $1 / 1024 }'
  }
  layers=${ZERO3_LAYERS:-12}
  for z in 0 2 3; do
    best="-" bestp="-" bestm="-" fail="-"
    for width in ${ZERO3_WIDTHS:-512 576 640 704 768 832 896 960 1024 1088 1152 1216 1280}; do
      if fits "$z" "$layers" "$width"; then
        best="$layers × $width" bestm=$(peak "$z" "$layers" "$width")
        bestp=$(grep -oP 'total parameters: \K[0-9]+' "$tmp/l-$z-$layers-$width.log")
      else
        fail="$layers × $width"
        break
      fi
    done
    echo "| $z | $best | $bestp | $bestm | $fail |"
  done
fi
