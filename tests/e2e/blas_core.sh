#!/usr/bin/env bash
# ctest-timeout: 180
# The start-up BLAS core check (src/backend/cpu/blas_core.h), end to end:
#  1. without OPENBLAS_CORETYPE the core in use has the CPU's class (the library's
#     choice, or its correction where OpenBLAS misdetects the CPU);
#  2. a lesser core chosen by the library (simulated: OPENBLAS_CORETYPE=Prescott
#     that HPCTRAIN_FAULT=lesser@blas_core marks as the library's pick) is
#     corrected by re-executing with the CPU's best core, and the start-up
#     line of a real training run (2 ranks) says so, with the speed class;
#  3. a corrected core that fails the sgemm self-check (wrong@blas_check) is
#     never used: back to the library's choice, and the line says why;
#  4. an OPENBLAS_CORETYPE the user set is kept;
#  5. the CPU kernel switches HPCTRAIN_CPU_CONV/GEMM/ISA are accepted;
#  6. hpctrain doctor shows the core and warns about a lesser one.
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
unset OPENBLAS_CORETYPE HPCTRAIN_FAULT

flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { grep -qw "$1" <<<"$flags"; }
if has avx512f && has avx512bw && has avx512vl && has avx2 && has fma; then
  class=AVX-512 best=SkylakeX
elif has avx2 && has fma; then
  class=AVX2 best=Haswell
else
  skip "the CPU has no AVX2+FMA: Prescott is not a lesser core here"
fi
grep -q DYNAMIC_ARCH < <("$hp" --version) || skip "this OpenBLAS is not a DYNAMIC_ARCH build: its core cannot change"

core_line() { grep -m1 'BLAS core:' "$1" || { cat "$1" >&2; fail "no 'BLAS core:' line"; }; }

# 1. unset: the library's own choice where it fits the CPU, or corrected where OpenBLAS
#    misdetects this CPU (VMs that mask the model: Prescott on an AVX-512 Xeon)
"$hp" --version >"$TMP/v1"
line=$(core_line "$TMP/v1")
grep -Eq "^  BLAS core: [A-Za-z0-9_]+ \[$class\]: (OpenBLAS's choice, fits the CPU|corrected: OpenBLAS chose)" <<<"$line" ||
  fail "the core in use is not of the CPU's class $class: $line"
grep -q "CPU .* \[$class\]" <<<"$line" || fail "the CPU's class $class is not shown: $line"
grep -q "sgemm self-check ok" <<<"$line" || fail "$line"
pass "library's choice: $line"

# 2. a lesser core is corrected (OpenBLAS itself reports the core it loaded)
OPENBLAS_CORETYPE=Prescott HPCTRAIN_FAULT=lesser@blas_core OPENBLAS_VERBOSE=2 "$hp" --version >"$TMP/v2" 2>"$TMP/e2"
line=$(core_line "$TMP/v2")
grep -q "^  BLAS core: $best \[$class\]: corrected: OpenBLAS chose Prescott \[SSE\], re-executed with OPENBLAS_CORETYPE=$best" <<<"$line" ||
  fail "no correction to $best: $line"
grep -q "sgemm self-check ok" <<<"$line" || fail "$line"
grep -q "^  BLAS:  .* $best " "$TMP/v2" || { cat "$TMP/v2" >&2; fail "openblas_get_config does not name $best"; }
grep -q "Core: $best" "$TMP/e2" || { cat "$TMP/e2" >&2; fail "OPENBLAS_VERBOSE does not report Core: $best"; }
pass "corrected: $line"

data=$(mnist_h5)
HPC_TEST_TIMEOUT=120 OPENBLAS_CORETYPE=Prescott HPCTRAIN_FAULT=lesser@blas_core run_mpi 2 "$hp" train \
  --data.path "$data" --model.preset mlp --train.steps 3 --train.batch_size 16 --run.dir "$TMP/run" \
  >"$TMP/train" 2>&1 || { tail -20 "$TMP/train" >&2; fail "training with a corrected core failed"; }
line=$(core_line "$TMP/train")
grep -q "$best \[$class\]: corrected: OpenBLAS chose Prescott" <<<"$line" || fail "start-up line: $line"
pass "2-rank training start-up: $line"

# 3. a corrected core that computes wrong results is never used
OPENBLAS_CORETYPE=Prescott HPCTRAIN_FAULT=lesser@blas_core,wrong@blas_check "$hp" --version >"$TMP/v3"
line=$(core_line "$TMP/v3")
grep -q "^  BLAS core: Prescott \[SSE\]: OpenBLAS chose Prescott \[SSE\]; $best failed the sgemm self-check" <<<"$line" ||
  fail "a failing $best was not rejected: $line"
pass "rejected: $line"

# 4. the user's OPENBLAS_CORETYPE is kept
OPENBLAS_CORETYPE=Prescott "$hp" --version >"$TMP/v4"
line=$(core_line "$TMP/v4")
grep -q "^  BLAS core: Prescott \[SSE\]: set by the user (OPENBLAS_CORETYPE=Prescott); the CPU could run $best" <<<"$line" ||
  fail "the user's core was not kept: $line"
pass "user's choice kept: $line"

# 5. the CPU kernel switches (read before the configuration) are accepted, not "unknown
#    environment variable", and the start-up line says the convolutions are lowered
HPC_TEST_TIMEOUT=120 HPCTRAIN_CPU_CONV=lowering HPCTRAIN_CPU_GEMM=openblas HPCTRAIN_CPU_ISA=avx2 run_mpi 1 "$hp" \
  train --data.path "$data" --model.preset cnn --train.steps 2 --train.batch_size 8 --run.dir "$TMP/run5" \
  >"$TMP/train5" 2>&1 || { tail -20 "$TMP/train5" >&2; fail "training with HPCTRAIN_CPU_* set failed"; }
grep -q "^  oneDNN: .*\(off (HPCTRAIN_CPU_CONV=lowering)\|not built\)" "$TMP/train5" ||
  { grep oneDNN "$TMP/train5" >&2; fail "HPCTRAIN_CPU_CONV=lowering not reported"; }
pass "HPCTRAIN_CPU_CONV/GEMM/ISA accepted: $(grep -m1 '^  oneDNN:' "$TMP/train5")"

# 6. the doctor shows the core in use and warns about a lesser one the user forced
OPENBLAS_CORETYPE=Prescott "$hp" doctor --local >"$TMP/doctor" 2>&1 || true
grep -q "^  BLAS core Prescott \[SSE\]: set by the user" "$TMP/doctor" || { cat "$TMP/doctor" >&2; fail "doctor: no BLAS core row"; }
grep -q "^warning: the BLAS kernels on .* are slower than the CPU allows" "$TMP/doctor" ||
  { cat "$TMP/doctor" >&2; fail "doctor: no warning about the lesser core"; }
"$hp" doctor --local >"$TMP/doctor2" 2>&1 || true
grep -q "slower than the CPU allows" "$TMP/doctor2" && fail "doctor warns about the library's own, fitting core"
pass "doctor: BLAS core row, and a warning only for a lesser core"
