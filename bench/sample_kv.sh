#!/usr/bin/env bash
# hpctrain sample with the key/value cache against without it: tokens/s of
# greedy generation from a llama-small model (random weights: the speed does
# not depend on them) whose window holds 256 and 1024 tokens. The prompt
# fills half the window and the draw the other half, so the last tokens see
# a nearly full context; both modes compute the same logits (sample.h), so
# the ratio is the cost of recomputing the window per token.
#
#   bench/sample_kv.sh [BUILD]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-kv.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
head -c 200000 /dev/urandom | base64 > "$TMP/text"
"$BUILD/hpcdata" pack --from text "$TMP/text" -o "$TMP/text.h5" > /dev/null
printf "%-8s %-10s %10s %10s %8s\n" context cache tokens/s seconds speedup
for ctx in 256 1024; do
  "$BUILD/hpctrain" --data.path "$TMP/text.h5" --model.preset llama-small --model.context "$ctx" --train.steps 1 \
    --train.batch_size 1 --log.progress none --run.dir "$TMP/r$ctx" > /dev/null 2>&1
  prompt=$(head -c $((ctx / 2)) "$TMP/text")
  declare -A rate=()
  for cache in true false; do
    "$BUILD/hpctrain" sample --checkpoint "$TMP/r$ctx/ckpt-00000001.h5" --prompt "$prompt" --tokens $((ctx / 2 - 1)) \
      --temperature 0 --kv-cache $cache > /dev/null 2> "$TMP/err"
    line=$(grep -oP 'sample: \K[0-9]+ tokens in [0-9.]+ s \([0-9.]+' "$TMP/err")
    rate[$cache]=${line##*(}
    secs=$(echo "$line" | grep -oP 'in \K[0-9.]+')
    printf "%-8s %-10s %10s %10s %8s\n" "$ctx" "$cache" "${rate[$cache]}" "$secs" \
      "$([ $cache = false ] && awk -v a="${rate[true]}" -v b="${rate[false]}" 'BEGIN { printf "%.1fx", a / b }' || echo -)"
  done
done
