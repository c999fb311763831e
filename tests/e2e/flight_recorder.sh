#!/usr/bin/env bash
# ctest-timeout: 180
# The collective flight recorder (dist/flight_recorder.h) and
# `hpctrain doctor --flight RUN_DIR` (doctor/flight.h):
#   1. rank 1 of 3 stops calling collectives at step 4 (HPCTRAIN_FAULT=stall):
#      exit 3; every rank wrote RUN_DIR/flight-RANK.json (valid JSON, at most
#      256 collectives, each with seq, op, count, dtype, comm, step, times and
#      state); the error line says where they are; the doctor names the
#      collective number of the error line as the diverging one, rank 1 as
#      the one that never started it, ranks 0,2 as waiting in it (exit 1);
#   2. SIGUSR2 to every rank of a healthy 2-rank run: each writes its file
#      (reason SIGUSR2) and training goes on to exit 0;
#   3. --flight on a directory without records: one line, exit 2.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
TIMEOUT=5
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.batch_size 16
      --log.every 1 --log.progress plain --dist.timeout "$TIMEOUT")
export HPC_TEST_TIMEOUT=90

# ---- 1. a stalled rank ----------------------------------------------------------------
run=$TMP/stall
rc=0
HPCTRAIN_FAULT=stall@step:1:4 run_mpi 3 -x HPCTRAIN_FAULT "$hp" "${args[@]}" --train.steps 100000 --run.dir "$run" \
  >"$TMP/stall.out" 2>"$TMP/stall.err" || rc=$?
[ "$rc" -eq 3 ] || { cat "$TMP/stall.err"; fail "stalled rank: exit $rc, expected 3"; }
seq=$(grep -oP "error on rank \d+: collective #\K[0-9]+(?= \(allreduce at step 4\) did not complete)" "$TMP/stall.err" | head -1)
[ -n "$seq" ] || { cat "$TMP/stall.err"; fail "no timeout report"; }
grep -q "; flight records: $run/flight-RANK.json (hpctrain doctor --flight $run)" "$TMP/stall.err" ||
  { cat "$TMP/stall.err"; fail "the error line does not say where the flight records are"; }
ls "$run"
for r in 0 1 2; do
  check_flight "$run/flight-$r.json" "$r" "" 1 || fail "flight-$r.json is not what the schema says"
done
pass "stalled rank: exit 3, flight-0/1/2.json written and valid, the error line names them"
rc=0
"$hp" doctor --flight "$run" >"$TMP/doctor.out" 2>&1 || rc=$?
cat "$TMP/doctor.out"
[ "$rc" -eq 1 ] || fail "doctor --flight exited $rc, expected 1"
grep -qE "^diverging collective: #$seq \(allreduce of [0-9]+ float32 at step 4\): rank\(s\) 0,2 wait in it; rank\(s\) 1 never started it$" \
  "$TMP/doctor.out" || fail "the doctor does not name collective #$seq and rank 1"
grep -qE "^  rank 1 \(.*\): last completed #[0-9]+ .*: BEHIND" "$TMP/doctor.out" || fail "rank 1 is not marked behind"
grep -q "^problem: rank(s) 1 fell behind at collective #$seq" "$TMP/doctor.out" || fail "no problem line"
pass "doctor --flight: diverging collective #$seq (the error line's), rank 1 never started it, ranks 0,2 wait"

# ---- 2. SIGUSR2 ----------------------------------------------------------------------------
run=$TMP/usr2
HPCTRAIN_FAULT=sleep=20@step_end run_mpi 2 -x HPCTRAIN_FAULT "$hp" "${args[@]}" --train.steps 150 --run.dir "$run" \
  >"$TMP/usr2.out" 2>"$TMP/usr2.err" &
job=$!
pids=$(rank_pids "$TMP/usr2.out" 2 '^ +0 +[0-9]+ ' 60) || { cat "$TMP/usr2.out"; fail "usr2: the run did not start"; }
# shellcheck disable=SC2086
kill -USR2 $pids
for _ in $(seq 100); do [ -f "$run/flight-0.json" ] && [ -f "$run/flight-1.json" ] && break; sleep 0.1; done
rc=0
wait "$job" || rc=$?
[ "$rc" -eq 0 ] || { cat "$TMP/usr2.err"; fail "usr2: the run exited $rc"; }
for r in 0 1; do
  check_flight "$run/flight-$r.json" "$r" SIGUSR2 1 || fail "usr2: flight-$r.json is not a SIGUSR2 record"
done
pass "SIGUSR2: both ranks wrote their flight record, training went on to exit 0"

# ---- 3. nothing to read -----------------------------------------------------------------------
mkdir -p "$TMP/empty"
expect_exit 2 "^hpctrain: error: --flight $TMP/empty: no flight-RANK.json there" "$hp" doctor --flight "$TMP/empty"
