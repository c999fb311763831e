#!/usr/bin/env bash
# ctest-timeout: 300
# The sbatch scripts' own logic, without Slurm (runs wherever MPI does; the
# real-Slurm test is slurm_requeue.sh): slurm/train-cpu.sbatch run by bash
# with HPCTRAIN_LAUNCHER=mpirun. SIGUSR1 to the batch shell must be trapped
# and forwarded (mpirun passes it to the ranks), the ranks checkpoint and
# exit 75, and the script — not in a Slurm job, so no requeue — exits 75.
# Run again, the script adds --resume auto and the run completes. The
# script's own HPCTRAIN_* knobs must not reach hpctrain (it refuses unknown
# HPCTRAIN_* variables). A step that dies before training starts is requeued
# a bounded number of times (fake Slurm clients, a fake trainer). Also:
# submit-chain.sh's argument checks.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.steps 300 --train.batch_size 32
      --log.every 5 --log.progress plain --run.dir "$TMP/run")
job=(env HPCTRAIN_HOME="$ROOT" HPCTRAIN_BIN="$BUILD/hpctrain" HPCTRAIN_LAUNCHER=mpirun HPCTRAIN_BIND=/scratch
     SLURM_NTASKS=2 timeout -k 10 300 bash "$ROOT/slurm/train-cpu.sbatch" "${args[@]}")

HPCTRAIN_FAULT=sleep=30@step_end "${job[@]}" >"$TMP/job1.log" 2>&1 &
pid=$!  # env, which became timeout; the batch shell is its child
for _ in $(seq 1 600); do
  grep -qE '"step": ([1-9][0-9]+)' "$TMP/run/metrics.jsonl" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$TMP/job1.log"; fail "the job script ended early"; }
  sleep 0.1
done
shell=$(pgrep -P "$pid" bash) || fail "no batch shell under $pid"
kill -USR1 "$shell"
rc=0
wait "$pid" || rc=$?
cat "$TMP/job1.log" | grep -E "^hpctrain job|stop|checkpoint:" || true
[ "$rc" -eq 75 ] || { cat "$TMP/job1.log"; fail "the job script exited $rc, expected 75"; }
grep -q "hpctrain job: got SIGUSR1, forwarding SIGUSR1 to the job step" "$TMP/job1.log" || fail "no forwarding"
grep -q "mpirun -np 2 --bind-to none $BUILD/hpctrain .* --resume auto" "$TMP/job1.log" || fail "no --resume auto"
step=$(grep -oP '^stopped after step \K[0-9]+(?= on all 2 rank)' "$TMP/job1.log") || fail "no agreed stop"
grep -q "checkpointed; not a Slurm job, so nothing to requeue" "$TMP/job1.log" || fail "no requeue message"
pass "SIGUSR1 to the batch shell: forwarded, checkpoint at step $step, exit 75"

"${job[@]}" >"$TMP/job2.log" 2>&1 || { cat "$TMP/job2.log"; fail "second job"; }
grep -q "resumed from $(printf '%s/ckpt-%08d.h5' "$TMP/run" "$step"): step $step of 300" "$TMP/job2.log" ||
  { cat "$TMP/job2.log"; fail "the second job did not resume"; }
grep -q "hpctrain job: finished with exit code 0" "$TMP/job2.log" || fail "no clean finish"
pass "the next job resumed from step $step and finished with exit 0"

# A busy controller at the requeue: squeue answers only on its third call and
# scontrol requeue times out once; when the requeue is accepted, Slurm sends
# the batch shell SIGTERM (and here a late SIGUSR1 too). The script must ask
# again, requeue, say so and exit 0, not die silently on the signal.
mkdir -p "$TMP/bin"
cat >"$TMP/bin/squeue" <<'EOF2'
#!/bin/bash
case "$*" in *"-o %e"*) echo Unknown; exit 0 ;; esac
n=$(($(cat "$FAKE_DIR/squeue.calls" 2>/dev/null || echo 0) + 1)); echo "$n" >"$FAKE_DIR/squeue.calls"
[ "$n" -ge 3 ] || { echo "squeue: error: Socket timed out on send/recv operation" >&2; exit 1; }
echo RUNNING
EOF2
cat >"$TMP/bin/scontrol" <<'EOF2'
#!/bin/bash
[ "$1" = requeue ] || exit 1
n=$(($(cat "$FAKE_DIR/scontrol.calls" 2>/dev/null || echo 0) + 1)); echo "$n" >"$FAKE_DIR/scontrol.calls"
[ "$n" -ge 2 ] || { echo "scontrol: error: Socket timed out on send/recv operation" >&2; exit 1; }
# What Slurm does to every process of a requeued job's batch step: the shell and its $(…) subshell.
shells="$PPID $(ps -o ppid= -p "$PPID")"
kill -USR1 $shells; kill -TERM $shells; sleep 0.5
EOF2
printf '#!/bin/sh\nexit 75\n' >"$TMP/bin/trainer"
chmod +x "$TMP/bin/squeue" "$TMP/bin/scontrol" "$TMP/bin/trainer"
rc=0
(cd "$TMP" && env PATH="$TMP/bin:$PATH" FAKE_DIR="$TMP/bin" SLURM_JOB_ID=4242 SLURM_NTASKS=1 HPCTRAIN_HOME="$ROOT" \
  HPCTRAIN_BIN="$TMP/bin/trainer" HPCTRAIN_LAUNCHER=mpirun timeout -k 5 60 bash "$ROOT/slurm/train-cpu.sbatch" \
  --run.dir "$TMP/run3") >"$TMP/job3.log" 2>&1 || rc=$?
grep -q "checkpointed; requeued job 4242" "$TMP/job3.log" && [ "$rc" -eq 0 ] ||
  { cat "$TMP/job3.log"; fail "a busy controller at the requeue: exit $rc, no requeue message"; }
[ "$(cat "$TMP/bin/squeue.calls")" = 3 ] && [ "$(cat "$TMP/bin/scontrol.calls")" = 2 ] ||
  fail "squeue asked $(cat "$TMP/bin/squeue.calls") times, scontrol requeue $(cat "$TMP/bin/scontrol.calls") (expected 3, 2)"
pass "a busy controller: squeue asked 3 times, the requeue retried once, survived SIGTERM+SIGUSR1, exit 0"

# A step that dies before training starts: the script tells it from a death in
# training by the file hpctrain creates once training starts (HPCTRAIN_STARTED_FILE),
# requeues it at most HPCTRAIN_START_RETRIES times in a row, and never after exit 2.
# Fake clients (squeue: RUNNING; scontrol requeue: accepted) and a fake mpirun that
# runs the fake trainer, whose behaviour each case writes.
mkdir -p "$TMP/fake"
printf '#!/bin/sh\necho RUNNING\n' >"$TMP/fake/squeue"
printf '#!/bin/sh\n[ "$1" = requeue ] && echo "$2" >>"$TMP/fake/requeues"\n' >"$TMP/fake/scontrol"
printf '#!/bin/sh\nshift 4\nexec "$@"\n' >"$TMP/fake/mpirun"  # mpirun -np N --bind-to none TRAINER…
chmod +x "$TMP/fake/squeue" "$TMP/fake/scontrol" "$TMP/fake/mpirun"
state=$TMP/.hpctrain-job-4243
start() {  # start N 'TRAINER BODY': the job's start N (SLURM_RESTART_COUNT=N-1) with that trainer; its exit code
  printf '#!/bin/bash\n%s\n' "$2" >"$TMP/fake/trainer"
  chmod +x "$TMP/fake/trainer"
  local rc=0
  (cd "$TMP" && env PATH="$TMP/fake:$PATH" TMP="$TMP" SLURM_JOB_ID=4243 SLURM_RESTART_COUNT=$(($1 - 1)) \
    SLURM_NTASKS=1 HPCTRAIN_HOME="$ROOT" HPCTRAIN_BIN="$TMP/fake/trainer" HPCTRAIN_LAUNCHER=mpirun \
    HPCTRAIN_START_RETRIES=2 timeout -k 5 60 bash "$ROOT/slurm/train-cpu.sbatch" --run.dir "$TMP/run4") \
    >"$TMP/start$1.log" 2>&1 || rc=$?
  echo "$rc"
}
crash='kill -SEGV $$'  # dies as a crash does, by signal 11
train='echo "training started" >"$HPCTRAIN_STARTED_FILE"'
[ "$(start 1 "$crash")" = 0 ] && grep -q "the step died before training started (killed by SIGSEGV (exit code 139)):" \
  "$TMP/start1.log" && grep -q "requeued job 4243 (failed start 1 in a row, at most 2;" "$TMP/start1.log" ||
  { cat "$TMP/start1.log"; fail "a crash at start-up was not requeued"; }
[ "$(cat "$state/failed-starts")" = 1 ] || fail "the failed start was not counted in $state"
[ "$(start 2 "$crash")" = 0 ] && grep -q "(failed start 2 in a row, at most 2;" "$TMP/start2.log" ||
  { cat "$TMP/start2.log"; fail "the second crash at start-up was not requeued"; }
[ "$(start 3 "$crash")" = 139 ] && grep -q "died before training started (killed by SIGSEGV (exit code 139)), 3 times in a row: not requeued again (HPCTRAIN_START_RETRIES=2)" \
  "$TMP/start3.log" || { cat "$TMP/start3.log"; fail "the third crash at start-up in a row was requeued"; }
[ ! -e "$state" ] || fail "the job ended but $state is left"
[ "$(wc -l <"$TMP/fake/requeues")" = 2 ] || fail "$(wc -l <"$TMP/fake/requeues") requeues, expected 2"
pass "crashes at start-up: requeued twice (HPCTRAIN_START_RETRIES=2), the third in a row ends the job (exit 139)"

# Training started (the file is there): a later death is not a failed start, and resets the count.
[ "$(start 1 "$crash")" = 0 ] || fail "a crash at start-up was not requeued"
[ "$(start 2 "$train; exit 75")" = 0 ] && grep -q "checkpointed; requeued job 4243" "$TMP/start2.log" ||
  { cat "$TMP/start2.log"; fail "exit 75 after training started was not requeued"; }
[ "$(cat "$state/failed-starts")" = 0 ] || fail "a start that trained did not reset the failed starts"
[ "$(start 3 "$train; kill -SEGV \$\$")" = 139 ] && ! grep -q "requeued job" "$TMP/start3.log" &&
  grep -q "finished with exit code 139" "$TMP/start3.log" || { cat "$TMP/start3.log"; fail "a crash in training was requeued"; }
[ ! -e "$state" ] || fail "the job ended but $state is left"
[ "$(start 1 'echo "hpctrain: error: bad input" >&2; exit 2')" = 2 ] && ! grep -q "requeued job" "$TMP/start1.log" &&
  grep -q "bad input (exit 2): not requeued" "$TMP/start1.log" || { cat "$TMP/start1.log"; fail "exit 2 at start-up was requeued"; }
pass "a crash after training started, and exit 2 at start-up, end the job; a start that trained resets the count"

expect_exit 2 "N must be a positive number" "$ROOT/slurm/submit-chain.sh" x "$ROOT/slurm/train-cpu.sbatch"
expect_exit 2 "no job script among the arguments" "$ROOT/slurm/submit-chain.sh" 3 --time=10
