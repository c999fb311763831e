#!/usr/bin/env bash
# ctest-timeout: 400
# ZeRO checkpoints are one portable file with the whole state:
#   1. a 4-rank dist.zero 2 run stopped by SIGUSR1 after step 3 (exit 75)
#      resumes on 4 ranks with zero 0 (bitwise the uninterrupted 4-rank zero 0
#      run: same global batch, same summation order), on 2 ranks with zero 1
#      and on 1 rank with zero 0 (same global batch, another summation order:
#      within float tolerance, as the resharding rules say); its checkpoint
#      holds the same datasets, of the same sizes, as a zero 0 one;
#   2. a checkpoint whose optimizer state has the wrong size: one line, exit 2;
#   3. kill -9 of rank 1 in the parameter all-gather (launcher not killing the
#      others): every rank gone within dist.timeout + 10 s, rank 1 named.
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
data=$(mnist_h5)
export OMP_NUM_THREADS=1
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --optim.name adam --optim.lr 1e-3
      --log.every 1 --log.progress plain --ckpt.keep 2)
final() { ls "$1"/ckpt-*.h5 | tail -1; }
# max |a − b| / max |a| over params_flat (0 when bitwise equal)
param_diff() {
  $PYTHON - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = (np.asarray(h5py.File(p, "r")["params_flat"], dtype=np.float64) for p in sys.argv[1:3])
print("%.3g" % (np.abs(a - b).max() / np.abs(a).max()) if a.tobytes() != b.tobytes() else 0)
PY
}

run_mpi 4 "$hp" "${args[@]}" --train.steps 6 --train.batch_size 8 --run.dir "$TMP/ref" > "$TMP/ref.log" 2>&1 \
  || { cat "$TMP/ref.log"; fail "reference: 4 ranks zero 0"; }

stop_at_3() {
  rc=0
  HPCTRAIN_FAULT=sigusr1@step_end:1:3 run_mpi 4 -x HPCTRAIN_FAULT "$hp" "${args[@]}" --train.steps 6 --train.batch_size 8 \
    --dist.zero 2 --run.dir "$1" > "$1.log" 2>&1 || rc=$?
  [ $rc -eq 75 ] || { cat "$1.log"; fail "4 ranks zero 2 with SIGUSR1: exit $rc, expected 75"; }
  [ -f "$1/ckpt-00000003.h5" ] || fail "no checkpoint at step 3"
}
for v in "4 0 8 exact" "2 1 16 tol" "1 0 32 tol"; do
  set -- $v
  stop_at_3 "$TMP/r$1"
  run_mpi "$1" "$hp" "${args[@]}" --train.steps 6 --train.batch_size "$3" --dist.zero "$2" --resume auto --run.dir "$TMP/r$1" \
    > "$TMP/r$1.resume.log" 2>&1 || { cat "$TMP/r$1.resume.log"; fail "resume on $1 ranks zero $2"; }
  grep -q "resumed from .*step 3 of 6" "$TMP/r$1.resume.log" || fail "resume on $1 ranks: not from step 3"
  d=$(param_diff "$(final "$TMP/ref")" "$(final "$TMP/r$1")")
  if [ "$4" = exact ]; then
    [ "$d" = 0 ] || fail "4 ranks zero 2 → 4 ranks zero 0: parameters differ ($d relative), want bitwise"
  else
    awk -v d="$d" 'BEGIN { exit !(d < 1e-5) }' || fail "4 ranks zero 2 → $1 rank(s) zero $2: parameters differ by $d (relative)"
  fi
  pass "4 ranks zero 2 stopped at step 3 (exit 75) → $1 rank(s) zero $2: final parameters ${d/#0/bitwise} vs uninterrupted 4-rank zero 0"
done
# The sharded run's checkpoint has the unsharded layout (names and sizes).
$PYTHON - "$TMP/r4/ckpt-00000003.h5" "$TMP/ref/ckpt-00000006.h5" <<'PY' || fail "zero 2 checkpoint layout differs from zero 0"
import sys, h5py
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
la, lb = ({} for _ in range(2))
a.visititems(lambda n, o: la.__setitem__(n, o.shape) if isinstance(o, h5py.Dataset) else None)
b.visititems(lambda n, o: lb.__setitem__(n, o.shape) if isinstance(o, h5py.Dataset) else None)
sys.exit(0 if la == lb else "%s vs %s" % (sorted(set(la.items()) ^ set(lb.items())), ""))
PY
pass "a zero 2 checkpoint holds the datasets of a zero 0 one, whole"

# 2. Optimizer state of the wrong size.
cp "$TMP/r4/ckpt-00000003.h5" "$TMP/bad.h5"
$PYTHON - "$TMP/bad.h5" <<'PY'
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r+")
n = f["optimizer/exp_avg"].shape[0]
del f["optimizer/exp_avg"]
f["optimizer/exp_avg"] = np.zeros(n - 16, np.float32)
PY
rc=0
run_mpi 2 "$hp" "${args[@]}" --train.steps 6 --train.batch_size 16 --dist.zero 1 --resume "$TMP/bad.h5" --run.dir "$TMP/badrun" \
  > "$TMP/bad.out" 2> "$TMP/bad.err" || rc=$?
[ $rc -eq 2 ] || { cat "$TMP/bad.err"; fail "optimizer state of the wrong size: exit $rc, expected 2"; }
grep -q "exp_avg" "$TMP/bad.err" || { cat "$TMP/bad.err"; fail "the error does not name the dataset"; }
pass "optimizer state of the wrong size: exit 2, $(grep -m1 exp_avg "$TMP/bad.err" | head -c 200)"

# 3. kill -9 in the parameter all-gather.
TIMEOUT=5
wrap='"$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?" >> "$EXITS"'
export EXITS="$TMP/exits"
t0=$(date +%s.%N)
HPC_TEST_TIMEOUT=90 HPCTRAIN_FAULT=exit@allgather:1:4 run_mpi 3 --enable-recovery -x HPCTRAIN_FAULT -x EXITS \
  bash -c "$wrap" _ "$hp" "${args[@]}" --train.steps 1000 --train.batch_size 8 --dist.zero 1 \
  --dist.timeout $TIMEOUT --run.dir "$TMP/dead" > "$TMP/dead.out" 2> "$TMP/dead.err" || true
t1=$(date +%s.%N)
grep -q "HPCTRAIN_FAULT=exit" "$TMP/dead.err" || { cat "$TMP/dead.err"; fail "the fault did not fire"; }
grep -qE "rank 1 \(host \S+, pid [0-9]+\) does not answer: its process is gone" "$TMP/dead.err" \
  || { cat "$TMP/dead.err"; fail "kill -9 in the all-gather: the report does not name rank 1"; }
grep -q "rank 0 exit 3" "$EXITS" || { cat "$EXITS" "$TMP/dead.err"; fail "rank 0 did not exit 3"; }
grep -q "rank 1 exit 137" "$EXITS" || { cat "$EXITS"; fail "rank 1 was not the one killed"; }
awk -v a="$t0" -v b="$t1" -v l=$((TIMEOUT + 25)) 'BEGIN { exit !(b - a <= l) }' \
  || fail "kill -9 in the all-gather: the job took too long"
pass "kill -9 of rank 1 in the parameter all-gather: $(grep -m1 -oP 'collective #[0-9]+ \(\w+' "$TMP/dead.err"), rank 1 named, rank 0 exit 3"
