#!/usr/bin/env bash
# scripts/ci-extra.sh: CI's hardening stage, run by .ci/run after `make test`.
#
#   lint       make lint (clang-format check, clang-tidy, cppcheck)
#   asan       make asan-test: unit tests, the MPI collectives and a 2-rank
#              training run with checkpoint save + resume under ASan + UBSan,
#              LeakSanitizer clean at every exit (scripts/sanitize.sh)
#   tsan       make tsan-test: loader, dist and the MPI programs under TSan
#   fuzz       make fuzz FUZZ_SECONDS=30 FUZZ_SEED=1 (a fixed seed: a finding
#              reproduces locally with the same seed and a fresh work corpus)
#   cpu-build  plain (-O3) CUDA=0 build of hpctrain and hpcdata: only with
#              CI_CPU_BUILD=1. By default the ASan build stands in for it: it
#              compiles every source of the CUDA=0 configuration (the nocuda/
#              stubs included) and links both programs and every test, which is
#              what the CPU-only build was there to prove; the plain one would
#              recompile all of src/ again at -O3 (~4 min on 2 cores) for only
#              the optimiser's extra warnings, which do not fail a build.
#
# Every stage runs even when an earlier one failed, so one CI run reports
# them all. Prints each stage's result and wall time, then
# "N passed, N failed, N skipped"; exits 1 when any stage failed.
# CI_EXTRA_STAGES="asan tsan" runs only those (default: all).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
stages=${CI_EXTRA_STAGES:-lint asan tsan fuzz cpu-build}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
FUZZ_SEED=${FUZZ_SEED:-1}
jobs=${SAN_JOBS:-2}

passed=0 failed=0 skipped=0
summary=()
# stage NAME cmd…: runs one stage, records PASS/FAIL and its wall time.
stage() {
  local name=$1; shift
  echo "==== ci-extra: $name: $*"
  local t0 t1 rc=0
  t0=$(date +%s)
  "$@" || rc=$?
  t1=$(date +%s)
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1)); summary+=("$(printf 'PASS %-10s %5ss' "$name" $((t1 - t0)))")
  else
    failed=$((failed + 1)); summary+=("$(printf 'FAIL %-10s %5ss (exit %s)' "$name" $((t1 - t0)) "$rc")")
  fi
}
skip() {
  echo "==== ci-extra: $1: SKIPPED: $2"
  skipped=$((skipped + 1)); summary+=("$(printf 'SKIP %-10s        %s' "$1" "$2")")
}

for s in $stages; do
  case "$s" in
    lint) stage lint make --no-print-directory lint ;;
    asan) stage asan make --no-print-directory SAN_JOBS="$jobs" asan-test ;;
    tsan) stage tsan make --no-print-directory SAN_JOBS="$jobs" tsan-test ;;
    fuzz)
      if make -n fuzz FUZZ_SECONDS="$FUZZ_SECONDS" >/dev/null 2>&1; then
        stage fuzz make --no-print-directory fuzz FUZZ_SECONDS="$FUZZ_SECONDS" FUZZ_SEED="$FUZZ_SEED"
      else
        skip fuzz "the Makefile has no 'fuzz' target yet"
      fi
      ;;
    cpu-build)
      if [ "${CI_CPU_BUILD:-0}" = 1 ]; then
        stage cpu-build make --no-print-directory -j"$jobs" CUDA=0 BUILD=build-cpu build-cpu/hpctrain build-cpu/hpcdata
      else
        skip cpu-build "the CUDA=0 ASan build covers it (CI_CPU_BUILD=1 runs it)"
      fi
      ;;
    *) echo "ci-extra: unknown stage '$s' (lint asan tsan fuzz cpu-build)" >&2; failed=$((failed + 1)) ;;
  esac
done

echo "==== ci-extra summary"
printf '  %s\n' "${summary[@]}"
echo "ci-extra: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
