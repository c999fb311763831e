#!/usr/bin/env bash
# ctest-timeout: 300
# Crash safety: rank 0 is killed with SIGKILL half-way through writing the
# step-20 checkpoint (fault hook HPCTRAIN_FAULT=exit@ckpt_write:0:20: the
# second write). The step-10 checkpoint must be untouched, the half-written file
# must exist only under its temporary name, and --resume auto must load
# step 10 — skipping, and naming, a damaged newer checkpoint — and finish
# with the same parameters as a run that never crashed. The leftovers are
# cleaned up by the next write.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.steps 30 --train.batch_size 32
      --ckpt.every_steps 10 --log.every 5 --log.progress plain)
run="$TMP/run"

run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --run.dir "$TMP/straight" >"$TMP/straight.log" 2>&1 ||
  { cat "$TMP/straight.log"; fail "straight run"; }

rc=0
HPCTRAIN_FAULT=exit@ckpt_write:0:20 run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --run.dir "$run" >"$TMP/crash.log" 2>&1 || rc=$?
grep -q "HPCTRAIN_FAULT=exit@ckpt_write:0:20: killing myself (SIGKILL) in ckpt_write, step 20" "$TMP/crash.log" ||
  { cat "$TMP/crash.log"; fail "the fault hook did not fire"; }
[ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] || fail "a run killed during a checkpoint exited $rc"
[ -f "$run/ckpt-00000010.h5" ] || fail "the step-10 checkpoint is gone"
[ ! -e "$run/ckpt-00000020.h5" ] || fail "a checkpoint killed half-way appeared under its final name"
partial=$(ls "$run"/ckpt-00000020.h5.tmp-* 2>/dev/null | head -1)
[ -n "$partial" ] || fail "no temporary file: the crash did not happen during the write"
pass "killed during the step-20 write (exit $rc): step 10 intact, $(basename "$partial") left half-written"

# A damaged checkpoint newer than the good one (a flipped byte in the parameters).
"$PYTHON" - "$run/ckpt-00000010.h5" "$run/ckpt-00000025.h5" <<'EOF'
import shutil, sys, h5py
src, dst = sys.argv[1:]
shutil.copy(src, dst)
with h5py.File(dst, "r") as f:
    offset = f["params_flat"].id.get_offset()
with open(dst, "r+b") as f:
    f.seek(offset + 100)
    b = f.read(1)
    f.seek(offset + 100)
    f.write(bytes([b[0] ^ 0x01]))
EOF

run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --run.dir "$run" --resume auto >"$TMP/resume.log" 2>&1 ||
  { cat "$TMP/resume.log"; fail "resume after the crash"; }
grep -q "skipping a damaged checkpoint: checkpoint '$run/ckpt-00000025.h5': params_flat is damaged" "$TMP/resume.log" ||
  { cat "$TMP/resume.log"; fail "the damaged checkpoint was not named"; }
grep -q "resumed from $run/ckpt-00000010.h5: step 10 of 30" "$TMP/resume.log" ||
  { cat "$TMP/resume.log"; fail "did not resume from step 10"; }
pass "--resume auto skipped the damaged step-25 file and loaded step 10"

[ -z "$(ls "$run"/*.tmp-* 2>/dev/null)" ] || fail "the half-written temporary file was not removed"
[ -f "$run/ckpt-00000025.h5.stale" ] || fail "the checkpoint from the abandoned timeline was not set aside"
ls "$run"
"$PYTHON" - "$TMP/straight/ckpt-00000030.h5" "$run/ckpt-00000030.h5" <<'EOF' || fail "final parameters differ from the uninterrupted run"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
for n in ["params_flat", "optimizer/exp_avg", "optimizer/exp_avg_sq"]:
    assert np.array_equal(a[n][...].view(np.uint32), b[n][...].view(np.uint32)), n
EOF
pass "leftovers cleaned up; final parameters bitwise equal to the run that never crashed"
