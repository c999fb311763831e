#!/usr/bin/env bash
# ctest-timeout: 400
# Chaos: a 2-rank training is interrupted 20 times at random points, each time
# restarted with --resume auto, then run to its end; its final parameters
# and optimizer state must equal an uninterrupted run's bitwise, and no
# checkpoint file may ever be unreadable. Interruptions, at a random moment
# after training (re)started: kill -9 of a random rank (mpirun then ends the
# job), SIGUSR1 or SIGTERM to a random rank (every rank stops after the same
# step with a checkpoint, exit 75). Checkpoints every 4 steps are written in
# the background and made slow (sleep=150@ckpt_write), so many interruptions
# land while one is in flight (a temporary file exists at that moment), the
# others at a random point of a step (data, compute, the gradient allreduce:
# not told apart). The test prints how many of
# each kind it survived. CHAOS_SEED fixes the random choices (default: the
# time; printed, to replay a failure).
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
export HPC_TEST_TIMEOUT=60 OPENBLAS_NUM_THREADS=1
seed=${CHAOS_SEED:-$(date +%s)}
RANDOM=$seed
echo "chaos seed $seed (CHAOS_SEED=$seed replays it)"
steps=400
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.batch_size 16 --train.steps "$steps"
      --ckpt.every_steps 4 --ckpt.keep 2 --log.every 10 --log.progress plain --dist.timeout 20)
run_mpi 2 "$hp" "${args[@]}" --run.dir "$TMP/straight" >"$TMP/straight.log" 2>&1 ||
  { cat "$TMP/straight.log"; fail "the uninterrupted run"; }

run=$TMP/chaos
declare -A count=([kill9]=0 [sigusr1]=0 [sigterm]=0 [in_write]=0 [finished_first]=0)
check_all_readable() {
  local f
  for f in "$run"/ckpt-*.h5; do
    [ -e "$f" ] || continue
    "$PYTHON" -c "import h5py,sys; f=h5py.File(sys.argv[1],'r'); f['params_flat'][...]; f['optimizer/exp_avg'][...]" "$f" \
      2>/dev/null || fail "after interruption $1: $f is unreadable"
  done
}
for i in $(seq 1 20); do
  log=$TMP/chaos-$i.log
  HPCTRAIN_FAULT=sleep=150@ckpt_write run_mpi 2 -x HPCTRAIN_FAULT "$hp" "${args[@]}" --run.dir "$run" --resume auto \
    >"$log" 2>&1 &
  job=$!
  pids=$(rank_pids "$log" 2 '^(resumed from|resume: no checkpoint)' 15) || { cat "$log"; fail "run $i did not start"; }
  # shellcheck disable=SC2206
  pid=($pids)
  sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
  victim=${pid[$((RANDOM % 2))]}
  kind=$(((RANDOM % 3)))
  [ -n "$(ls "$run" 2>/dev/null | grep '\.tmp-' || true)" ] && in_write=1 || in_write=0
  case $kind in
    0) kill -9 "$victim" 2>/dev/null || true; name=kill9 ;;
    1) kill -USR1 "$victim" 2>/dev/null || true; name=sigusr1 ;;
    2) kill -TERM "$victim" 2>/dev/null || true; name=sigterm ;;
  esac
  rc=0
  wait "$job" || rc=$?
  if [ "$rc" -eq 0 ]; then
    count[finished_first]=$((count[finished_first] + 1))  # it reached the end before the signal
    break
  fi
  case $name in
    kill9) [ "$rc" -ne 75 ] || fail "run $i: a kill -9 ended with exit 75" ;;
    *) [ "$rc" -eq 75 ] || { tail -20 "$log"; fail "run $i: $name gave exit $rc, expected 75"; } ;;
  esac
  ! grep -q "skipping a damaged checkpoint" "$log" || { cat "$log"; fail "run $i found a damaged checkpoint"; }
  count[$name]=$((count[$name] + 1))
  count[in_write]=$((count[in_write] + in_write))
  check_all_readable "$i"
  echo "interruption $i: $name of pid $victim (rank $([ "$victim" = "${pid[0]}" ] && echo 0 || echo 1)), exit $rc$([ $in_write = 1 ] && echo ', during a checkpoint write'), $(grep -oP '^resumed from \S+' "$log" | head -1 || echo 'fresh start')"
done
log=$TMP/chaos-final.log
if [ "${count[finished_first]}" -eq 0 ]; then
  run_mpi 2 "$hp" "${args[@]}" --run.dir "$run" --resume auto >"$log" 2>&1 || { cat "$log"; fail "the final run"; }
  ! grep -q "skipping a damaged checkpoint" "$log" || { cat "$log"; fail "the final run found a damaged checkpoint"; }
fi
check_all_readable final
"$PYTHON" - "$(printf '%s/ckpt-%08d.h5' "$TMP/straight" $steps)" "$(printf '%s/ckpt-%08d.h5' "$run" $steps)" <<'PY' ||
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
for n in ["params_flat", "optimizer/exp_avg", "optimizer/exp_avg_sq"]:
    assert np.array_equal(a[n][...].view(np.uint32), b[n][...].view(np.uint32)), n
PY
  fail "the interrupted run's final state differs from the uninterrupted one"
pass "chaos: survived ${count[kill9]} kill -9, ${count[sigusr1]} SIGUSR1, ${count[sigterm]} SIGTERM (${count[in_write]} during a checkpoint write); final parameters and Adam state bitwise = the uninterrupted run's"
