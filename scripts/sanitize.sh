#!/usr/bin/env bash
# scripts/sanitize.sh asan|tsan BUILD_DIR: the sanitizer suites behind
# `make asan-test` (BUILD_DIR = build-asan) and `make tsan-test` (build-tsan).
#
#   asan  every GoogleTest binary in BUILD_DIR/tests (the CUDA ones report
#         SKIPPED), the MPI collectives program and the hang diagnosis
#         (tests/sanitizers/test_watchdog_hang.cpp) on 2 ranks, the e2e scripts
#         that feed bad options, specs and data files to the parsers
#         (cli_errors, hpcdata, hpcdata_formats), and a 2-rank MNIST
#         run stopped at step 150 through the signal path (checkpoint, exit 75)
#         then resumed to step 300 (checkpoint, evaluation), all under
#         AddressSanitizer + UBSan with LeakSanitizer at every process exit.
#   tsan  test_loader, test_dist, and the MPI programs on 2 ranks (MpiComm's
#         progress thread under GradReducer overlap, the watchdog thread
#         answering while the main thread is busy) under ThreadSanitizer.
#
# Why log files: every sanitizer report goes to a file per process
# (log_path), one directory per test, so a report counts even when it comes
# from a rank whose exit code mpirun does not pass on, or from a run that is
# meant to exit non-zero (75). A test passes only with the expected exit code
# AND no report. Suppressions (tests/sanitizers/*.supp) name only Open MPI
# (its start-up state, its libevent thread, its own locks and data movement),
# each with its reason; never hpctrain's code.
# Unit tests run two at a time (two cores); MPI runs one at a time.
# Prints one line per test and "N passed, N failed, N skipped"; exits 1 when any failed.
# SANITIZE_KEEP=1 keeps every log and report (the directory is printed at the end).
set -uo pipefail

usage() { echo "usage: scripts/sanitize.sh asan|tsan BUILD_DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
mode=$1
case "$mode" in asan | tsan) ;; *) usage ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$2" 2>/dev/null && pwd) || { echo "sanitize.sh: no build directory $2 (run make $mode)" >&2; exit 2; }
cd "$root" || exit 2
supp="$root/tests/sanitizers"
out=$(mktemp -d "${TMPDIR:-/tmp}/hpctrain-$mode.XXXXXX")
trap '[ -n "${SANITIZE_KEEP:-}" ] || rm -rf "$out"' EXIT

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# One OpenBLAS thread: its pool is not instrumented, and the ranks share two cores anyway.
export OPENBLAS_NUM_THREADS=1

# sanitizer_env DIR: the runtime options, with reports going to DIR.
sanitizer_env() {
  local dir=$1
  if [ "$mode" = asan ]; then
    echo "ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$dir/asan${ASAN_EXTRA:-}"
    echo "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$dir/ubsan"
    echo "LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0"
  else
    echo "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:print_suppressions=0:log_path=$dir/tsan"
  fi
}

# Processes that start MPI unwind every malloc fully (DWARF) instead of by frame pointers:
# Open MPI's libraries have none, so the fast unwinder stops inside an MCA plugin that
# MPI_Finalize has unloaded by the time LeakSanitizer reports ("<unknown module>"), and the
# narrow suppressions in lsan.supp (MPI_Init_thread, ompi_mpi_finalize, …) could not match.
# It makes malloc slower, so only the MPI runs pay for it.
MPI_ASAN=":fast_unwind_on_malloc=0"

# run_case NAME EXPECTED_EXIT LIMIT_S cmd…: runs one test; writes NAME.result (PASS|FAIL|SKIP SECONDS RC).
run_case() {
  local name=$1 want=$2 limit=$3; shift 3
  local dir="$out/$name.reports" log="$out/$name.log" rc=0 t0 t1 verdict opts
  mkdir -p "$dir"
  mapfile -t opts < <(sanitizer_env "$dir")
  t0=$(date +%s.%N)
  env "${opts[@]}" timeout -k 10 "$limit" "$@" >"$log" 2>&1 </dev/null || rc=$?
  t1=$(date +%s.%N)
  if [ -n "$(ls -A "$dir")" ]; then
    verdict=FAIL
  elif [ "$rc" -eq "$want" ]; then
    verdict=PASS
  elif [ "$rc" -eq 77 ] && grep -q 'SKIPPED' "$log"; then
    verdict=SKIP
  else
    verdict=FAIL
  fi
  echo "$verdict $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') $rc" >"$out/$name.result"
}

# report NAME: the one line, and on failure the log's tail and every sanitizer report.
report() {
  local name=$1 verdict secs rc
  read -r verdict secs rc <"$out/$name.result"
  printf '%-4s %-34s %6ss\n' "$verdict" "$name" "$secs"
  if [ "$verdict" = FAIL ]; then
    echo "---- $name: exit $rc; last lines of its output:"
    tail -n 40 "$out/$name.log"
    for f in "$out/$name.reports"/*; do
      [ -f "$f" ] || continue
      echo "---- $name: sanitizer report $(basename "$f"):"
      head -n 80 "$f"
    done
    echo "----"
  fi
}

names=()
# Unit tests, two at a time.
unit_tests() {
  local running=0 bin name
  for bin in "$@"; do
    [ -x "$bin" ] || { echo "sanitize.sh: $bin is missing (make $mode builds it)" >&2; echo "FAIL 0 127" >"$out/$(basename "$bin").result"; names+=("$(basename "$bin")"); continue; }
    name=$(basename "$bin")
    names+=("$name")
    run_case "$name" 0 900 "$bin" --gtest_color=no &
    running=$((running + 1))
    if [ "$running" -ge 2 ]; then
      wait -n
      running=$((running - 1))
    fi
  done
  wait
}

mpi_program() {  # NPROC PROGRAM
  local n=$1 prog=$2 name
  name="$(basename "$prog").np$n"
  names+=("$name")
  ASAN_EXTRA=$MPI_ASAN run_case "$name" 0 600 mpirun -np "$n" --oversubscribe --bind-to none "$prog" --gtest_color=no
}

if [ "$mode" = asan ]; then
  unit_tests "$build"/tests/test_*
  mpi_program 2 "$build/tests/mpi/test_dist_collectives"
  mpi_program 2 "$build/tests/sanitizers/test_watchdog_hang"
  # End-to-end scripts that feed bad input to the parsers (options, INI, model specs; IDX, npy,
  # CSV, CIFAR files for hpcdata): their error paths run under ASan too.
  for t in cli_errors hpcdata hpcdata_formats; do
    names+=("e2e_$t")
    ASAN_EXTRA=$MPI_ASAN run_case "e2e_$t" 0 600 bash "tests/e2e/$t.sh" "$build"
  done
  # The training smoke run: MNIST sample, 2 ranks, a small CNN with (sync) BatchNorm and dropout;
  # stopped at step 150 by the test hook (SIGUSR1 → checkpoint → exit 75), resumed to 300.
  # hpcdata packs it under ASan too (the IDX reader and the HDF5 writer).
  data_tools/fetch-mnist-sample "$build/testdata/mnist-idx" >"$out/fetch.log" 2>&1 ||
    { cat "$out/fetch.log"; echo "sanitize.sh: the MNIST sample is not available" >&2; exit 1; }
  data="$out/mnist.h5"
  names+=(hpcdata_pack_mnist)
  run_case hpcdata_pack_mnist 0 300 "$build/hpcdata" pack --from mnist-idx "$build/testdata/mnist-idx" -o "$data"
  run=(mpirun -np 2 --oversubscribe --bind-to none "$build/hpctrain" --data.path "$data"
       --model.spec "conv(8,3,pad=1) bn relu maxpool(2) flatten dropout(0.1) linear(32) relu linear(10)"
       --train.batch_size 32 --train.steps 300 --log.every 50 --log.progress plain
       --ckpt.every_steps 100 --ckpt.keep 2 --run.dir "$out/run")
  names+=(train_stop_at_150)
  HPCTRAIN_FAULT=sigusr1@step_end:1:150 ASAN_EXTRA=$MPI_ASAN run_case train_stop_at_150 75 600 "${run[@]}"
  names+=(train_resume_to_300)
  ASAN_EXTRA=$MPI_ASAN run_case train_resume_to_300 0 600 "${run[@]}" --resume auto
  if grep -q '^PASS' "$out/train_resume_to_300.result"; then
    # The resumed run must really have resumed, finished and saved.
    grep -q 'resumed from .*ckpt-00000150.h5' "$out/train_resume_to_300.log" &&
      grep -q '^final:' "$out/train_resume_to_300.log" && [ -f "$out/run/ckpt-00000300.h5" ] ||
      echo "FAIL $(cut -d' ' -f2 "$out/train_resume_to_300.result") 0" >"$out/train_resume_to_300.result"
  fi
else
  unit_tests "$build/tests/test_loader" "$build/tests/test_dist"
  mpi_program 2 "$build/tests/mpi/test_dist_collectives"
  mpi_program 2 "$build/tests/mpi/test_dist_equivalence"
  mpi_program 2 "$build/tests/sanitizers/test_watchdog_hang"
fi

passed=0 failed=0 skipped=0
echo "== $mode: $build"
for name in "${names[@]}"; do
  report "$name"
  case "$(cut -d' ' -f1 "$out/$name.result")" in
    PASS) passed=$((passed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1)) ;;
  esac
done
[ -z "${SANITIZE_KEEP:-}" ] || echo "logs and reports kept in $out"
echo "$mode: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
