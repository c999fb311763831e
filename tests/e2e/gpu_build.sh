#!/usr/bin/env bash
# ctest-timeout: 120
# The CUDA build, checked on a machine without a GPU:
#  1. every CUDA source (kernels/*.cu, src/backend/cuda/*) compiled without a
#     single warning (-Wall -Wextra; the Makefile keeps each object's
#     diagnostics in OBJECT.warn);
#  2. the binary links cuDNN, cuBLAS, NCCL and the CUDA runtime, and still runs
#     CPU-only: --version, and GPU options are one-line errors with exit 2;
#  3. the CPU-only build (make CUDA=0) stays linkable: the stubs in
#     src/backend/nocuda define every backend::cuda op the dispatch code calls
#     and every function of backend/device.h, and no source outside the CUDA
#     backend includes a CUDA header. (The full CPU-only build takes minutes on
#     2 cores, so .ci/run does it, after make test.)
source "$(dirname "$0")/lib.bash"
obj="$BUILD/obj"
ls "$obj"/kernels/*.cu.o > /dev/null 2>&1 || skip "this build has no CUDA (no nvcc when it was made)"

# ---- 1. no warnings --------------------------------------------------------------
noisy=() missing=()
for src in $(cd "$ROOT" && ls kernels/*.cu src/backend/cuda/*.cu src/backend/cuda/*.cpp 2>/dev/null); do
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
pass "$(cd "$ROOT" && ls kernels/*.cu src/backend/cuda/*.cu src/backend/cuda/*.cpp 2>/dev/null | wc -l) CUDA sources compiled without a warning"

# ---- 2. links CUDA, runs without a GPU -------------------------------------------------
libs=$(ldd "$BUILD/hpctrain")
for lib in libcudart libcublas libcudnn libnccl; do
  grep -q "$lib" <<< "$libs" || fail "hpctrain does not link $lib"
done
pass "hpctrain links the CUDA runtime, cuBLAS, cuDNN and NCCL"
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
for f in cuda_ops device; do
  "$cxx" -std=c++20 -I"$ROOT/src" -I"$ROOT" -c "$ROOT/src/backend/nocuda/$f.cpp" -o "$TMP/nocuda_$f.o" \
    || fail "src/backend/nocuda/$f.cpp does not compile without CUDA"
done
symbols() { sed -E 's/^[0-9a-f ]*[A-Za-z] //' | sort -u; }
needed=$(find "$obj/src" -name '*.o' -not -path '*/backend/cuda/*' -print0 | xargs -0 nm -C --undefined-only \
  | grep 'hpc::backend::cuda::' | symbols)
have=$(nm -C --defined-only "$TMP/nocuda_cuda_ops.o" | grep ' T ' | symbols)
absent=$(comm -23 <(echo "$needed") <(echo "$have"))
[ -z "$absent" ] || fail "src/backend/nocuda/cuda_ops.cpp lacks stubs for: $absent"
pass "$(echo "$needed" | wc -l) backend::cuda ops used by the dispatch code all have CPU-only stubs"
device_api=$(nm -C --defined-only "$obj/src/backend/cuda/device.o" | grep ' T hpc::backend::' | symbols)
absent=$(comm -23 <(echo "$device_api") <(nm -C --defined-only "$TMP/nocuda_device.o" | grep ' T ' | symbols))
[ -z "$absent" ] || fail "src/backend/nocuda/device.cpp lacks: $absent"
pass "backend/device.h has a CPU-only implementation of all $(echo "$device_api" | wc -l) functions"
# (Files that guard their CUDA includes with #if HPCTRAIN_CUDA, like doctor/versions.cpp, are fine.)
leaks=$(cd "$ROOT" && grep -rlE '#include [<"](cuda|cudnn|cublas|nccl|curand)[a-z_0-9]*\.h|#include "kernels/[a-z_]+\.cuh"' \
  src data_tools tests bench --include='*.cpp' --include='*.h' | grep -v '^src/backend/cuda/' \
  | xargs -r grep -LE '^#if(def)? +HPCTRAIN_CUDA' || true)
[ -z "$leaks" ] || fail "CUDA headers included outside the CUDA backend (the CPU-only build cannot compile them): $leaks"
pass "no CUDA header outside src/backend/cuda and kernels/"
