#!/usr/bin/env bash
# ctest-timeout: 600
# Same seed, same world size -> bitwise-identical losses (1 rank and 2 ranks);
# another seed -> different losses.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
args=(--data.path "$data" --model.preset cnn --train.steps 40 --train.batch_size 32 --log.every 5 --log.progress plain)

losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }

for n in 1 2; do
  run_mpi $n "$BUILD/hpctrain" "${args[@]}" --run.dir "$TMP/a$n" > "$TMP/a$n.log" 2>&1 || { cat "$TMP/a$n.log"; fail "run a$n"; }
  run_mpi $n "$BUILD/hpctrain" "${args[@]}" --run.dir "$TMP/b$n" > "$TMP/b$n.log" 2>&1 || { cat "$TMP/b$n.log"; fail "run b$n"; }
  [ "$(losses "$TMP/a$n" | wc -l)" -ge 8 ] || fail "too few loss records"
  diff <(losses "$TMP/a$n") <(losses "$TMP/b$n") || fail "$n rank(s): same seed gave different losses"
  pass "$n rank(s): identical losses for the same seed (convolutions: $(grep -m1 -oP '^  oneDNN: +\K.*' "$TMP/a$n.log" || echo '?'))"
done
run_mpi 1 "$BUILD/hpctrain" "${args[@]}" --train.seed 7 --run.dir "$TMP/c1" > "$TMP/c1.log" 2>&1 || fail "run c1"
diff -q <(losses "$TMP/a1") <(losses "$TMP/c1") >/dev/null && fail "another seed gave the same losses"
pass "another seed gives other losses"

# A residual network: its activations stay in oneDNN's blocked layout between the convolutions
# (nn/layout.h) where the CPU has one; still the same bits run to run, on 1 and 2 ranks, and the
# same losses as the plain layout to float rounding.
res_args=(--data.path "$data" --model.spec "conv(16,3,pad=1,bias=0) bn relu res(conv(16,3,pad=1,bias=0) bn relu
  conv(16,3,pad=1,bias=0) bn) relu res(conv(32,3,stride=2,pad=1,bias=0) bn relu conv(32,3,pad=1,bias=0) bn) relu
  gap linear(10)" --train.steps 12 --train.batch_size 16 --log.every 2 --log.progress plain)
for n in 1 2; do
  for r in a b; do
    run_mpi $n "$BUILD/hpctrain" "${res_args[@]}" --run.dir "$TMP/res$r$n" > "$TMP/res$r$n.log" 2>&1 ||
      { cat "$TMP/res$r$n.log"; fail "residual run $r on $n rank(s)"; }
  done
  diff <(losses "$TMP/resa$n") <(losses "$TMP/resb$n") || fail "$n rank(s): a residual network repeated differently"
  pass "$n rank(s): a residual network repeats bit for bit ($(grep -m1 -oP '^  oneDNN: +\K.*' "$TMP/resa1.log" || echo '?'))"
done
# Folding each relu into the bn or res block before it (nn/fusion.h) changes no bit.
HPCTRAIN_CPU_FUSE=none run_mpi 2 "$BUILD/hpctrain" "${res_args[@]}" --run.dir "$TMP/resnofuse" > "$TMP/resnofuse.log" 2>&1 ||
  { cat "$TMP/resnofuse.log"; fail "residual run without folded relus"; }
diff <(losses "$TMP/resa2") <(losses "$TMP/resnofuse") || fail "folded relus changed the losses"
pass "2 ranks: the same losses bit for bit with and without folded relus"
HPCTRAIN_CPU_LAYOUT=nchw run_mpi 1 "$BUILD/hpctrain" "${res_args[@]}" --run.dir "$TMP/resplain" > "$TMP/resplain.log" 2>&1 ||
  { cat "$TMP/resplain.log"; fail "residual run in the plain layout"; }
python3 - "$TMP/resa1/metrics.jsonl" "$TMP/resplain/metrics.jsonl" <<'PY' || fail "blocked and plain layouts trained differently"
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if "loss" in r]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) >= 5, (len(a), len(b))
worst = max(abs(x - y) / (1e-3 + abs(y)) for x, y in zip(a, b))
assert worst < 2e-3, f"losses differ by {worst:.2e} (relative): {a} vs {b}"
print(f"blocked vs plain layout: losses agree to {worst:.1e} (relative) over {len(a)} records")
PY
pass "blocked and plain layouts give the same losses to float rounding"
