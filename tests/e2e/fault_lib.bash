# Helpers of the fault-injection tests (tests/e2e/fault_*.sh), sourced after lib.bash.
#   fault_run NAME FAULT [args…]   2-rank training with HPCTRAIN_FAULT=FAULT into $TMP/NAME (or
#                                  $FAULT_DIR), on $FAULT_DATA if set, with dist.timeout $FAULT_TIMEOUT if set
#                                  (output $TMP/NAME.out / .err, exit code in $rc, seconds in $secs)
#   expect_rc NAME CODE…           the run exited with one of CODEs
#   every_rank_exits NAME CODE     each rank exited CODE by itself
#   expect_err NAME REGEX          its stderr has a line matching REGEX
#   no_leftovers DIR               no temporary checkpoint file in DIR
#   resume_matches NAME STEP       --resume auto continues from ckpt-STEP and ends bitwise where
#                                  the uninterrupted run ($TMP/straight) ended
# Small runs (mlp, 30 steps of 32 per rank, a checkpoint every 10): a few seconds each.
data=$(mnist_h5)
export HPC_TEST_TIMEOUT=${HPC_TEST_TIMEOUT:-90}
FAULT_ARGS=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.steps 30 --train.batch_size 32
            --ckpt.every_steps 10 --log.every 5 --log.progress plain --dist.timeout 20)

fault_run() {
  local name=$1 fault=$2 start args=("${FAULT_ARGS[@]}")
  shift 2
  # The data file and dist.timeout can be swapped for one run: FAULT_DATA=… FAULT_TIMEOUT=… fault_run …
  args[1]=${FAULT_DATA:-${args[1]}}
  args[${#args[@]}-1]=${FAULT_TIMEOUT:-${args[${#args[@]}-1]}}
  start=$(date +%s%N)
  rc=0
  # Each rank's own exit code goes to $TMP/NAME.exits (mpirun reports only the first).
  HPCTRAIN_FAULT="$fault" EXITS="$TMP/$name.exits" run_mpi 2 -x HPCTRAIN_FAULT -x EXITS \
    bash -c '"$@"; c=$?; echo "rank $OMPI_COMM_WORLD_RANK exit $c" >>"$EXITS"; exit $c' _ \
    "$BUILD/hpctrain" "${args[@]}" --run.dir "${FAULT_DIR:-$TMP/$name}" "$@" \
    >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  secs=$(( ($(date +%s%N) - start) / 1000000000 ))
  [ "$secs" -lt "$HPC_TEST_TIMEOUT" ] || { cat "$TMP/$name.err"; fail "$name: hung (killed after $HPC_TEST_TIMEOUT s)"; }
  # Whatever the failure, no rank may crash on the way out.
  ! grep -qE "Segmentation fault|terminate called|core dumped|Aborted \(|signal 11|signal 6 " "$TMP/$name.err" ||
    { cat "$TMP/$name.err"; fail "$name: a rank crashed"; }
}

expect_rc() {
  local name=$1 code
  shift
  for code in "$@"; do [ "$rc" -eq "$code" ] && return; done
  cat "$TMP/$name.out" "$TMP/$name.err" >&2
  fail "$name: exit $rc, expected $*"
}

# every_rank_exits NAME CODE: both ranks ended by themselves with CODE (no abort, no kill).
every_rank_exits() {
  [ "$(sort "$TMP/$1.exits" 2>/dev/null | tr '\n' ' ')" = "rank 0 exit $2 rank 1 exit $2 " ] ||
    { cat "$TMP/$1.exits" "$TMP/$1.err" >&2; fail "$1: not every rank exited $2 by itself"; }
}

expect_err() {
  grep -qE -- "$2" "$TMP/$1.err" || { cat "$TMP/$1.err" >&2; fail "$1: stderr does not match '$2'"; }
}

no_leftovers() {
  [ -z "$(ls "$1" | grep -E '\.tmp-')" ] || { ls "$1"; fail "a temporary checkpoint file is left in $1"; }
}

# The uninterrupted run every resume is compared with.
straight_run() {
  run_mpi 2 "$BUILD/hpctrain" "${FAULT_ARGS[@]}" --run.dir "$TMP/straight" >"$TMP/straight.log" 2>&1 ||
    { cat "$TMP/straight.log"; fail "the run without faults"; }
}

resume_matches() {
  local name=$1 step=$2 ckpt
  ckpt=$(printf '%s/ckpt-%08d.h5' "$TMP/$name" "$step")
  run_mpi 2 "$BUILD/hpctrain" "${FAULT_ARGS[@]}" --run.dir "$TMP/$name" --resume auto >"$TMP/$name.resume.log" 2>&1 ||
    { cat "$TMP/$name.resume.log"; fail "$name: resuming failed"; }
  grep -q "resumed from $ckpt: step $step of 30" "$TMP/$name.resume.log" ||
    { cat "$TMP/$name.resume.log"; fail "$name: did not resume from step $step"; }
  "$PYTHON" - "$TMP/straight/ckpt-00000030.h5" "$TMP/$name/ckpt-00000030.h5" <<'EOF' || fail "$name: the resumed run ends elsewhere"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
for n in ["params_flat", "optimizer/exp_avg", "optimizer/exp_avg_sq"]:
    assert np.array_equal(a[n][...].view(np.uint32), b[n][...].view(np.uint32)), n
EOF
  no_leftovers "$TMP/$name"
}
