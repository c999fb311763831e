#!/usr/bin/env bash
# ctest-timeout: 600
# A real Slurm on this host (tests/slurm/local-slurm.bash: munged, slurmctld,
# slurmd with their own config, ports and spool under a temp dir). The real
# slurm/train-cpu.sbatch runs 2 tasks (srun --mpi=pmix) on the MNIST sample;
# mid-run `scancel --batch --signal=USR1` signals the batch shell, as
# --signal=B:USR1@120 does before a time limit: its trap forwards SIGUSR1
# through srun to the tasks, which checkpoint and exit 75, and the script
# requeues the job. Its first restart crashes at start-up (rank 0 SIGSEGV,
# HPCTRAIN_FAULT=segv@startup:0:2): nothing was trained, so the script
# requeues it again, saying why, and the second restart resumes. Checked:
# the checkpoint, both requeues (same job id, SLURM_RESTART_COUNT=1 and 2,
# Restarts=2), the resume, completion, and a final loss, evaluation and
# parameters equal to an uninterrupted run's. And a plain `scancel` of a
# second job ends it for good: no requeue; and a slurm/submit-chain.sh chain
# with --no-requeue continues in its next job. The uninterrupted reference
# run, the second job and the chain run while the requeued job waits; the
# test then skips what is left of Slurm's ~2-minute BeginTime
# (slurm_start_now). Every daemon is stopped by its PID at exit.
source "$(dirname "$0")/lib.bash"
source "$ROOT/tests/slurm/local-slurm.bash"
why=$(slurm_check_available) || skip "$why"
data=$(mnist_h5)
trap 'slurm_stop; keep_cores "$TMP"; rm -rf "$TMP"' EXIT
trap 'exit 1' INT TERM  # so that the EXIT trap stops the daemons
slurm_start "$TMP/slurm" || fail "the local Slurm did not start"
slurm_has_pmix || skip "srun offers no --mpi=pmix here (srun --mpi=list)"
pass "local Slurm up: $(sinfo -h -o '%P %D %t %C')"

# One BLAS thread per rank in both runs, so the arithmetic is the same.
export OPENBLAS_NUM_THREADS=1
args=(--data.path "$data" --model.preset mlp --model.hidden 128 --train.steps 150 --train.batch_size 32
      --log.every 5 --log.progress plain)
run="$TMP/run"
log="$TMP/job.log"
# The sleep hook makes each step last >= 40 ms without using the CPUs, so
# the job is still running when it is signalled. Jobs work in $TMP (-D): the
# scripts keep a job's state there (.hpctrain-job-ID), and a core file lands there.
cd "$ROOT"
job=$(HPCTRAIN_BIN="$BUILD/hpctrain" HPCTRAIN_FAULT=sleep=40@step_end,segv@startup:0:2 \
  sbatch --parsable -N 1 -n 2 --ntasks-per-node=2 -c 1 --time=15 -D "$TMP" -o "$log" \
  slurm/train-cpu.sbatch "${args[@]}" --run.dir "$run") || fail "sbatch refused the job"
SLURM_TEST_JOBS+=("$job")
pass "submitted slurm/train-cpu.sbatch as job $job"

slurm_wait_state "$job" 60 RUNNING || { cat "$log" 2>/dev/null; fail "job $job did not start"; }
for _ in $(seq 1 600); do  # until step 20 or later is logged
  grep -qE '"step": ([2-9][0-9]|1[0-9][0-9])' "$run/metrics.jsonl" 2>/dev/null && break
  case "$(squeue -h -j "$job" -o %T 2>/dev/null)" in RUNNING | "") ;; *) break ;; esac  # ended (a busy squeue: "")
  sleep 0.1
done
grep -qE '"step": ([2-9][0-9]|1[0-9][0-9])' "$run/metrics.jsonl" || { cat "$log"; fail "the job did not reach step 20"; }
slurm_signal_batch "$job" USR1 || { cat "$log"; fail "scancel --batch --signal=USR1 $job failed"; }
pass "sent SIGUSR1 to the batch shell of job $job at step $(grep -oP '"step": \K[0-9]+' "$run/metrics.jsonl" | tail -1)"

# While the requeued job waits out its BeginTime: the uninterrupted reference
# run (same 2 ranks, same seed), and a second job that a plain `scancel`
# must end for good (the trainer still checkpoints, but nothing requeues).
run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --run.dir "$TMP/reference" >"$TMP/reference.log" 2>&1 ||
  { cat "$TMP/reference.log"; fail "reference run"; }
other=$(HPCTRAIN_BIN="$BUILD/hpctrain" HPCTRAIN_FAULT=sleep=40@step_end \
  sbatch --parsable -N 1 -n 2 --ntasks-per-node=2 -c 1 --time=15 -D "$TMP" -o "$TMP/cancelled.log" \
  slurm/train-cpu.sbatch "${args[@]}" --run.dir "$TMP/cancelled") || fail "sbatch refused the second job"
SLURM_TEST_JOBS+=("$other")
slurm_wait_state "$other" 60 RUNNING || { cat "$TMP/cancelled.log"; fail "job $other did not start"; }
for _ in $(seq 1 600); do
  grep -q '"step": ' "$TMP/cancelled/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
scancel "$other"
slurm_wait_state "$other" 60 CANCELLED || { cat "$TMP/cancelled.log"; fail "job $other was not cancelled"; }
sleep 3  # a requeue would have made it PENDING by now
scontrol show job "$other" | grep -q "JobState=CANCELLED" && scontrol show job "$other" | grep -q "Restarts=0" ||
  { scontrol show job "$other"; cat "$TMP/cancelled.log"; fail "a cancelled job came back"; }
grep -q "so it is not requeued" "$TMP/cancelled.log" || { cat "$TMP/cancelled.log"; fail "no 'not requeued' line"; }
pass "a plain scancel ends job $other for good (checkpointed, not requeued)"

# submit-chain.sh with --no-requeue: job 1 stops at step 10 (test hook), cannot
# requeue, exits 75; job 2 (afterany) resumes from the same run directory.
chain=$(HPCTRAIN_BIN="$BUILD/hpctrain" HPCTRAIN_FAULT=sigusr1@step_end:1:10 HPCTRAIN_RUN_DIR="$TMP/chain" \
  "$ROOT/slurm/submit-chain.sh" 2 --no-requeue -N 1 -n 2 --ntasks-per-node=2 -c 1 --time=15 -D "$TMP" -o "$TMP/chain-%j.log" \
  slurm/train-cpu.sbatch --data.path "$data" --model.preset mlp --model.hidden 32 --train.steps 30 --log.every 5 \
  --log.progress plain) || fail "submit-chain.sh failed"
echo "$chain"
first=$(echo "$chain" | grep -oP '^job 1/2: \K[0-9]+')
second=$(echo "$chain" | grep -oP '^job 2/2: \K[0-9]+(?= \(starts after job '"$first"' ends\))') ||
  fail "submit-chain.sh did not chain job 2 after job 1"
SLURM_TEST_JOBS+=("$first" "$second")
slurm_wait_state "$second" 90 COMPLETED FAILED CANCELLED || { cat "$TMP"/chain-*.log; fail "the chain did not finish"; }
grep -q "Slurm refused the requeue" "$TMP/chain-$first.log" || { cat "$TMP/chain-$first.log"; fail "job $first: no refused requeue"; }
grep -q "resumed from $TMP/chain/ckpt-00000010.h5: step 10 of 30" "$TMP/chain-$second.log" ||
  { cat "$TMP/chain-$second.log"; fail "job $second did not resume from job $first's checkpoint"; }
scontrol show job "$second" | grep -q "JobState=COMPLETED" || fail "job $second did not complete"
pass "submit-chain.sh: job $first stopped at step 10 (no requeue), job $second resumed and completed"

# Restart 1 crashes at start-up and requeues itself; restart 2 resumes.
slurm_start_now "$job" || { cat "$log"; scontrol show job "$job"; fail "job $job did not restart"; }
slurm_start_now "$job" || { cat "$log"; scontrol show job "$job"; fail "job $job did not restart after its crash"; }
slurm_wait_state "$job" 120 COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL ||
  { cat "$log"; scontrol show job "$job"; fail "job $job did not finish"; }
cat "$log"
scontrol show job "$job" | grep -q "JobState=COMPLETED" || fail "job $job did not complete"
scontrol show job "$job" | grep -q "Restarts=2" || { scontrol show job "$job"; fail "job $job was not restarted twice"; }
grep -q "got SIGUSR1, forwarding SIGUSR1 to the job step" "$log" || fail "the batch shell did not forward the signal"
step=$(grep -oP '^stopped after step \K[0-9]+(?= on all 2 rank\(s\), checkpoint written: exit 75)' "$log") ||
  fail "no checkpointed stop in the job log"
grep -q "Exited with exit code 75" "$log" || fail "the tasks did not exit 75"
grep -q "requeued job $job" "$log" || fail "the job did not requeue itself"
grep -q "^hpctrain job $job restart 1:" "$log" && grep -q "SLURM_RESTART_COUNT=1 " "$log" ||
  fail "no second run of job $job with SLURM_RESTART_COUNT=1"
grep -q "hpctrain: rank 0: HPCTRAIN_FAULT=segv@startup:0:2: crashing (SIGSEGV) at start-up (start 2 of the job)" "$log" &&
  grep -q "the step died before training started (killed by SIGSEGV (exit code 139)): requeued job $job (failed start 1 in a row" \
    "$log" || fail "restart 1 did not crash at start-up and requeue the job"
grep -q "^hpctrain job $job restart 2:" "$log" && grep -q "SLURM_RESTART_COUNT=2 " "$log" ||
  fail "no third run of job $job with SLURM_RESTART_COUNT=2"
[ "$(grep -c "resumed from $(printf '%s/ckpt-%08d.h5' "$run" "$step"): step $step of 150" "$log")" = 1 ] ||
  fail "not one resume from step $step"
[ ! -e "$TMP/.hpctrain-job-$job" ] || fail "the finished job left its state directory"
pass "stopped after step $step with a checkpoint, requeued; restart 1 crashed at start-up (SIGSEGV) and requeued" \
  "itself; restart 2 resumed from step $step and completed"

diff <(grep '^final:' "$TMP/reference.log") <(grep '^final:' "$log") || fail "final evaluation differs"
last_loss() { grep -oP '"step": 150, .*"loss": \K[^,]+' "$1/metrics.jsonl"; }
[ -n "$(last_loss "$run")" ] && [ "$(last_loss "$run")" = "$(last_loss "$TMP/reference")" ] ||
  fail "final loss $(last_loss "$run") differs from the uninterrupted $(last_loss "$TMP/reference")"
"$PYTHON" - "$TMP/reference/ckpt-00000150.h5" "$run/ckpt-00000150.h5" <<'EOF' || fail "final parameters differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
assert np.array_equal(a["params_flat"][...].view(np.uint32), b["params_flat"][...].view(np.uint32))
EOF
pass "final loss $(last_loss "$run"), evaluation and parameters equal to the uninterrupted run's"
