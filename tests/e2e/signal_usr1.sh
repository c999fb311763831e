#!/usr/bin/env bash
# ctest-timeout: 300
# Preemption-safe exits, by real signals:
# 1. SIGUSR1 to ONE rank (rank 1, by its pid) mid-epoch, followed by a storm
#    of SIGUSR1 to rank 1 and SIGTERM to rank 0 every 5 ms until the job has
#    exited, so that signals land during the stop and the checkpoint write.
#    All ranks must stop after the same step, rank 0 write a valid
#    checkpoint, every rank exit 75; resuming then ends with the parameters
#    of a run that was never interrupted.
# 2. train.time_limit and 3. SLURM_JOB_END_TIME: the run stops by itself,
#    checkpoints and exits 75 before the limit (and ckpt.every_minutes
#    writes checkpoints on the way).
# HPCTRAIN_FAULT=sleep=MS@step_end slows the steps down by sleeping, so the runs
# last long enough to be signalled without using CPU.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.batch_size 32 --log.every 5
      --log.progress plain)
steps=(--train.steps 400)  # 125 steps per epoch

run_mpi 2 "$BUILD/hpctrain" "${args[@]}" "${steps[@]}" --run.dir "$TMP/straight" >"$TMP/straight.log" 2>&1 ||
  { cat "$TMP/straight.log"; fail "straight run"; }

# ---- 1. SIGUSR1 to one rank -------------------------------------------------
run="$TMP/run"
HPCTRAIN_FAULT=sleep=30@step_end run_mpi 2 "$BUILD/hpctrain" "${args[@]}" "${steps[@]}" --run.dir "$run" \
  >"$TMP/sig.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do  # until the table shows step 10 or later
  grep -qE '"step": ([1-9][0-9]+)' "$run/metrics.jsonl" 2>/dev/null && break
  kill -0 "$job" 2>/dev/null || { cat "$TMP/sig.log"; fail "the run ended before it could be signalled"; }
  sleep 0.1
done
rank0=$(rank_pid "$TMP/sig.log" 0)
rank1=$(rank_pid "$TMP/sig.log" 1)
[ -n "$rank0" ] && [ -n "$rank1" ] || { cat "$TMP/sig.log"; fail "no rank pids in the header"; }
kill -USR1 "$rank1"
storm=0
while kill -0 "$job" 2>/dev/null && [ $storm -lt 2000 ]; do
  kill -USR1 "$rank1" 2>/dev/null || true
  kill -TERM "$rank0" 2>/dev/null || true
  storm=$((storm + 1))
  sleep 0.005
done
rc=0
wait "$job" || rc=$?
[ "$rc" -eq 75 ] || { cat "$TMP/sig.log"; fail "exit $rc after SIGUSR1, expected 75"; }
step=$(grep -oP '^stopped after step \K[0-9]+(?= on all 2 rank\(s\), checkpoint written)' "$TMP/sig.log") ||
  { cat "$TMP/sig.log"; fail "no agreed stop"; }
grep -qE "^stop requested \(SIGUSR1 on rank 1(, SIGTERM on rank 0)?\) after step $step$" "$TMP/sig.log" ||
  { grep stop "$TMP/sig.log"; fail "the stop does not name SIGUSR1 on rank 1"; }
[ $((step % 125)) -ne 0 ] || fail "stopped at an epoch end, wanted mid-epoch (step $step)"
ckpt=$(printf '%s/ckpt-%08d.h5' "$run" "$step")
[ -f "$ckpt" ] || fail "no checkpoint at step $step"
[ "$(ls "$run" | grep -c '^ckpt-')" -eq 1 ] && [ -z "$(ls "$run" | grep tmp)" ] || { ls "$run"; fail "stray files"; }
pass "SIGUSR1 to rank 1 (+ $storm rounds of SIGUSR1/SIGTERM): both ranks stopped after step $step, exit 75"

run_mpi 2 "$BUILD/hpctrain" "${args[@]}" "${steps[@]}" --run.dir "$run" --resume auto >"$TMP/resume.log" 2>&1 ||
  { cat "$TMP/resume.log"; fail "resume after the signal"; }
grep -q "resumed from $ckpt: step $step of 400" "$TMP/resume.log" || { cat "$TMP/resume.log"; fail "not resumed from step $step"; }
"$PYTHON" - "$TMP/straight/ckpt-00000400.h5" "$run/ckpt-00000400.h5" <<'EOF' || fail "resumed run ends elsewhere"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
for n in ["params_flat", "optimizer/exp_avg", "optimizer/exp_avg_sq"]:
    assert np.array_equal(a[n][...].view(np.uint32), b[n][...].view(np.uint32)), n
EOF
pass "the checkpoint written under the signal storm is valid; resuming gives the uninterrupted result"

# ---- 2. train.time_limit, 3. the Slurm job's end ------------------------------
deadline_run() {  # NAME EXPECTED-SOURCE SECONDS [env…]: must stop itself, with exit 75, within SECONDS
  local name=$1 source=$2 limit=$3 rc=0 start elapsed s
  shift 3
  start=$(date +%s%N)
  env "$@" HPCTRAIN_FAULT=sleep=20@step_end timeout -k 10 120 mpirun -np 2 --oversubscribe --bind-to none \
    "$BUILD/hpctrain" "${args[@]}" --train.steps 100000 --run.dir "$TMP/$name" >"$TMP/$name.log" 2>&1 || rc=$?
  elapsed=$(( ($(date +%s%N) - start) / 1000000 ))
  [ "$rc" -eq 75 ] || { cat "$TMP/$name.log"; fail "$name: exit $rc, expected 75"; }
  grep -q "^stop requested (deadline: $source" "$TMP/$name.log" || { grep -E "stop|deadline" "$TMP/$name.log"; fail "$name: no deadline stop"; }
  s=$(grep -oP '^stopped after step \K[0-9]+' "$TMP/$name.log")
  [ "$s" -ge 10 ] || fail "$name: stopped after only $s steps"
  [ -f "$(printf '%s/ckpt-%08d.h5' "$TMP/$name" "$s")" ] || fail "$name: no checkpoint"
  # Stopped before the deadline by the trainer's own clock; and overall (MPI start-up and exit on top,
  # slack for a loaded machine) not much later.
  grep -qP "^stop requested \(deadline: .*, [0-9.]+ s left\)" "$TMP/$name.log" || fail "$name: stopped past the deadline"
  [ "$elapsed" -lt $(( (limit + 10) * 1000 )) ] || fail "$name: took ${elapsed} ms, the limit was $limit s"
  pass "$name: stopped by itself after step $s, $(grep -oP '[0-9.]+ s left' "$TMP/$name.log" | head -1), with a checkpoint and exit 75 (${elapsed} ms in all)"
}
deadline_run time_limit "train.time_limit" 4 HPCTRAIN_TRAIN_TIME_LIMIT=4 HPCTRAIN_CKPT_EVERY_MINUTES=0.02
# ckpt.every_minutes = 1.2 s: periodic checkpoints before the deadline's.
[ "$(grep -c '^checkpoint: .*, every 1s, ' "$TMP/time_limit.log")" -ge 2 ] ||
  { grep checkpoint "$TMP/time_limit.log"; fail "no periodic checkpoints every 1.2 s"; }
pass "ckpt.every_minutes: $(grep -c '^checkpoint: .*, every 1s, ' "$TMP/time_limit.log") periodic checkpoints in the 4 s run"
# The job ends in 25 s; hpctrain keeps Deadline::SLURM_END_MARGIN_S = 20 s free for exit and requeue.
deadline_run job_end "the Slurm job's end" 5 SLURM_JOB_END_TIME=$(($(date +%s) + 25))
