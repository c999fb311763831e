#!/usr/bin/env bash
# ctest-timeout: 240
# `hpctrain doctor` with planted problems: each is reported as ONE line
# "problem: …" naming the thing and its fix, and the doctor exits 1 ("needs
# fixing"), never 2 or a crash; under mpirun the line is printed once.
# Planted: a missing, an unreadable (non-root only) and a non-HDF5 data file;
# a PMI mismatch (srun's task count in the environment, MPI world 1); a run
# directory that cannot be written; an NCCL_SOCKET_IFNAME naming no
# interface; and a rank made slow in the preflight (test hook).
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
export HPC_TEST_TIMEOUT=120  # run_mpi's limit

# expect_problem REGEX cmd…: exit 1, exactly one "problem:" line, and it matches REGEX.
expect_problem() {
  local pattern=$1; shift
  local rc=0
  "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
  [ $rc -eq 1 ] || { cat "$TMP/out" "$TMP/err" >&2; fail "expected exit 1, got $rc: $*"; }
  local n
  n=$(grep -c "^problem: " "$TMP/out" || true)
  [ "$n" -eq 1 ] || { cat "$TMP/out" >&2; fail "expected one problem line, got $n: $*"; }
  grep -Eq -- "^problem: .*$pattern" "$TMP/out" || { grep "^problem: " "$TMP/out" >&2; fail "problem line does not match '$pattern'"; }
  grep -q "^doctor: 1 problem(s) need fixing" "$TMP/out" || fail "summary line missing: $*"
  pass "$(grep -m1 '^problem: ' "$TMP/out" | cut -c1-150)"
}

run=(--run.dir "$TMP/run")

# ---- data file -----------------------------------------------------------------
expect_problem "'$TMP/missing.h5': no such file.*--bind" "$hp" doctor --data.path "$TMP/missing.h5" "${run[@]}"
echo "not hdf5" > "$TMP/text.h5"
expect_problem "text.h5.*not an HDF5 file.*hpcdata pack" "$hp" doctor --data.path "$TMP/text.h5" "${run[@]}"
head -c 5000 "$data" > "$TMP/truncated.h5"
expect_problem "truncated.h5" "$hp" doctor --data.path "$TMP/truncated.h5" "${run[@]}"
if [ "$(id -u)" -ne 0 ]; then  # root reads any file
  cp "$data" "$TMP/locked.h5" && chmod 000 "$TMP/locked.h5"
  expect_problem "locked.h5.*cannot read" "$hp" doctor --data.path "$TMP/locked.h5" "${run[@]}"
fi
# Under mpirun: every rank exits 1, the line appears once (one node: local rank 0 checks).
expect_problem "missing.h5': no such file" run_mpi 2 "$hp" doctor --data.path "$TMP/missing.h5" "${run[@]}" --dist.bucket_mb 1

# ---- launch ----------------------------------------------------------------------
SLURM_STEP_NUM_TASKS=4 expect_problem "srun started 4 tasks but MPI sees a world of 1.*PMI mismatch.*--mpi=pmix" \
  "$hp" doctor "${run[@]}"
grep -q "^preflight: skipped (the launch is broken" "$TMP/out" || fail "PMI mismatch: preflight should be skipped"
# Every mismatched task is its own rank 0: only Slurm's task 0 prints, the others exit 1 quietly.
rc=0
SLURM_STEP_NUM_TASKS=4 SLURM_PROCID=2 "$hp" doctor "${run[@]}" >"$TMP/out" 2>&1 || rc=$?
[ $rc -eq 1 ] && [ ! -s "$TMP/out" ] || { cat "$TMP/out"; fail "task 2 of a PMI mismatch: exit $rc, expected 1 and no output"; }
pass "PMI mismatch: task 2 silent, exit 1"

# ---- run directory -----------------------------------------------------------------
echo x > "$TMP/a-file"
expect_problem "run directory '$TMP/a-file/run' is not writable \($TMP/a-file: not a directory\).*--run.dir" \
  "$hp" doctor --run.dir "$TMP/a-file/run"
if [ "$(id -u)" -ne 0 ]; then  # root writes through any mode bits
  mkdir "$TMP/ro" && chmod 555 "$TMP/ro"
  expect_problem "run directory '$TMP/ro/run' is not writable.*ermission denied" "$hp" doctor --run.dir "$TMP/ro/run"
  chmod 755 "$TMP/ro"
fi

# ---- network settings ------------------------------------------------------------------
NCCL_SOCKET_IFNAME=nosuchif9 expect_problem "NCCL_SOCKET_IFNAME=nosuchif9 matches no network interface on $(hostname).*lo" \
  "$hp" doctor "${run[@]}"

# ---- a slow rank, named by the preflight -------------------------------------------------
HPCTRAIN_FAULT=sleep=150@ring_send:1 expect_problem "slowest: rank 1 on $(hostname) \(node 0\), every link to and from it is slow" \
  run_mpi 3 "$hp" doctor "${run[@]}" --dist.bucket_mb 1
grep -q "(an outlier: see problems)" "$TMP/out" || fail "ring line should point at the outlier"

# ---- several problems at once: one line each, the JSON lists the same ----------------
rc=0
"$hp" doctor --data.path "$TMP/missing.h5" --run.dir "$TMP/a-file/run" >"$TMP/out" 2>&1 || rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '^problem: ' "$TMP/out")" -eq 2 ] || { cat "$TMP/out"; fail "two problems: exit $rc"; }
rc=0
"$hp" doctor --json --data.path "$TMP/missing.h5" --run.dir "$TMP/a-file/run" >"$TMP/json" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "--json with problems: exit $rc, expected 1"
$PYTHON -c '
import json, sys
r = json.load(open(sys.argv[1]))
text = [l[len("problem: "):].rstrip("\n") for l in open(sys.argv[2]) if l.startswith("problem: ")]
assert r["ok"] is False and r["problems"] == text, (r["problems"], text)
assert r["data"]["checks"][0]["opens"] is False and r["run_dir"]["writable"] is False
' "$TMP/json" "$TMP/out" || fail "JSON problems differ from the text report"
pass "two problems: two lines, same in JSON, exit 1"
