#!/usr/bin/env bash
# ctest-timeout: 120
# The CUDA build, checked on a machine without a GPU:
#  1. every CUDA source (kernels/*.cu, src/*/cuda/*) compiled without a
#     single warning (-Wall -Wextra; the Makefile keeps each object's
#     diagnostics in OBJECT.warn);
#  2. the binary links cuDNN, cuBLAS, NCCL and the CUDA runtime, and still runs
#     CPU-only: --version, and GPU options are one-line errors with exit 2;
#  3. the CPU-only build (make CUDA=0) stays linkable: the stand-ins in the
#     nocuda/ folders (src/backend/nocuda, src/dist/nocuda) define every
#     function of the cuda/ folders that the rest of the code calls, and no
#     source outside a cuda/ folder includes a CUDA header. (The full
#     CPU-only build takes minutes on 2 cores, so .ci/run does it, after
#     make test.)
source "$(dirname "$0")/lib.bash"
obj="$BUILD/obj"
ls "$obj"/kernels/*.cu.o > /dev/null 2>&1 || skip "this build has no CUDA (no nvcc when it was made)"

# ---- 1. no warnings --------------------------------------------------------------
noisy=() missing=()
for src in $(cd "$ROOT" && ls kernels/*.cu src/*/cuda/*.cu src/*/cuda/*.cpp 2>/dev/null); do
  o="$obj/${src%.cpp}.o"
  [[ "$src" == *.cu ]] && o="$obj/$src.o"
  if [ ! -f "$o.warn" ]; then missing+=("$src"); continue; fi
  [ -s "$o.warn" ] && noisy+=("$src")
done
[ ${#missing[@]} -eq 0 ] || fail "no compiler record for ${missing[*]} (built before the Makefile kept them: make clean, or rm their objects)"
if [ ${#noisy[@]} -gt 0 ]; then
  for s in "${noisy[@]}"; do echo "--- $s"; head -20 "$obj/${s%.cpp}.o.warn" "$obj/$s.o.warn" 2>/dev/null; done
  fail "compiler warnings in ${noisy[*]}"
fi
pass "$(cd "$ROOT" && ls kernels/*.cu src/*/cuda/*.cu src/*/cuda/*.cpp 2>/dev/null | wc -l) CUDA sources compiled without a warning"

# ---- 2. links CUDA, runs without a GPU -------------------------------------------------
libs=$(ldd "$BUILD/hpctrain")
for lib in libcudart libcudnn libnccl; do
  grep -q "$lib" <<< "$libs" || fail "hpctrain does not link $lib"
done
# cuBLAS is opened on the first GPU product (src/backend/cuda/cublas_api.h): linked, it would cost
# every process, CPU runs included, cuBLASLt's start-up (~0.4 s of CPU, ~210 MiB resident).
! grep -q "libcublas" <<< "$libs" || fail "hpctrain links libcublas: every process would pay cuBLAS's start-up"
pass "hpctrain links the CUDA runtime, cuDNN and NCCL; cuBLAS is left to its first use"
"$BUILD/hpctrain" --version | grep -q "CUDA runtime" || fail "--version does not report the CUDA versions"
pass "--version reports CUDA, cuDNN and NCCL"
if [ "$("$BUILD/tests/test_cuda_ops" > /dev/null 2>&1; echo $?)" = 77 ]; then  # no GPU here
  data=$(mnist_h5)
  common=(--data.path "$data" --run.dir "$TMP/run" --train.steps 1)
  expect_exit 2 "train.device cuda.*no CUDA device" "$BUILD/hpctrain" "${common[@]}" --train.device cuda
  expect_exit 2 "train.precision bf16.*needs a GPU" "$BUILD/hpctrain" "${common[@]}" --train.precision bf16
  expect_exit 2 "train.precision fp16.*needs a GPU" "$BUILD/hpctrain" "${common[@]}" --train.device auto \
    --train.precision fp16
fi

# ---- 3. the CPU-only build stays linkable ------------------------------------------------
cxx=${CXX:-g++}
stubs=()
for f in $(cd "$ROOT" && ls src/*/nocuda/*.cpp); do
  o="$TMP/$(echo "$f" | tr / _).o"
  "$cxx" -std=c++20 -I"$ROOT/src" -I"$ROOT" -c "$ROOT/$f" -o "$o" || fail "$f does not compile without CUDA"
  stubs+=("$o")
done
symbols() { sed -E 's/^[0-9a-f ]*[A-Za-z] //' | sort -u; }
# Objects of this build whose source still exists (a renamed file leaves a stale object behind).
current() {
  while read -r o; do
    local rel=${o#"$obj"/}
    [ -f "$ROOT/${rel%.o}.cpp" ] && echo "$o"
  done
}
cuda_objs=$(find "$obj/src" -path '*/cuda/*' -name '*.o' | current; find "$obj/src" -path '*/cuda/*' -name '*.cu.o')
host_objs=$(find "$obj/src" -name '*.o' -not -path '*/cuda/*' -not -path '*/nocuda/*' | current)
provided=$(echo "$cuda_objs" | xargs nm -C --defined-only | grep ' T ' | symbols)
needed=$(comm -12 <(echo "$host_objs" | xargs nm -C --undefined-only | symbols) <(echo "$provided"))
have=$(nm -C --defined-only "${stubs[@]}" | grep ' T ' | symbols)
absent=$(comm -23 <(echo "$needed") <(echo "$have"))
[ -z "$absent" ] || fail "the nocuda/ stand-ins lack: $absent"
pass "$(echo "$needed" | wc -l) functions of the cuda/ folders that other code calls all have CPU-only stand-ins"
# (Files that guard their CUDA includes with #if HPCTRAIN_CUDA, like doctor/versions.cpp, are fine.)
leaks=$(cd "$ROOT" && grep -rlE '#include [<"](cuda|cudnn|cublas|nccl|curand)[a-z_0-9]*\.h|#include "kernels/[a-z_]+\.cuh"' \
  src data_tools tests bench --include='*.cpp' --include='*.h' | grep -v '^src/[a-z_]*/cuda/' \
  | xargs -r grep -LE '^#if(def)? +HPCTRAIN_CUDA' || true)
[ -z "$leaks" ] || fail "CUDA headers included outside the CUDA backend (the CPU-only build cannot compile them): $leaks"
pass "no CUDA header outside the cuda/ folders and kernels/"
