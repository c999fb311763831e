#!/usr/bin/env bash
# ctest-timeout: 300
# A dead or stuck rank never leaves the job hanging (dist.timeout = 5 s here):
#   1. a rank that stops calling collectives (HPCTRAIN_FAULT=stall@step) → exit 3,
#      one report naming the rank, its step and collective, and where the others wait;
#   2. kill -9 of a rank under plain mpirun → mpirun ends the job at once and
#      names the lost rank;
#   3. the same when the launcher does NOT kill the others (mpirun
#      --enable-recovery, like srun without --kill-on-bad-exit) → our own report
#      names the lost rank ("its process is gone"); every rank gone within
#      dist.timeout + 10 s;
#   4. a frozen rank (SIGSTOP) → exit 3, "its process is stopped".
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
TIMEOUT=5
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.batch_size 16 --train.steps 100000
      --log.every 1 --log.progress plain --dist.timeout "$TIMEOUT" --ckpt.keep 1)
export HPC_TEST_TIMEOUT=90

# Waits (≤ 60 s) until the 2-rank run in the background has logged training steps; prints rank R's pid.
pid_of_rank() {
  rank_pids "$1" 2 '^ +0 +[0-9]+ ' 60 >/dev/null || { cat "$1" >&2; fail "the run did not start training"; }
  rank_pid "$1" "$2"
}
alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:\s*Z' "/proc/$1/status" 2>/dev/null; }

# Waits (≤ 60 s) until FILE has a line matching PATTERN.
wait_for() {
  for _ in $(seq 600); do grep -q "$2" "$1" && return; sleep 0.1; done
  cat "$1" >&2
  fail "no '$2' in $1"
}

# 1. A stuck rank: exit 3 within dist.timeout + 10 s, and one report that names it.
HPCTRAIN_FAULT=stall@step:1:4 run_mpi 3 -x HPCTRAIN_FAULT "$hp" "${args[@]}" --run.dir "$TMP/stall" \
  > "$TMP/stall.out" 2> "$TMP/stall.err" &
job=$!
wait_for "$TMP/stall.err" "HPCTRAIN_FAULT=stall"
t0=$(now)
rc=0
wait "$job" || rc=$?
t1=$(now)
[ "$rc" -eq 3 ] || { cat "$TMP/stall.err"; fail "stuck rank: exit $rc, expected 3"; }
within "$t0" "$t1" $((TIMEOUT + 10)) || fail "stuck rank: the job took $(elapsed "$t0" "$t1") s to end"
grep -E "error on rank 0: collective #[0-9]+ \(allreduce at step 4\) did not complete within $TIMEOUT s \(dist.timeout\): rank 1 \(host \S+, pid [0-9]+\) is stuck at step 4: no collective for [0-9.]+ s, the last was #[0-9]+; ranks 0,2 wait in #[0-9]+" \
  "$TMP/stall.err" > /dev/null || { cat "$TMP/stall.err"; fail "stuck rank: no report naming rank 1"; }
[ "$(grep -c 'did not complete within' "$TMP/stall.err")" -eq 1 ] || { cat "$TMP/stall.err"; fail "stuck rank: expected one report"; }
pass "stuck rank: exit 3 after $(elapsed "$t0" "$t1") s, $(grep -m1 -oP 'rank 1 \(host .*' "$TMP/stall.err")"

# 2. kill -9 under plain mpirun: the launcher ends the job and names the rank.
run_mpi 2 "$hp" "${args[@]}" --run.dir "$TMP/kill" > "$TMP/kill.out" 2> "$TMP/kill.err" &
job=$!
victim=$(pid_of_rank "$TMP/kill.out" 1)
t0=$(now)
kill -9 "$victim"
rc=0
wait "$job" || rc=$?
t1=$(now)
[ "$rc" -ne 0 ] || fail "kill -9: mpirun exited 0"
within "$t0" "$t1" $((TIMEOUT + 10)) || fail "kill -9: the job took $(elapsed "$t0" "$t1") s to end"
grep -qE "process rank 1 .*signal 9|rank 1 .*(does not answer|Killed)" "$TMP/kill.err" \
  || { cat "$TMP/kill.err"; fail "kill -9: no message naming rank 1"; }
pass "kill -9 of rank 1 (mpirun): exit $rc after $(elapsed "$t0" "$t1") s, rank 1 named"

# 3. The launcher does not kill the others: our timeout does, and our report names the dead rank.
wrap='"$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?" >> "$EXITS"'
export EXITS="$TMP/exits"
HPCTRAIN_FAULT=exit@step:1:4 run_mpi 3 --enable-recovery -x HPCTRAIN_FAULT -x EXITS bash -c "$wrap" _ \
  "$hp" "${args[@]}" --run.dir "$TMP/dead" > "$TMP/dead.out" 2> "$TMP/dead.err" &
job=$!
wait_for "$TMP/dead.err" "HPCTRAIN_FAULT=exit"
t0=$(now)
pids=$(grep -oP '^ +rank +[0-9]+ +host +\S+ +pid \K[0-9]+' "$TMP/dead.out")
wait "$job" || true
# mpirun may return before every rank has gone: each rank must end by itself in time.
for _ in $(seq $(((TIMEOUT + 12) * 10))); do
  left=0
  for p in $pids; do alive "$p" && left=1; done
  [ $left -eq 0 ] && break
  sleep 0.1
done
t1=$(now)
for p in $pids; do alive "$p" && fail "dead rank: process $p is still running"; done
within "$t0" "$t1" $((TIMEOUT + 10)) || { cat "$TMP/dead.err"; fail "dead rank: the ranks took $(elapsed "$t0" "$t1") s to end"; }
grep -qE "rank 1 \(host \S+, pid [0-9]+\) does not answer: its process is gone \(killed or crashed\); ranks 0,2 wait in #" \
  "$TMP/dead.err" || { cat "$TMP/dead.err"; fail "dead rank: our report does not name rank 1"; }
grep -q "rank 0 exit 3" "$EXITS" || { cat "$EXITS" "$TMP/dead.err"; fail "dead rank: rank 0 did not exit 3"; }
grep -q "rank 1 exit 137" "$EXITS" || { cat "$EXITS"; fail "dead rank: rank 1 was not the one killed"; }
# Rank 2 either exited by itself (3) or was killed by the launcher with its wrapper (no line).
! grep -E "rank 2 exit" "$EXITS" | grep -vq "exit 3" || { cat "$EXITS"; fail "dead rank: rank 2 did not exit 3"; }
pass "rank 1 dead, launcher not killing: every rank gone after $(elapsed "$t0" "$t1") s, $(grep -m1 -oP 'rank 1 \(host .*gone' "$TMP/dead.err")"

# 4. A frozen rank (SIGSTOP): alive but silent.
run_mpi 2 "$hp" "${args[@]}" --run.dir "$TMP/stop" > "$TMP/stop.out" 2> "$TMP/stop.err" &
job=$!
victim=$(pid_of_rank "$TMP/stop.out" 1)
t0=$(now)
kill -STOP "$victim"
rc=0
wait "$job" || rc=$?
t1=$(now)
[ "$rc" -eq 3 ] || { cat "$TMP/stop.err"; fail "stopped rank: exit $rc, expected 3"; }
within "$t0" "$t1" $((TIMEOUT + 10)) || fail "stopped rank: the job took $(elapsed "$t0" "$t1") s to end"
grep -qE "rank 1 \(host \S+, pid $victim\) does not answer: its process is stopped" "$TMP/stop.err" \
  || { cat "$TMP/stop.err"; fail "stopped rank: no report naming rank 1"; }
# The launcher's SIGKILL reaches a stopped process, but it may be reaped just after mpirun returns.
for _ in $(seq 50); do alive "$victim" || break; sleep 0.1; done
alive "$victim" && fail "stopped rank: process $victim is still there 5 s after the job ended"
pass "stopped rank 1: exit 3 after $(elapsed "$t0" "$t1") s, named as stopped"
