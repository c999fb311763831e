#!/usr/bin/env bash
# Writes the CTest file for `make test`: every GoogleTest binary in
# BUILD/tests and every end-to-end script tests/e2e/*.sh, each with a timeout.
# Scripts exit 77 to report SKIPPED (missing GPU, Slurm, …) visibly.
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
for bin in "$build"/tests/test_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  echo "add_test($name \"$bin\")"
  echo "set_tests_properties($name PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 WORKING_DIRECTORY \"$root\")"
done
for script in "$root"/tests/e2e/*.sh; do
  [ -f "$script" ] || continue
  name="e2e_$(basename "$script" .sh)"
  timeout=$(grep -m1 -oP '^# ctest-timeout: \K[0-9]+' "$script" || echo 600)
  echo "add_test($name bash \"$script\" \"$build\")"
  echo "set_tests_properties($name PROPERTIES TIMEOUT $timeout SKIP_RETURN_CODE 77 WORKING_DIRECTORY \"$root\")"
done
