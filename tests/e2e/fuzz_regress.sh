#!/usr/bin/env bash
# ctest-timeout: 300
# Replays every fuzz seed corpus and every saved finding through its target.
#
# The targets (tests/fuzz/fuzz_*.cpp) are built by `make` with the project's
# compiler and a plain main() (tests/fuzz/replay_main.cpp) as
# BUILD/tests/fuzz_replay_NAME, so this needs no clang; `make fuzz` runs the
# same sources under libFuzzer with ASan/UBSan. Each input must end in
# success or a clean UserError: a target aborts on anything else (a crash,
# another exception type, a broken promise such as "hpctrain accepts what
# hpcdata pack wrote"), and this test names the input.
source "$(dirname "$0")/lib.bash"

export OPENBLAS_NUM_THREADS=1 HDF5_USE_FILE_LOCKING=FALSE
shopt -s nullglob
sources=("$ROOT"/tests/fuzz/fuzz_*.cpp)
[ ${#sources[@]} -gt 0 ] || fail "no fuzz targets in tests/fuzz"
for src in "${sources[@]}"; do
  name=$(basename "$src" .cpp)
  name=${name#fuzz_}
  bin="$BUILD/tests/fuzz_replay_$name"
  [ -x "$bin" ] || fail "$bin is not built (it is part of 'make all')"
  corpus="$ROOT/tests/fuzz/corpus/$name"
  seeds=("$corpus"/*)
  [ ${#seeds[@]} -gt 0 ] || fail "target $name has no seed corpus in $corpus"
  dirs=("$corpus")
  regressions=("$ROOT/tests/fuzz/regressions/$name"/*)
  [ ${#regressions[@]} -gt 0 ] && dirs+=("$ROOT/tests/fuzz/regressions/$name")
  rc=0
  timeout -k 5 120 "$bin" "${dirs[@]}" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 20 "$TMP/$name.err" >&2
    fail "fuzz target $name failed (exit $rc) on $(grep '^replay ' "$TMP/$name.err" | tail -1 | cut -d' ' -f2)"
  fi
  pass "$name: $(tail -n 1 "$TMP/$name.err") (${#seeds[@]} seeds, ${#regressions[@]} regressions)"
done
