#!/usr/bin/env bash
# ctest-timeout: 150
# The flight record on a fatal signal (dist/flight_recorder.h, install_fatal_signal_dump):
#   1. rank 1 of 2 calls abort() at step 3 (HPCTRAIN_FAULT=abort): the job fails, and
#      RUN_DIR/flight-1.json is a complete record (check_flight.py) with
#      reason "signal SIGABRT" and the collectives up to step 2 (the fault fires as step 3
#      begins, before its first collective); no temporary file is left;
#      `hpctrain doctor --flight` reads it;
#   2. one process (no mpirun) gets SIGSEGV from outside mid-run: it dies of SIGSEGV
#      (exit status 139, the signal's own) and leaves flight-0.json, reason "signal SIGSEGV"
#      (with no entries: one rank's communicator, SelfComm, records no collectives).
source "$(dirname "$0")/lib.bash"
ulimit -c 0  # the crashes here are on purpose: no core files
data=$(mnist_h5)
hp="$BUILD/hpctrain"
args=(--data.path "$data" --model.preset mlp --model.hidden 64 --train.batch_size 16
      --log.every 1 --log.progress plain --dist.timeout 5)
export HPC_TEST_TIMEOUT=60

# ---- 1. abort() on rank 1 ------------------------------------------------------------------
run=$TMP/abort
rc=0
HPCTRAIN_FAULT=abort@step:1:3 run_mpi 2 -x HPCTRAIN_FAULT "$hp" "${args[@]}" --train.steps 50 --run.dir "$run" \
  >"$TMP/abort.out" 2>"$TMP/abort.err" || rc=$?
[ "$rc" -ne 0 ] || fail "abort: the job exited 0"
[ -f "$run/flight-1.json" ] || { cat "$TMP/abort.err"; ls "$run"; fail "abort: no flight-1.json"; }
check_flight "$run/flight-1.json" 1 "signal SIGABRT" 1 || fail "abort: flight-1.json is not a complete SIGABRT record"
"$PYTHON" -c "import json,sys; assert max(x['step'] for x in json.load(open(sys.argv[1]))['entries']) == 2" \
  "$run/flight-1.json" || fail "abort: the record does not end at step 2"
if ls "$run" | grep -q '\.tmp-'; then fail "abort: a temporary flight file was left behind"; fi
drc=0
"$hp" doctor --flight "$run" >"$TMP/doctor.out" 2>&1 || drc=$?
cat "$TMP/doctor.out"
[ "$drc" -le 1 ] || fail "abort: doctor --flight exited $drc"
grep -q "rank 1" "$TMP/doctor.out" || fail "abort: the doctor does not show rank 1"
pass "abort() on rank 1 at step 3: job failed (exit $rc), flight-1.json complete with reason signal SIGABRT"

# ---- 2. SIGSEGV, one process ---------------------------------------------------------------
run=$TMP/segv
HPCTRAIN_FAULT=sleep=50@step_end "$hp" "${args[@]}" --train.steps 2000 --run.dir "$run" \
  >"$TMP/segv.out" 2>"$TMP/segv.err" &
job=$!
for _ in $(seq 300); do grep -qE '^ +[0-9]+ +5 +[0-9.]' "$TMP/segv.out" 2>/dev/null && break; sleep 0.1; done
grep -qE '^ +[0-9]+ +5 +[0-9.]' "$TMP/segv.out" || { kill -KILL $job; cat "$TMP/segv.out" "$TMP/segv.err"; fail "segv: no step 5"; }
kill -SEGV $job
rc=0
wait $job || rc=$?
[ "$rc" -eq 139 ] || { cat "$TMP/segv.err"; fail "segv: exit status $rc, expected 139 (SIGSEGV)"; }
check_flight "$run/flight-0.json" 0 "signal SIGSEGV" 0 || fail "segv: flight-0.json is not a complete SIGSEGV record"
pass "SIGSEGV: the process died of it (status 139) and left flight-0.json, reason signal SIGSEGV"
