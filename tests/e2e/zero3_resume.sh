#!/usr/bin/env bash
# ctest-timeout: 400
# Stage 3's checkpoints are the one portable file of every other stage:
#   1. a 3-rank dist.zero 3 run stopped by SIGUSR1 after step 2 (exit 75)
#      resumes on 2 ranks with dist.zero 0 (the same global batch): its final
#      parameters within 1e-5 (relative) of the uninterrupted run's; and back:
#      a 1-rank dist.zero 0 run stopped the same way resumes on 3 ranks with
#      dist.zero 3, within 1e-5 too;
#   2. hpctrain eval, predict, sample and export read a zero-3 checkpoint as
#      any other: eval's val_loss is the training run's final one, bitwise;
#   3. a checkpoint with a shard that never reached it (one rank's range of
#      params_flat zero) is one line naming the dataset, exit 2;
#   4. kill -9 of rank 1 while a parameter gather is in flight (mpirun not
#      killing the others): every rank gone within dist.timeout + 25 s, rank 1
#      named, exit 3.
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
text=/usr/share/common-licenses/BSD
[ -f "$text" ] || skip "no $text (Debian base-files)"
"$BUILD/hpcdata" pack --from text "$text" --val-fraction 0.2 -o "$TMP/bsd.h5" > /dev/null || fail "pack"
# optim.eps 1e-5: another number of ranks sums the batch in another order, and Adam divides a coordinate
# whose gradient nearly cancels by sqrt(v) + eps, so with the default 1e-8 rounding noise of 1e-9 moves
# it by a sizeable part of a step (tests/mpi/test_dist_equivalence.cpp explains the bound).
args=(--data.path "$TMP/bsd.h5" --model.preset gpt-tiny --optim.name adamw --optim.lr 3e-3 --optim.eps 1e-5
      --log.every 1 --log.progress plain --ckpt.keep 2)
final() { ls "$1"/ckpt-*.h5 | tail -1; }
param_diff() {
  $PYTHON - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = (np.asarray(h5py.File(p, "r")["params_flat"], dtype=np.float64) for p in sys.argv[1:3])
print("%.3g" % (np.abs(a - b).max() / np.abs(a).max()) if a.tobytes() != b.tobytes() else 0)
PY
}
z3=(--dist.zero 3 --dist.zero_keep_mb 0)  # every unit gathered again for backward
z0=(--dist.zero 0)

# 1. The uninterrupted run, then 3 ranks zero 3 → 2 ranks zero 0, and 1 rank zero 0 → 3 ranks zero 3.
run_mpi 3 "$hp" "${args[@]}" "${z3[@]}" --train.steps 4 --train.batch_size 2 --run.dir "$TMP/ref" > "$TMP/ref.log" 2>&1 \
  || { cat "$TMP/ref.log"; fail "reference: 3 ranks zero 3"; }
stop_resume() {  # name, then: ranks batch stage options for the stopped run, and for the resumed one
  local name=$1 w1=$2 b1=$3 w2=$5 b2=$6 rc=0
  local -n o1=$4 o2=$7
  HPCTRAIN_FAULT=sigusr1@step_end:0:2 run_mpi "$w1" -x HPCTRAIN_FAULT "$hp" "${args[@]}" "${o1[@]}" \
    --train.steps 4 --train.batch_size "$b1" --run.dir "$TMP/$name" > "$TMP/$name.log" 2>&1 || rc=$?
  [ $rc -eq 75 ] || { cat "$TMP/$name.log"; fail "$name: exit $rc after SIGUSR1, expected 75"; }
  run_mpi "$w2" "$hp" "${args[@]}" "${o2[@]}" --train.steps 4 --train.batch_size "$b2" --resume auto --run.dir "$TMP/$name" \
    > "$TMP/$name.resume.log" 2>&1 || { cat "$TMP/$name.resume.log"; fail "$name: resume"; }
  grep -q "resumed from .*step 2 of 4" "$TMP/$name.resume.log" || fail "$name: not resumed from step 2"
  d=$(param_diff "$(final "$TMP/ref")" "$(final "$TMP/$name")")
  awk -v d="$d" 'BEGIN { exit !(d < 1e-5) }' || fail "$name: final parameters differ by $d (relative)"
  pass "$name: stopped at step 2 (exit 75), resumed; final parameters ${d/#0/bitwise} vs the uninterrupted run"
}
stop_resume "3-ranks-zero3-to-2-ranks-zero0" 3 2 z3 2 3 z0
stop_resume "1-rank-zero0-to-3-ranks-zero3" 1 6 z0 3 2 z3

# 2. The commands that read checkpoints.
ckpt=$(final "$TMP/ref")
run_mpi 2 "$hp" eval --checkpoint "$ckpt" --data.path "$TMP/bsd.h5" --out "$TMP/eval.json" > "$TMP/eval.log" 2>&1 \
  || { cat "$TMP/eval.log"; fail "eval of a zero-3 checkpoint"; }
$PYTHON - "$TMP/ref/metrics.jsonl" "$TMP/eval.json" <<'PY' || fail "eval differs from the training run's final evaluation"
import json, sys
final = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][-1]
assert json.load(open(sys.argv[2]))["val_loss"] == final["val_loss"]
PY
timeout -k 10 120 "$hp" predict --checkpoint "$ckpt" --data.path "$TMP/bsd.h5" --out "$TMP/p.h5" > "$TMP/p.log" 2>&1 \
  || { cat "$TMP/p.log"; fail "predict from a zero-3 checkpoint"; }
timeout -k 10 60 "$hp" sample --checkpoint "$ckpt" --prompt "Redistribution" --tokens 8 --temperature 0 \
  > "$TMP/s.out" 2> "$TMP/s.err" || { cat "$TMP/s.err"; fail "sample from a zero-3 checkpoint"; }
timeout -k 10 60 "$hp" export --checkpoint "$ckpt" --format torch -o "$TMP/exported" > "$TMP/x.log" 2>&1 \
  || { cat "$TMP/x.log"; fail "export from a zero-3 checkpoint"; }
[ -s "$TMP/p.h5" ] && [ -s "$TMP/s.out" ] && [ -s "$TMP/exported/model.safetensors" ] || fail "an output is missing"
pass "eval (= the training's final val_loss, bitwise), predict, sample and export read a zero-3 checkpoint"

# 3. A shard missing: the last rank's part of params_flat never written (zeros).
cp "$ckpt" "$TMP/hole.h5"
$PYTHON - "$TMP/hole.h5" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r+")
d = f["params_flat"]
n = d.shape[0]
d[2 * n // 3:] = np.zeros(n - 2 * n // 3, np.float32)
PY
expect_exit 2 "params_flat is damaged" run_mpi 2 "$hp" "${args[@]}" "${z0[@]}" --train.steps 4 --train.batch_size 3 \
  --resume "$TMP/hole.h5" --run.dir "$TMP/hole"

# 4. kill -9 in a parameter gather.
TIMEOUT=5
wrap='"$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?" >> "$EXITS"'
export EXITS="$TMP/exits"
t0=$(date +%s.%N)
HPC_TEST_TIMEOUT=90 HPCTRAIN_FAULT=exit@allgather:1:3 run_mpi 3 --enable-recovery -x HPCTRAIN_FAULT -x EXITS \
  bash -c "$wrap" _ "$hp" "${args[@]}" "${z3[@]}" --train.steps 1000 --train.batch_size 2 \
  --dist.timeout $TIMEOUT --run.dir "$TMP/dead" > "$TMP/dead.out" 2> "$TMP/dead.err" || true
t1=$(date +%s.%N)
grep -q "HPCTRAIN_FAULT=exit" "$TMP/dead.err" || { cat "$TMP/dead.err"; fail "the fault did not fire"; }
grep -qE "rank 1 \(host \S+, pid [0-9]+\) does not answer: its process is gone" "$TMP/dead.err" \
  || { cat "$TMP/dead.err"; fail "kill -9 in a parameter gather: the report does not name rank 1"; }
# The lowest rank waiting in the collective reports and exits 3; the MPI_Abort it calls takes the other.
grep -qE "rank [02] exit 3" "$EXITS" || { cat "$EXITS" "$TMP/dead.err"; fail "no surviving rank exited 3"; }
grep -q "rank 1 exit 137" "$EXITS" || { cat "$EXITS"; fail "rank 1 was not the one killed"; }
awk -v a="$t0" -v b="$t1" -v l=$((TIMEOUT + 25)) 'BEGIN { exit !(b - a <= l) }' \
  || fail "kill -9 in a parameter gather: the job took too long"
pass "kill -9 of rank 1 in a parameter gather: $(grep -m1 -oP 'collective #[0-9]+ \(\w+' "$TMP/dead.err"), rank 1 named, exit 3"
