#!/usr/bin/env bash
# ctest-timeout: 300
# Bad input gets one clear line and exit code 2 (never a crash or a hang),
# on one process and under mpirun; --help and --version work.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
common=(--data.path "$data" --run.dir "$TMP/run" --train.steps 1)

"$hp" --version > "$TMP/version" || fail "--version failed"
grep -q "^hpctrain " "$TMP/version" && grep -qi "hdf5" "$TMP/version" && grep -qi "mpi" "$TMP/version" \
  || { cat "$TMP/version"; fail "--version lacks library versions"; }
pass "--version"
"$hp" --help > "$TMP/help" || fail "--help failed"
grep -q "optim.lr" "$TMP/help" || fail "--help does not list optim.lr"
pass "--help"

expect_exit 2 "optim.lr" "$hp" "${common[@]}" --optim.lr -0.1
expect_exit 2 "optim.lr" "$hp" "${common[@]}" --optim.lr abc
expect_exit 2 "did you mean.*optim.lr" "$hp" "${common[@]}" --optim.lrr 0.1
expect_exit 2 "train.batch_size" "$hp" "${common[@]}" --train.batch_size 0
expect_exit 2 "optim.name" "$hp" "${common[@]}" --optim.name adamx
expect_exit 2 "resnet20" "$hp" "${common[@]}" --model.preset resnet21
expect_exit 2 "data.path" "$hp" --run.dir "$TMP/run"
expect_exit 2 "no-such-file.h5" "$hp" --data.path "$TMP/no-such-file.h5" --run.dir "$TMP/run"
HPCTRAIN_OPTIM_LR=abc expect_exit 2 "optim.lr" "$hp" "${common[@]}"
printf '[optim]\nlr = 0.1\nbogus = 1\n' > "$TMP/bad.ini"
expect_exit 2 "bogus" "$hp" "${common[@]}" --config "$TMP/bad.ini"
expect_exit 2 "config" "$hp" "${common[@]}" --config "$TMP/missing.ini"

# An option the command does not use; export into a directory that holds files (unless --force).
"$hp" "${common[@]}" --model.preset mlp --log.progress none > "$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "1-step run"; }
ckpt=$TMP/run/ckpt-00000001.h5
expect_exit 2 "option --run.dir: not used by 'hpctrain eval'" "$hp" eval --checkpoint "$ckpt" --data.path "$data" --run.dir "$TMP/x"
"$hp" export --checkpoint "$ckpt" --format torch -o "$TMP/exported" > /dev/null || fail "export into a new directory"
expect_exit 2 "directory '$TMP/exported' already holds files: .*--force" "$hp" export --checkpoint "$ckpt" --format torch -o "$TMP/exported"
"$hp" export --checkpoint "$ckpt" --format torch -o "$TMP/exported" --force > /dev/null || fail "export --force into it"
expect_exit 2 "option --force: only for 'hpctrain export'" "$hp" eval --checkpoint "$ckpt" --data.path "$data" --force
pass "an unused --run.dir and an export into a non-empty directory are one line and exit 2"

# Data and model problems are found at set-up, before any training.
echo "not hdf5" > "$TMP/text.h5"
expect_exit 2 "text.h5" "$hp" --data.path "$TMP/text.h5" --run.dir "$TMP/run"
expect_exit 2 "linear\(10\)" "$hp" "${common[@]}" --model.spec "flatten linear(7)"
expect_exit 2 "conv\(8,40\)" "$hp" "${common[@]}" --model.spec "conv(8,40) flatten linear(10)"
expect_exit 2 "model spec" "$hp" "${common[@]}" --model.spec "conv(8,3"
expect_exit 2 "fewer than one global batch" "$hp" "${common[@]}" --train.batch_size 100000
expect_exit 2 "train.device cuda" "$hp" "${common[@]}" --train.device cuda

# A PMI mismatch (srun started 4 tasks, MPI sees 1) is diagnosed, not trained 4 times over.
SLURM_STEP_NUM_TASKS=4 expect_exit 2 "PMI mismatch" "$hp" "${common[@]}"

# Under mpirun: the same clean line once, exit 2, no MPI_ABORT banner, no hang.
run_mpi 2 "$hp" "${common[@]}" --optim.lr -1 > "$TMP/mpi.out" 2> "$TMP/mpi.err" && fail "mpirun run accepted a bad lr"
[ "$(grep -c "optim.lr" "$TMP/mpi.err")" -eq 1 ] || { cat "$TMP/mpi.err"; fail "expected exactly one error line under mpirun"; }
pass "bad option under mpirun: one line"
rc=0
run_mpi 2 "$hp" --data.path "$TMP/text.h5" --run.dir "$TMP/run" > "$TMP/mpi.out" 2> "$TMP/mpi.err" || rc=$?
[ $rc -eq 2 ] || { cat "$TMP/mpi.err"; fail "bad data file under mpirun: exit $rc, expected 2"; }
grep -q "MPI_ABORT" "$TMP/mpi.err" && fail "set-up error under mpirun printed an MPI_ABORT banner"
[ "$(grep -c "text.h5" "$TMP/mpi.err")" -eq 1 ] || { cat "$TMP/mpi.err"; fail "expected one error line"; }
pass "bad data file under mpirun: exit 2, one line"
