#!/usr/bin/env bash
# ctest-timeout: 600
# ZeRO (dist.zero = 1 | 2; stage 3 in zero3_train.sh) trains bitwise what dist.zero = 0 trains, on 2, 3
# and 4 ranks: every logged loss, every grad_norm and the final parameters and
# optimizer state (the checkpoint, written whole by rank 0) are the same bits.
#   * mlp + Adam;
#   * a CNN with SyncBatchNorm + SGD momentum, two bucket sizes;
#   * gpt-tiny + AdamW + clipping (clip_norm low enough to clip every step) +
#     accum_steps 2, two bucket sizes.
# Plus: optimizer_state_mb with N ranks is 1/N of the unsharded figure (± one
# aligned shard), and so is stage 2's resident gradient memory (± a few
# pages); every training record carries both;
# dist.zero outside 0–2 is one line, exit 2 (flag and HPCTRAIN_DIST_ZERO);
# dist.zero 1 on one rank says so and trains unsharded.
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
H="$BUILD/hpcdata"
data=$(mnist_h5)
export OMP_NUM_THREADS=1
text=/usr/share/common-licenses/BSD
[ -f "$text" ] || skip "no $text (Debian base-files)"
"$H" pack --from text "$text" --val-fraction 0 -o "$TMP/bsd.h5" > /dev/null || fail "pack"

col() { grep -oP "\"$2\": \K[^,}]*" "$1/metrics.jsonl"; }
ckpt_of() { ls "$1"/ckpt-*.h5 | tail -1; }
# Bitwise comparison of two checkpoints' parameters and optimizer state.
same_state() {
  $PYTHON - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
names = ["params_flat"] + ["optimizer/" + k for k in a["optimizer"]]
for n in names:
    x, y = np.asarray(a[n]), np.asarray(b[n])
    if x.shape != y.shape or x.tobytes() != y.tobytes():
        sys.exit("%s differs (%d of %d elements)" % (n, int((x != y).sum()) if x.shape == y.shape else -1, x.size))
if a["optimizer"].attrs["steps_taken"] != b["optimizer"].attrs["steps_taken"]:
    sys.exit("optimizer steps differ")
print(len(names))
PY
}

# One configuration: zero 0, 1, 2 on W ranks, then compare.
check() {
  local name=$1 w=$2; shift 2
  for z in 0 1 2; do
    run_mpi "$w" "$hp" "$@" --dist.zero $z --log.every 1 --log.progress plain --ckpt.keep 1 \
      --run.dir "$TMP/$name-w$w-z$z" > "$TMP/$name-w$w-z$z.log" 2>&1 \
      || { tail -30 "$TMP/$name-w$w-z$z.log"; fail "$name: $w ranks, zero $z"; }
  done
  grep -q "ZeRO stage 2" "$TMP/$name-w$w-z2.log" || fail "$name: zero 2 does not say it is sharded"
  for z in 1 2; do
    for k in loss grad_norm; do
      diff <(col "$TMP/$name-w$w-z0" $k) <(col "$TMP/$name-w$w-z$z" $k) > /dev/null \
        || { paste <(col "$TMP/$name-w$w-z0" $k) <(col "$TMP/$name-w$w-z$z" $k) | head; fail "$name, $w ranks: zero $z changed $k"; }
    done
    n=$(same_state "$(ckpt_of "$TMP/$name-w$w-z0")" "$(ckpt_of "$TMP/$name-w$w-z$z")") \
      || fail "$name, $w ranks, zero $z: final state: $n"
  done
  pass "$name, $w ranks: zero 1 and 2 = zero 0 bitwise ($(col "$TMP/$name-w$w-z0" loss | wc -l) losses and grad_norms, $n state datasets)"
}

mlp=(--data.path "$data" --model.preset mlp --optim.name adam --optim.lr 1e-3 --train.batch_size 16 --train.steps 5)
cnn="conv(8,3,pad=1) bn relu maxpool(2) conv(16,3,pad=1) bn relu maxpool(2) flatten linear(10)"
cnn=(--data.path "$data" --model.spec "$cnn" --optim.name sgd --optim.momentum 0.9 --optim.lr 0.02
     --train.batch_size 8 --train.steps 4)
gpt=(--data.path "$TMP/bsd.h5" --model.preset gpt-tiny --optim.name adamw --optim.lr 3e-3 --optim.clip_norm 0.5
     --optim.weight_decay 0.1 --train.batch_size 2 --train.accum_steps 2 --train.steps 4 --data.drop_last false)
for w in 2 3 4; do
  check mlp "$w" "${mlp[@]}"
  check cnn-b1 "$w" "${cnn[@]}" --dist.bucket_mb 1e-6
  check gpt-b1 "$w" "${gpt[@]}" --dist.bucket_mb 1e-6
done
check cnn-b25 3 "${cnn[@]}" --dist.bucket_mb 25
check gpt-b01 3 "${gpt[@]}" --dist.bucket_mb 0.1
grep -q "SyncBatchNorm: on" "$TMP/cnn-b1-w2-z1.log" || fail "cnn: SyncBatchNorm is not on"
# Clipping really happened (grad_norm above clip_norm), or the test would not test it.
awk '$1 > 0.5 { c++ } END { exit !(c > 0) }' <(col "$TMP/gpt-b1-w2-z0" grad_norm) || fail "gpt: never clipped"

# Memory accounting: 1/N of the unsharded optimizer state (± one aligned shard of 16 floats × 2 moments).
for w in 2 3 4; do
  z0=$(col "$TMP/mlp-w$w-z0" optimizer_state_mb | tail -1)
  z1=$(col "$TMP/mlp-w$w-z1" optimizer_state_mb | tail -1)
  g=$(col "$TMP/mlp-w$w-z1" grad_buffer_mb | tail -1)
  [ -n "$g" ] || fail "metrics.jsonl has no grad_buffer_mb"
  awk -v a="$z0" -v b="$z1" -v w="$w" 'BEGIN { d = b - a / w; if (d < 0) d = -d; exit !(a > 0 && d <= 2 * 16 * 4 / 1048576 + 1e-9) }' \
    || fail "optimizer_state_mb: $z1 on each of $w ranks, $z0 unsharded (want 1/$w)"
  pass "optimizer_state_mb on $w ranks: $z0 unsharded, $z1 with zero 1 (1/$w within one shard)"
  # Stage 2 keeps only its shard of the gradients resident (the rest of each bucket's pages go back
  # when it is reduced): 1/N, give or take a page where the shard and the buckets end; stage 1 all.
  g0=$(col "$TMP/mlp-w$w-z0" grad_buffer_mb | tail -1)
  g2=$(col "$TMP/mlp-w$w-z2" grad_buffer_mb | tail -1)
  [ "$g" = "$g0" ] || fail "grad_buffer_mb: zero 1 has $g, zero 0 $g0 (stage 1 keeps the whole buffer)"
  awk -v a="$g0" -v b="$g2" -v w="$w" 'BEGIN { d = b - a / w; if (d < 0) d = -d; exit !(a > 0 && d <= 8 * 4096 / 1048576) }' \
    || fail "grad_buffer_mb: $g2 on each of $w ranks with zero 2, $g0 unsharded (want 1/$w)"
  pass "grad_buffer_mb on $w ranks: $g0 unsharded and with zero 1, $g2 with zero 2 (1/$w within a few pages)"
done
grep -q "memory per rank: parameters" "$TMP/mlp-w2-z1.log" || fail "no memory line in the start-up summary"

# Bad input and one rank.
expect_exit 2 "dist.zero.*must be in \[0, 3\]" "$hp" "${mlp[@]}" --dist.zero 4 --run.dir "$TMP/bad"
HPCTRAIN_DIST_ZERO=-1 expect_exit 2 "dist.zero.*must be in \[0, 3\]" "$hp" "${mlp[@]}" --run.dir "$TMP/bad"
run_mpi 1 "$hp" "${mlp[@]}" --dist.zero 1 --log.every 1 --log.progress plain --run.dir "$TMP/one" > "$TMP/one.log" 2>&1 \
  || { cat "$TMP/one.log"; fail "zero 1 on one rank"; }
grep -q "dist.zero 1 with one rank: nothing to shard, training unsharded" "$TMP/one.log" || fail "zero 1 on one rank: no info line"
pass "dist.zero 4 / HPCTRAIN_DIST_ZERO=-1: exit 2; zero 1 on one rank trains unsharded with an info line"

# dist.reduce native: the MPI library's MPI_Iallreduce / MPI_Ireduce_scatter (not bitwise-stable in
# general): trains, says so, and logs the losses of the ordered reduction to float tolerance.
for z in 0 1; do
  run_mpi 4 "$hp" "${mlp[@]}" --dist.reduce native --dist.zero $z --log.every 1 --log.progress plain \
    --run.dir "$TMP/native-z$z" > "$TMP/native-z$z.log" 2>&1 || { tail -20 "$TMP/native-z$z.log"; fail "dist.reduce native, zero $z"; }
  grep -q "dist.reduce native" "$TMP/native-z$z.log" || fail "dist.reduce native: the header does not say so"
  worst=$(paste <(col "$TMP/mlp-w4-z0" loss) <(col "$TMP/native-z$z" loss) | awk '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > w) w = r; n++ } END { if (n != 5) print "missing"; else printf "%.2g", w }')
  awk -v w="$worst" 'BEGIN { exit !(w != "missing" && w + 0 < 1e-5) }' || fail "dist.reduce native, zero $z: losses differ by $worst"
  pass "dist.reduce native, zero $z, 4 ranks: 5 losses within $worst (relative) of the ordered reduction"
done
expect_exit 2 "dist.reduce.*(ordered|native)" "$hp" "${mlp[@]}" --dist.reduce fast --run.dir "$TMP/bad"
