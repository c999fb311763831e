#!/usr/bin/env bash
# ctest-timeout: 300
# Signals at the worst moments of a step, raised by one rank on itself
# (HPCTRAIN_FAULT sig…@backward / @allreduce, see src/core/fault.h),
# on 2 ranks:
#   1. SIGUSR1 on rank 1 during backward of step 7 (gradient buckets in flight);
#   2. SIGTERM on rank 0 while step 12's AllReduce is in flight;
#   3. SIGUSR1 on rank 1 while step 20's AllReduce is in flight, the step of a
#      periodic checkpoint;
#   each: the step completes, both ranks stop after it, rank 0 checkpoints,
#   every rank exits 75 by itself, and the resume ends bitwise where the
#   uninterrupted run ends;
#   4. SIGINT on rank 1 during backward: no handler (Ctrl-C means now), the
#      rank ends at once, the launcher ends the job, nothing new is written
#      and the last checkpoint resumes bit-exactly.
# (Signals during the checkpoint write: fault_ckpt.sh.)
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fault_lib.bash"
straight_run

agreed_stop() {  # NAME FAULT SIGNAL RANK STEP
  local name=$1 fault=$2 sig=$3 rank=$4 step=$5
  fault_run "$name" "$fault"
  expect_rc "$name" 75
  every_rank_exits "$name" 75
  expect_err "$name" "^hpctrain: rank $rank: HPCTRAIN_FAULT=$fault: raising $sig in "
  grep -q "^stop requested ($sig on rank $rank) after step $step$" "$TMP/$name.out" ||
    { cat "$TMP/$name.out"; fail "$name: no agreed stop after step $step"; }
  grep -q "^stopped after step $step on all 2 rank(s), checkpoint written: exit 75 (requeue)$" "$TMP/$name.out" ||
    { cat "$TMP/$name.out"; fail "$name: no checkpoint at the stop"; }
  [ -f "$(printf '%s/ckpt-%08d.h5' "$TMP/$name" "$step")" ] || fail "$name: no checkpoint of step $step"
  no_leftovers "$TMP/$name"
  resume_matches "$name" "$step"
  pass "$sig on rank $rank ($fault): both ranks stopped after step $step, exit 75, bit-exact resume"
}

agreed_stop usr1_backward "sigusr1@backward:1:7" SIGUSR1 1 7
agreed_stop term_allreduce "sigterm@allreduce:0:12" SIGTERM 0 12
agreed_stop usr1_allreduce_ckpt "sigusr1@allreduce:1:20" SIGUSR1 1 20

# ---- 4. SIGINT during backward ----------------------------------------------------
# Steps 11.. take 20 ms (sleep=20@step_end): the step-10 write in the background (rank 0 assembles it from
# both ranks' pieces) is done before step 15 however loaded the machine; SIGINT ends every rank at once.
fault_run sigint "sigint@backward:1:15,sleep=20@step_end:*:11"
[ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] || fail "sigint: exit $rc"
grep -q "^rank 1 exit 130$" "$TMP/sigint.exits" || { cat "$TMP/sigint.exits"; fail "sigint: rank 1 did not end by SIGINT (128 + 2)"; }
[ "$(ls "$TMP/sigint" | grep -c '^ckpt-')" -eq 1 ] && [ -f "$TMP/sigint/ckpt-00000010.h5" ] ||
  { ls "$TMP/sigint"; fail "sigint: expected only the step-10 checkpoint"; }
no_leftovers "$TMP/sigint"
pass "SIGINT on rank 1 during backward of step 15: the job ended (exit $rc) after ${secs} s, step 10 intact"
resume_matches sigint 10
pass "resumed from step 10 after SIGINT: bit-exact"
