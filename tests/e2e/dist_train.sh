#!/usr/bin/env bash
# ctest-timeout: 300
# Data-parallel training through the hpctrain binary:
#   * 2 and 4 ranks × b samples log the same losses as 1 rank × W·b (a CNN,
#     SyncBatchNorm on), to float tolerance;
#   * bucket sizes (one per tensor, a few, one for all) and overlap on/off give
#     bitwise the same losses;
#   * dist.backend nccl on a CPU run is one clear line and exit 2; mpi and auto train.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
# SGD, not Adam: Adam's steps hardly change when every gradient is scaled, so it would hide a wrong average.
# A CNN with BatchNorm under 1 MiB of parameters, so that one bucket can hold it all (the first bucket
# is capped at 1 MiB otherwise).
cnn="conv(16,3,pad=1) bn relu maxpool(2) conv(32,3,pad=1) bn relu maxpool(2) flatten linear(64) relu linear(10)"
common=(--data.path "$data" --model.spec "$cnn" --optim.name sgd --optim.lr 0.02 --train.steps 6 --log.every 1
        --log.progress plain --ckpt.keep 1)
losses() { grep -oP '"loss": \K[^,]*' "$1/metrics.jsonl"; }

# 1. W ranks × b = 1 rank × W·b. Tolerance: the logged loss is a mean over 64 samples; the runs differ
#    only in summation order (≈1e-7 relative per step; observed ≤ 3e-8 after 6 steps at lr 0.02). 1e-5 leaves a
#    factor of 100, while a wrong average or an unsynced BatchNorm moves the losses by 1e-3 or more.
run_mpi 1 "$hp" "${common[@]}" --train.batch_size 64 --run.dir "$TMP/w1" > "$TMP/w1.log" 2>&1 || { cat "$TMP/w1.log"; fail "1 rank"; }
for w in 2 4; do
  run_mpi $w "$hp" "${common[@]}" --train.batch_size $((64 / w)) --run.dir "$TMP/w$w" > "$TMP/w$w.log" 2>&1 \
    || { cat "$TMP/w$w.log"; fail "$w ranks"; }
  grep -q "SyncBatchNorm: on" "$TMP/w$w.log" || fail "$w ranks: SyncBatchNorm is not on"
  worst=$(paste <(losses "$TMP/w1") <(losses "$TMP/w$w") | awk '
    { d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > w) w = r; n++ }
    END { if (n != 6) { print "missing"; exit } printf "%.2g", w }')
  awk -v w="$worst" 'BEGIN { exit !(w != "missing" && w + 0 < 1e-5) }' \
    || { paste <(losses "$TMP/w1") <(losses "$TMP/w$w"); fail "$w ranks × $((64 / w)) vs 1 × 64: losses differ by $worst (relative)"; }
  pass "$w ranks × $((64 / w)) = 1 rank × 64: 6 losses agree to $worst relative"
done

# 2. Any bucketing, with or without overlap: the same bits.
for v in "1e-6 true" "0.1 true" "1000 true" "1e-6 false"; do
  set -- $v
  run_mpi 2 "$hp" "${common[@]}" --train.batch_size 16 --dist.bucket_mb "$1" --dist.overlap "$2" \
    --run.dir "$TMP/b-$1-$2" > "$TMP/b.log" 2>&1 || { cat "$TMP/b.log"; fail "bucket_mb $1 overlap $2"; }
  grep -oP 'gradient all-reduce: \K[0-9]+ bucket\(s\)' "$TMP/b.log" > "$TMP/b-$1-$2.buckets"
done
[ "$(cat "$TMP/b-1e-6-true.buckets")" = "12 bucket(s)" ] || fail "bucket_mb 1e-6: expected one bucket per tensor (12), got $(cat "$TMP/b-1e-6-true.buckets")"
[ "$(cat "$TMP/b-1000-true.buckets")" = "1 bucket(s)" ] || fail "bucket_mb 1000: expected 1 bucket"
for v in 0.1-true 1000-true 1e-6-false; do
  diff <(losses "$TMP/b-1e-6-true") <(losses "$TMP/b-$v") > /dev/null || fail "bucketing $v changed the losses"
done
pass "12 buckets, $(cat "$TMP/b-0.1-true.buckets"), 1 bucket, and no overlap: bitwise identical losses"

# 3. dist.backend.
expect_exit 2 "dist.backend nccl" "$hp" "${common[@]}" --dist.backend nccl --run.dir "$TMP/n"
rc=0
run_mpi 2 "$hp" "${common[@]}" --dist.backend nccl --run.dir "$TMP/n2" > "$TMP/n2.out" 2> "$TMP/n2.err" || rc=$?
[ $rc -eq 2 ] && [ "$(grep -c "dist.backend nccl" "$TMP/n2.err")" -eq 1 ] || { cat "$TMP/n2.err"; fail "nccl under mpirun: exit $rc"; }
pass "dist.backend nccl under mpirun: one line, exit 2"
run_mpi 2 "$hp" "${common[@]}" --dist.backend mpi --run.dir "$TMP/m" > "$TMP/m.log" 2>&1 \
  || { cat "$TMP/m.log"; fail "dist.backend mpi"; }
grep -q "communicator mpi" "$TMP/m.log" || fail "dist.backend mpi: the header does not say so"
pass "dist.backend mpi"
