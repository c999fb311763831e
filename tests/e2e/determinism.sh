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
