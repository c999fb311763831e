#!/usr/bin/env bash
# ctest-timeout: 300
# Data and log I/O failures and lost ranks, on 2 ranks (HPCTRAIN_FAULT, see
# src/core/fault.h):
#   1. EIO reading samples mid-epoch on rank 1, memory-mapped dataset;
#   2. the same on rank 0 through the H5Dread path (a chunked copy of the file);
#      each: exit 74, one line naming the file, the dataset and the rows, the
#      loader threads joined and every rank gone within the timeout, no crash,
#      the step-10 checkpoint intact;
#   3. no space for metrics.jsonl from step 12 on: one warning naming the file,
#      training runs to the end (exit 0), every line that is there is whole JSON;
#      and for real on one process, stdout and metrics.jsonl on /dev/full;
#   4. a rank that stalls at step 4 (stall@step): exit 3 within dist.timeout + 10 s,
#      the report names it (stall/exit at a step: dist_failure.sh);
#   5. a rank that dies at step 4 (exit@step): the launcher ends the job, names it.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fault_lib.bash"

# ---- 1, 2. EIO on a dataset read ---------------------------------------------------
"$PYTHON" - "$data" "$TMP/chunked.h5" <<'EOF'
import sys, h5py
src, dst = sys.argv[1:]
with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
    def copy(name, obj):
        if isinstance(obj, h5py.Group):
            g = b.require_group(name)
        else:
            g = b.create_dataset(name, data=obj[...], chunks=(100,) + obj.shape[1:])
        for k, v in obj.attrs.items():
            g.attrs[k] = v
    a.visititems(copy)
EOF
eio_case() {  # NAME FAULT RANK FILE ROWS-REGEX PATH-WORD
  local name=$1 fault=$2 rank=$3 file=$4 rows=$5 how=$6
  # Synchronous saves: a background write of step 10 may still be in flight when the failing rank
  # aborts the job 4 steps later (a few ms on this model; a loaded machine writes slower), and an
  # interrupted write leaves no file, by design. The promise tested is the written one's survival.
  FAULT_DATA="$file" fault_run "$name" "$fault" --data.workers 2 --ckpt.async false
  expect_rc "$name" 74
  # With two workers, the first read to fail may be an image (x) or a label (y) batch.
  expect_err "$name" "^hpctrain: error on rank $rank: data file '$file': /train/[xy]: reading $rows failed: Input/output error \(EIO\)$"
  [ "$secs" -lt 60 ] || fail "$name: took $secs s to end"
  [ -f "$TMP/$name/ckpt-00000010.h5" ] || fail "$name: the step-10 checkpoint is missing"
  no_leftovers "$TMP/$name"
  pass "EIO ($how) on rank $rank: exit 74 after $secs s: $(grep -m1 -o "reading .*" "$TMP/$name.err")"
}
eio_case eio_mapped "eio@data_read:1:14" 1 "$data" "32 samples \(rows [0-9]+ to [0-9]+\)" "memory-mapped"
eio_case eio_h5dread "eio@data_read:0:14" 0 "$TMP/chunked.h5" "rows? [0-9]+( to [0-9]+)?" "H5Dread"
grep -qi "not memory-mappable" "$TMP/eio_h5dread.out" "$TMP/eio_h5dread.err" ||
  { cat "$TMP/eio_h5dread.out"; fail "eio_h5dread: the chunked file was memory-mapped after all"; }

# ---- 3. no space left for metrics.jsonl --------------------------------------------
fault_run metrics "enospc@metrics:0:12"
expect_rc metrics 0
every_rank_exits metrics 0
expect_err metrics "^hpctrain: warning: cannot write $TMP/metrics/metrics.jsonl \(No space left on device\): training continues; records that cannot be written are left out$"
[ "$(grep -c 'cannot write .*metrics.jsonl' "$TMP/metrics.err")" -eq 1 ] || fail "metrics: warned more than once"
grep -q "^final: " "$TMP/metrics.out" || fail "metrics: training did not finish"
"$PYTHON" - "$TMP/metrics/metrics.jsonl" <<'EOF' || fail "metrics: metrics.jsonl is damaged or holds records past step 12"
import json, sys
steps = [json.loads(line)["step"] for line in open(sys.argv[1])]
assert steps == [5, 10], steps
EOF
pass "no space for metrics.jsonl from step 12: one warning, training finished (exit 0), whole lines only"

# The same for real, on one process: metrics.jsonl and stdout both on /dev/full (every write: ENOSPC).
mkdir -p "$TMP/devfull"
ln -s /dev/full "$TMP/devfull/metrics.jsonl"
rc=0
timeout -k 5 60 "$BUILD/hpctrain" "${FAULT_ARGS[@]}" --run.dir "$TMP/devfull" >/dev/full 2>"$TMP/devfull.err" || rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/devfull.err"; fail "devfull: exit $rc, expected 0"; }
grep -qx "hpctrain: warning: cannot write the progress output (stdout: No space left on device); training continues" \
  "$TMP/devfull.err" || { cat "$TMP/devfull.err"; fail "devfull: no warning about stdout"; }
grep -q "^hpctrain: warning: cannot write $TMP/devfull/metrics.jsonl (No space left on device)" "$TMP/devfull.err" ||
  { cat "$TMP/devfull.err"; fail "devfull: no warning about metrics.jsonl"; }
[ "$(grep -c '' "$TMP/devfull.err")" -eq 2 ] || { cat "$TMP/devfull.err"; fail "devfull: expected exactly the two warnings"; }
[ -f "$TMP/devfull/ckpt-00000030.h5" ] || fail "devfull: training did not reach its end"
pass "stdout and metrics.jsonl on /dev/full: one warning each, training finished with its checkpoints (exit 0)"

# ---- 4. a stalled rank, 5. a dead rank ---------------------------------------------
FAULT_TIMEOUT=5 fault_run stall "stall@step:1:4"
expect_rc stall 3
expect_err stall "rank 1 \(host \S+, pid [0-9]+\) is stuck at step 4"
[ "$secs" -le 20 ] || fail "stall: took $secs s, dist.timeout is 5 s"
pass "stall@step:1:4: exit 3 after $secs s, the report names rank 1"
fault_run dead "exit@step:1:4"
[ "$rc" -ne 0 ] || fail "dead: exit 0"
expect_err dead "HPCTRAIN_FAULT=exit@step:1:4: killing myself"
grep -q "^rank 1 exit 137$" "$TMP/dead.exits" || { cat "$TMP/dead.exits"; fail "dead: rank 1 was not killed"; }
[ "$secs" -le 20 ] || fail "dead: took $secs s"
pass "exit@step:1:4: rank 1 killed (SIGKILL), the job ended (exit $rc) after $secs s"
