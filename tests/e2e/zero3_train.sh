#!/usr/bin/env bash
# ctest-timeout: 400
# ZeRO stage 3 (dist.zero = 3) trains bitwise what dist.zero = 0 trains, on
# 2 and 3 ranks: every logged loss and grad_norm, the final evaluation and the
# final parameters and optimizer state (the checkpoint, whole) are the same bits.
#   * gpt-tiny, AdamW, clipping every step, accumulation 2, no unit kept
#     (every unit gathered again for backward);
#   * gpt-tiny with model.recompute, small units kept;
#   * resnet20 with SyncBatchNorm (on by itself with several ranks), SGD
#     momentum, no prefetch, and an evaluation whose batches do not divide
#     among the ranks (stage 3's forward runs in lockstep).
# Memory, from the allocation ledger (metrics.jsonl peak_*_mb, not RSS), on 2
# and 4 ranks: parameters + gradients + optimizer state are 1/N of
# dist.zero 0's within 10 %, and the gather and staging buffers are what the
# start-up line and the memory model say.
# Bad input, one line and exit 2 each: dist.zero 3 with dist.overlap false; a
# zero_unit_mb smaller than a layer (naming it and its largest tensor); a
# stage-3 option with another stage.
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
data=$(mnist_h5)
export OMP_NUM_THREADS=1
text=/usr/share/common-licenses/BSD
[ -f "$text" ] || skip "no $text (Debian base-files)"
"$BUILD/hpcdata" pack --from text "$text" --val-fraction 0.2 -o "$TMP/bsd.h5" > /dev/null || fail "pack"

col() { grep -oP "\"$2\": \K[^,}]*" "$1/metrics.jsonl"; }
same_state() {
  $PYTHON - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
names = ["params_flat"] + ["optimizer/" + k for k in a["optimizer"]]
for n in names:
    x, y = np.asarray(a[n]), np.asarray(b[n])
    if x.shape != y.shape or x.tobytes() != y.tobytes():
        sys.exit("%s differs (%d of %d elements)" % (n, int((x != y).sum()) if x.shape == y.shape else -1, x.size))
print(len(names))
PY
}
train() {  # name ranks args…
  local name=$1 w=$2; shift 2
  run_mpi "$w" "$hp" "$@" --log.every 1 --log.progress plain --ckpt.keep 1 --run.dir "$TMP/$name" \
    > "$TMP/$name.log" 2>&1 || { tail -30 "$TMP/$name.log"; fail "$name"; }
}
check() {  # name ranks stage-3-options -- common args…
  local name=$1 w=$2 z3=() ; shift 2
  while [ "$1" != -- ]; do z3+=("$1"); shift; done; shift
  train "$name-w$w-z0" "$w" "$@" --dist.zero 0
  train "$name-w$w-z3" "$w" "$@" --dist.zero 3 "${z3[@]}"
  grep -q "^ZeRO stage 3: " "$TMP/$name-w$w-z3.log" || fail "$name: zero 3 does not say it is sharded"
  for k in loss grad_norm; do
    diff <(col "$TMP/$name-w$w-z0" $k) <(col "$TMP/$name-w$w-z3" $k) > /dev/null \
      || { paste <(col "$TMP/$name-w$w-z0" $k) <(col "$TMP/$name-w$w-z3" $k) | head; fail "$name, $w ranks: zero 3 changed $k"; }
  done
  diff <(grep '^final:' "$TMP/$name-w$w-z0.log") <(grep '^final:' "$TMP/$name-w$w-z3.log") \
    || fail "$name, $w ranks: the final evaluation differs"
  n=$(same_state "$TMP/$name-w$w-z0"/ckpt-*.h5 "$TMP/$name-w$w-z3"/ckpt-*.h5) || fail "$name, $w ranks: final state: $n"
  pass "$name, $w ranks: zero 3 = zero 0 bitwise ($(col "$TMP/$name-w$w-z0" loss | wc -l) losses and grad_norms, the final evaluation, $n state datasets)"
}

gpt=(--data.path "$TMP/bsd.h5" --model.preset gpt-tiny --optim.name adamw --optim.lr 3e-3 --optim.clip_norm 0.5
     --optim.weight_decay 0.1 --train.batch_size 2 --train.steps 4 --data.drop_last false)
r20=(--data.path "$data" --model.preset resnet20 --optim.name sgd --optim.momentum 0.9 --optim.lr 0.05
     --train.batch_size 4 --train.steps 3)
for w in 2 3; do
  check gpt-accum "$w" --dist.zero_keep_mb 0 -- "${gpt[@]}" --train.accum_steps 2
  check gpt-recompute "$w" --dist.zero_keep_mb 0.05 -- "${gpt[@]}" --model.recompute true
  check resnet20 "$w" --dist.zero_prefetch false --dist.zero_keep_mb 0 -- "${r20[@]}"
done
awk '$1 > 0.5 { c++ } END { exit !(c > 0) }' <(col "$TMP/gpt-accum-w2-z0" grad_norm) || fail "gpt: never clipped"
grep -q "SyncBatchNorm: on" "$TMP/resnet20-w3-z3.log" || fail "resnet20: SyncBatchNorm is not on"
grep -q "recompute" "$TMP/gpt-recompute-w2-z3.log" || fail "gpt: recompute is not on"

# Memory from the ledger, rank 0: parameters + gradients + optimizer state at 1/N, buffers as predicted.
last() { col "$TMP/$1" "$2" | tail -1; }
state() { awk -v a="$(last "$1" peak_params_mb)" -v b="$(last "$1" peak_grads_mb)" -v c="$(last "$1" peak_optimizer_mb)" 'BEGIN { print a + b + c }'; }
memory() {  # zero-0 run, zero-3 run, ranks
  local z0=$1 z3=$2 w=$3
  local s0 s3 g st announced row
  s0=$(state "$z0") s3=$(state "$z3")
  awk -v a="$s0" -v b="$s3" -v w="$w" 'BEGIN { r = b / (a / w); exit !(a > 0 && r > 0.9 && r < 1.1) }' \
    || fail "$z3: parameters + gradients + optimizer state $s3 MiB on each of $w ranks, $s0 unsharded (want 1/$w within 10 %)"
  g=$(last "$z3" peak_gather_mb) st=$(last "$z3" peak_staging_mb)
  announced=$(grep -oP "gather buffers \K[0-9.]+ MiB, gradient staging [0-9.]+" "$TMP/$z3.log")
  awk -v a="${announced%% *}" -v b="$g" -v c="${announced##* }" -v d="$st" \
    'BEGIN { exit !(a > 0 && (a - b) ^ 2 < 1e-4 && (c - d) ^ 2 < 1e-4) }' \
    || fail "$z3: gather buffers $g MiB and staging $st MiB counted, '$announced' announced"
  # The memory model's stage-3 row (params, grads, optimizer, gather, staging) predicts what was counted.
  row=$(grep -P "^  3 \* " "$TMP/$z3.log")
  $PYTHON - "$row" "$(last "$z3" peak_params_mb)" "$(last "$z3" peak_grads_mb)" "$(last "$z3" peak_optimizer_mb)" "$g" "$st" <<'PY' \
    || fail "$z3: the memory model's row '$row' does not predict the ledger"
import sys
model = [float(x) for x in sys.argv[1].split()[2:7]]
seen = [float(x) for x in sys.argv[2:7]]
sys.exit(0 if all(abs(m - s) <= 0.1 * m + 0.01 for m, s in zip(model, seen)) else "%s vs %s" % (model, seen))
PY
  pass "$w ranks: parameters + gradients + optimizer state $s3 MiB per rank, 1/$w of $s0 within 10 %; gather buffers $g MiB, staging $st MiB, as announced and modelled"
}
train mem-w4-z3 4 "${gpt[@]}" --dist.zero 3 --dist.zero_keep_mb 0
memory gpt-recompute-w2-z0 gpt-recompute-w2-z3 2
memory gpt-recompute-w2-z0 mem-w4-z3 4

# Bad input.
expect_exit 2 "dist.overlap.*dist.zero 3 cannot be combined with dist.overlap false" \
  "$hp" "${gpt[@]}" --dist.zero 3 --dist.overlap false --run.dir "$TMP/bad"
expect_exit 2 "zero_unit_mb 0.001 is smaller than layer [0-9]+ .*its largest tensor [0-9]+\.[a-z_.]+ [0-9x]+ is" \
  run_mpi 2 "$hp" "${gpt[@]}" --dist.zero 3 --dist.zero_unit_mb 0.001 --run.dir "$TMP/bad"
expect_exit 2 "dist.zero_keep_mb.*applies to dist.zero 3 only" "$hp" "${gpt[@]}" --dist.zero 2 --dist.zero_keep_mb 4 --run.dir "$TMP/bad"
run_mpi 1 "$hp" "${gpt[@]}" --dist.zero 3 --log.progress plain --run.dir "$TMP/one" > "$TMP/one.log" 2>&1 \
  || { cat "$TMP/one.log"; fail "zero 3 on one rank"; }
grep -q "dist.zero 3 with one rank: nothing to shard, training unsharded" "$TMP/one.log" || fail "zero 3 on one rank: no info line"
pass "zero 3 on one rank trains unsharded with an info line"
