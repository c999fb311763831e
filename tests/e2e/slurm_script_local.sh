#!/usr/bin/env bash
# ctest-timeout: 300
# The sbatch scripts' own logic, without Slurm (runs wherever MPI does; the
# real-Slurm test is slurm_requeue.sh): slurm/train-cpu.sbatch run by bash
# with HPCTRAIN_LAUNCHER=mpirun. SIGUSR1 to the batch shell must be trapped
# and forwarded (mpirun passes it to the ranks), the ranks checkpoint and
# exit 75, and the script — not in a Slurm job, so no requeue — exits 75.
# Run again, the script adds --resume auto and the run completes. The
# script's own HPCTRAIN_* knobs must not reach hpctrain (it refuses unknown
# HPCTRAIN_* variables). Also: submit-chain.sh's argument checks.
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

expect_exit 2 "N must be a positive number" "$ROOT/slurm/submit-chain.sh" x "$ROOT/slurm/train-cpu.sbatch"
expect_exit 2 "no job script among the arguments" "$ROOT/slurm/submit-chain.sh" 3 --time=10
