#!/usr/bin/env bash
# ctest-timeout: 900
# The GPU suite under CTest. First, everywhere: the GPU test programs run
# their whole harness with the CPU standing in for the GPU
# (--self-check-on-cpu), so a test bug shows here and not first on a GPU
# machine. Then tests/gpu/run.sh (without its build and benchmark): on a
# machine without a GPU it reports "SKIPPED: no GPU" (exit 77), which CTest
# shows as skipped; with a GPU it runs the ops, layers and MNIST checks.
source "$(dirname "$0")/lib.bash"
for t in test_cuda_ops test_cuda_layers test_cuda_transformer; do
  [ -x "$BUILD/tests/$t" ] || fail "$BUILD/tests/$t was not built"
  timeout -k 10 120 "$BUILD/tests/$t" --self-check-on-cpu > "$TMP/$t.log" 2>&1 \
    || { tail -40 "$TMP/$t.log"; fail "$t --self-check-on-cpu"; }
done
pass "the GPU tests' harness passes with the CPU as the device under test"
rc=0
bash "$ROOT/tests/gpu/run.sh" "$BUILD" --no-build --no-bench || rc=$?
[ "$rc" -eq 77 ] && skip "no GPU: tests/gpu/run.sh needs one (run it on a GPU machine)"
[ "$rc" -eq 0 ] || fail "tests/gpu/run.sh failed (exit $rc): see $BUILD/gpu-report.md"
pass "GPU suite"
