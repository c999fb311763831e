#!/usr/bin/env bash
# ctest-timeout: 300
# A dead or stuck rank of a tensor-parallel group ends the job within
# dist.timeout (5 s here), named with its group (dp 2 × tp 2 on 4 ranks, gpt-tiny):
#   1. rank 1 stalls (HPCTRAIN_FAULT=stall@step): exit 3, the report names rank 1
#      and the collective of tp[0,1] its partner waits in; the flight records
#      hold each rank's groups and `doctor --flight` names tp[0,1] and rank 1;
#   2. kill -9 of rank 1 under plain mpirun: the job ends at once, rank 1 named.
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
TIMEOUT=5
export OMP_NUM_THREADS=1 HPC_TEST_TIMEOUT=90
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || skip "no $text (Debian base-files)"
"$BUILD/hpcdata" pack --from text "$text" --val-fraction 0 -o "$TMP/gpl.h5" > /dev/null || fail "pack"
args=(--data.path "$TMP/gpl.h5" --model.preset gpt-tiny --model.heads 4 --dist.tp 2 --train.batch_size 2
      --train.steps 100000 --log.every 1 --log.progress plain --dist.timeout "$TIMEOUT" --ckpt.keep 1)

# ---- 1. a stalled rank of tp[0,1] --------------------------------------------------------
run=$TMP/stall
rc=0
HPCTRAIN_FAULT=stall@step:1:4 run_mpi 4 -x HPCTRAIN_FAULT "$hp" "${args[@]}" --run.dir "$run" \
  > "$TMP/stall.out" 2> "$TMP/stall.err" &
job=$!
for _ in $(seq 600); do grep -q "HPCTRAIN_FAULT=stall" "$TMP/stall.err" && break; sleep 0.1; done
t0=$(now)
wait "$job" || rc=$?
t1=$(now)
[ "$rc" -eq 3 ] || { cat "$TMP/stall.err"; fail "stalled tp rank: exit $rc, expected 3"; }
within "$t0" "$t1" $((TIMEOUT + 10)) || fail "stalled tp rank: the job took $(elapsed "$t0" "$t1") s to end"
grep -qE "error on rank 0: collective #[0-9]+ of tp\[0,1\] \([a-z_]+ at step 4\) did not complete within $TIMEOUT s \(dist.timeout\): rank 1 \(host \S+, pid [0-9]+\) is stuck at step 4" \
  "$TMP/stall.err" || { cat "$TMP/stall.err"; fail "stalled tp rank: no report naming rank 1 and tp[0,1]"; }
for r in 0 1 2 3; do
  check_flight "$run/flight-$r.json" "$r" "" 1 > /dev/null || fail "flight-$r.json is not what the schema says"
done
grep -q '"group": "tp' "$run/flight-0.json" || fail "rank 0's flight record has no tp entry"
rc=0
"$hp" doctor --flight "$run" > "$TMP/doctor.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || { cat "$TMP/doctor.out"; fail "doctor --flight exited $rc, expected 1"; }
grep -qE "tp\[0,1\]" "$TMP/doctor.out" && grep -qE "rank\(s\) 1 (never started|fell behind)" "$TMP/doctor.out" \
  || { cat "$TMP/doctor.out"; fail "doctor --flight does not name tp[0,1] and rank 1"; }
pass "stalled rank 1 of tp[0,1]: exit 3 after $(elapsed "$t0" "$t1") s, named with its group; doctor --flight names it"

# ---- 2. kill -9 of a tp rank ---------------------------------------------------------------
run_mpi 4 "$hp" "${args[@]}" --run.dir "$TMP/kill" > "$TMP/kill.out" 2> "$TMP/kill.err" &
job=$!
rank_pids "$TMP/kill.out" 4 '^ +0 +[0-9]+ ' 60 > /dev/null || { cat "$TMP/kill.out"; fail "the run did not start training"; }
victim=$(rank_pid "$TMP/kill.out" 1)
t0=$(now)
kill -9 "$victim"
rc=0
wait "$job" || rc=$?
t1=$(now)
[ "$rc" -ne 0 ] || fail "kill -9: mpirun exited 0"
within "$t0" "$t1" $((TIMEOUT + 10)) || fail "kill -9: the job took $(elapsed "$t0" "$t1") s to end"
grep -qE "process rank 1 .*signal 9|rank 1 .*(does not answer|Killed)" "$TMP/kill.err" \
  || { cat "$TMP/kill.err"; fail "kill -9: no message naming rank 1"; }
pass "kill -9 of rank 1 of tp[0,1]: exit $rc after $(elapsed "$t0" "$t1") s, rank 1 named"
