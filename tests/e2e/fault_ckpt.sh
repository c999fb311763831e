#!/usr/bin/env bash
# ctest-timeout: 300
# Faults while a checkpoint is written, on 2 ranks (HPCTRAIN_FAULT, see
# src/core/fault.h). Checkpoints every 10 of 30 steps.
#   1. disk full (ENOSPC) in the middle of the step-20 write: exit 74 on every
#      rank, one line naming the file and "no space left on device" and the
#      intact previous one; no temporary file; resuming continues from step 10
#      and ends bitwise where the uninterrupted run ends. Checkpoints are
#      written in the background (ckpt.async), so the error surfaces at the
#      first step boundary after the write failed (step S ≥ 20, named in the
#      line), and no step after S runs;
#   2. the same at the rename of the end-of-training checkpoint;
#   3. a real full disk: the run directory on a small tmpfs (skipped where
#      mounting is not allowed): the same outcome as 1, no crash on the way out;
#   4. SIGUSR1 / SIGTERM raised on rank 0 while it writes the step-10
#      checkpoint (in the background: training is at step S > 10 by then):
#      that checkpoint completes, every rank stops after the same step S with
#      a checkpoint and exits 75, and the resume from S is bit-exact;
#   5. SIGINT raised there: the process ends at once (no handler: Ctrl-C),
#      the step-20 file never appears under its name, step 10 is intact and
#      resuming cleans up the temporary file.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fault_lib.bash"
straight_run

# ---- 1. ENOSPC half-way through writing the step-20 checkpoint ----------------
# Steps from 20 on take 20 ms (sleep=20@step_end): the failed write (rank 0 still takes both ranks' pieces,
# each rank's writer thread sharing 2 cores with training) surfaces before step 30 however loaded the machine.
fault_run nospc "enospc@ckpt_write:0:20,sleep=20@step_end:*:20"
expect_rc nospc 74
every_rank_exits nospc 74
expect_err nospc "^hpctrain: error on rank 0: cannot write checkpoint $TMP/nospc/ckpt-00000020.h5: no space left on device \(ENOSPC\); stopping after step (2[0-9]) \(the last one, $TMP/nospc/ckpt-00000010.h5, is intact\)$"
[ ! -e "$TMP/nospc/ckpt-00000020.h5" ] || fail "nospc: a failed checkpoint appeared under its name"
no_leftovers "$TMP/nospc"
stopped=$(grep -oP 'stopping after step \K[0-9]+' "$TMP/nospc.err")
last_row=$(awk '$1 == 0 && $2 ~ /^[0-9]+$/ {s = $2} END {print s + 0}' "$TMP/nospc.out")
[ "$last_row" -le "$stopped" ] || fail "nospc: training went on after the disk was full (step $last_row > $stopped)"
pass "ENOSPC writing step 20: exit 74 on both ranks after ${secs} s, $(grep -m1 -o 'no space left.*' "$TMP/nospc.err")"
resume_matches nospc 10
pass "resumed from step 10 after the full disk: bitwise the uninterrupted result"

# ---- 2. ENOSPC at the rename of the end-of-training checkpoint ------------------
fault_run nospc_end "enospc@ckpt_rename:0:30"
expect_rc nospc_end 74
every_rank_exits nospc_end 74
expect_err nospc_end "cannot write checkpoint $TMP/nospc_end/ckpt-00000030.h5: no space left on device \(ENOSPC\); stopping after step 30 \(the last one, $TMP/nospc_end/ckpt-00000020.h5, is intact\)"
no_leftovers "$TMP/nospc_end"
[ ! -e "$TMP/nospc_end/ckpt-00000030.h5" ] || fail "nospc_end: the final checkpoint appeared"
pass "ENOSPC at the final rename: exit 74, step 20 intact, no temporary file"

# ---- 3. a real full disk ----------------------------------------------------------
mnt="$TMP/small-fs"
mkdir -p "$mnt"
# Room for one checkpoint and the logs, not for a second checkpoint beside it.
ckpt_kb=$(( $(stat -c %s "$TMP/straight/ckpt-00000010.h5") / 1024 ))
if mount -t tmpfs -o size=$((ckpt_kb * 3 / 2))k tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null || true; rm -rf "$TMP"' EXIT
  FAULT_DIR="$mnt/run" fault_run real_full "sleep=20@step_end:*:20"  # as in 1
  ls "$mnt/run" >"$TMP/real_full.ls"
  umount "$mnt" 2>/dev/null || true
  expect_rc real_full 74
  every_rank_exits real_full 74
  expect_err real_full "cannot write checkpoint $mnt/run/ckpt-00000020.h5: no space left on device \(ENOSPC\); stopping after step 2[0-9] \(the last one, $mnt/run/ckpt-00000010.h5, is intact\)"
  [ "$(grep -v 'HPCTRAIN_FAULT=' "$TMP/real_full.err" | grep -c '^hpctrain: ')" -eq 1 ] || { cat "$TMP/real_full.err"; fail "real_full: more than the one line"; }
  ! grep -q '\.tmp-' "$TMP/real_full.ls" || { cat "$TMP/real_full.ls"; fail "real_full: a temporary file is left"; }
  grep -q '^ckpt-00000010.h5$' "$TMP/real_full.ls" || fail "real_full: the step-10 checkpoint is gone"
  pass "a real full disk (tmpfs of $((ckpt_kb * 3 / 2)) KiB): exit 74, the same one line, no crash"
else
  echo "note: cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): the real full disk is not tested"
fi

# ---- 4. SIGUSR1 / SIGTERM while the step-10 checkpoint is written ---------------
for sig in sigusr1 sigterm; do
  fault_run "$sig" "$sig@ckpt_write:0:10"
  expect_rc "$sig" 75
  every_rank_exits "$sig" 75
  SIG=$(echo "$sig" | tr a-z A-Z)
  at=$(grep -oP "^stop requested \($SIG on rank 0\) after step \K(1[1-9]|2[0-9])$" "$TMP/$sig.out") ||
    { cat "$TMP/$sig.out"; fail "$sig: no agreed stop after a step in 11..29"; }
  grep -q "^stopped after step $at on all 2 rank(s), checkpoint written: exit 75 (requeue)$" "$TMP/$sig.out" ||
    { cat "$TMP/$sig.out"; fail "$sig: no checkpoint at the stop"; }
  [ -f "$TMP/$sig/ckpt-00000010.h5" ] || fail "$sig: the checkpoint being written when the signal came is missing"
  no_leftovers "$TMP/$sig"
  resume_matches "$sig" "$at"
  pass "$SIG during the step-10 write: it completed, both ranks stopped after step $at, exit 75, bit-exact resume"
done

# ---- 5. SIGINT while the step-20 checkpoint is written -----------------------------
fault_run sigint "sigint@ckpt_write:0:20"
[ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] || fail "sigint: exit $rc"
grep -q "^rank 0 exit 130$" "$TMP/sigint.exits" || { cat "$TMP/sigint.exits"; fail "sigint: rank 0 did not end by SIGINT (128 + 2)"; }
[ ! -e "$TMP/sigint/ckpt-00000020.h5" ] || fail "sigint: a half-written checkpoint appeared under its name"
ls "$TMP/sigint" | grep -q '^ckpt-00000020.h5.tmp-' || { ls "$TMP/sigint"; fail "sigint: the signal did not land in the write"; }
pass "SIGINT during the step-20 write: the job ended (exit $rc) in ${secs} s, only a temporary file of step 20"
resume_matches sigint 10
pass "resumed from step 10 after SIGINT: bit-exact, and the temporary file is gone"
