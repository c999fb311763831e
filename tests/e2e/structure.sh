#!/usr/bin/env bash
# ctest-timeout: 60
# The code's structure, as docs/architecture.md states it:
#  1. the folders of src/ include only folders below them in one order, so
#     dependencies point down and no two folders include each other;
#  2. every backend op of src/backend/ops.def is named in at most 3 files
#     under src/backend/ (the table, its CPU and its CUDA implementation);
#  3. the test hooks are one fault hook: no TestHooks, no legacy variables;
#  4. one CPU dispatch: instruction-set code (intrinsics, target attributes,
#     `#if` on ISA macros) lives only in src/backend/cpu/isa/, whose tables
#     the ops call (kernel_table<T>()), and no op re-decides its ISA.
source "$(dirname "$0")/lib.bash"
cd "$ROOT"

# ---- 1. dependencies point down ---------------------------------------------------
order=(doctor train ckpt optim dist config nn text data backend core)  # higher to lower; kernels below all
level() {
  local i
  for i in "${!order[@]}"; do [ "${order[$i]}" = "$1" ] && { echo "$i"; return; }; done
  [ "$1" = kernels ] && echo 99 || echo -1
}
bad=()
for folder in "${order[@]}"; do
  mine=$(level "$folder")
  while IFS=: read -r file inc; do
    other=$(level "$inc")
    [ "$other" -lt 0 ] && { bad+=("$file includes $inc/, a folder not in the order"); continue; }
    [ "$other" -le "$mine" ] && bad+=("$file includes $inc/ (not below $folder)")
  done < <(grep -rhoE --with-filename '#include "[a-z_]+/' "src/$folder" | sed -E 's#^([^:]+):\#include "([a-z_]+)/#\1:\2#' |
           awk -F: -v f="$folder" '$2 != f')
done
[ ${#bad[@]} -eq 0 ] || { printf '%s\n' "${bad[@]}" >&2; fail "${#bad[@]} include(s) point up or sideways"; }
pass "src/ folders include only folders below them: ${order[*]} kernels"

# ---- 2. one op table ----------------------------------------------------------------
ops=$(grep -oP '^HPC_OP\([^,]+, \K[a-z_0-9]+' src/backend/ops.def)
[ "$(echo "$ops" | wc -l)" -ge 40 ] || fail "ops.def lists only $(echo "$ops" | wc -l) ops: is the table's form still HPC_OP(ret, name, ...)?"
over=()
for op in $ops; do
  n=$(grep -rlw "$op" src/backend | wc -l)
  [ "$n" -le 3 ] || over+=("$op: $(grep -rlw "$op" src/backend | tr '\n' ' ')")
done
[ ${#over[@]} -eq 0 ] || { printf '%s\n' "${over[@]}" >&2; fail "${#over[@]} op name(s) in more than 3 files under src/backend"; }
pass "$(echo "$ops" | wc -l) ops, each named in at most 3 files under src/backend (table, CPU, CUDA)"

# ---- 3. one fault hook ----------------------------------------------------------------
legacy=$(grep -rnE 'TestHooks|HPCTRAIN_TEST_(STOP_AT_STEP|STOP_RANK|STEP_DELAY_MS|CRASH_IN_CKPT|STALL|EXIT|SLOW_RANK)' \
  src scripts slurm tests/e2e/*.sh --include='*' 2>/dev/null | grep -v '^tests/e2e/structure.sh' || true)
[ -z "$legacy" ] || { echo "$legacy" >&2; fail "the former test hooks are still used"; }
pass "test hooks: HPCTRAIN_FAULT only (core/fault.h)"

# ---- 4. one CPU dispatch ----------------------------------------------------------------
isa_pattern='_mm(256|512)?_[a-z]|__m(128|256|512)|immintrin|__AVX|__FMA__|__SSE|target\("|HPC_AVX512|HPC_SIMD|HPC_CPU_VEC_EXP|simd::|avx512\(\)'
stray=$(grep -rnE "$isa_pattern" src kernels data_tools --include='*.cpp' --include='*.h' --include='*.cu' --include='*.cuh' |
  grep -v '^src/backend/cpu/isa/' || true)
[ -z "$stray" ] || { echo "$stray" >&2; fail "instruction-set code outside src/backend/cpu/isa/ (add a kernel to the table there)"; }
users=$(grep -lE 'kernel_table<' src/backend/cpu/*_ops.cpp | wc -l)
[ "$users" -ge 5 ] || fail "only $users CPU op file(s) call kernel_table<T>(): is the table still the one dispatch?"
pass "CPU instruction sets: code only in src/backend/cpu/isa/, $users op files call its kernel table"
