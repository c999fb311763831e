#!/usr/bin/env bash
# ctest-timeout: 300
# Every bad resume input is one line and exit 2, on every rank, before any
# training: another model (spec; same spec text but another parameter count),
# another optimizer, another global batch without ckpt.allow_reshard, a file
# that is not HDF5, truncated, damaged, from a future format version, or a
# run directory whose checkpoints are all unreadable. And what is allowed:
# another global batch with ckpt.allow_reshard, --resume auto in an empty
# run directory (a fresh start).
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
base=(--data.path "$data" --train.batch_size 16 --log.progress none)
mlp=(--model.preset mlp --model.hidden 32)
run="$TMP/run"
run_mpi 2 "$BUILD/hpctrain" "${base[@]}" "${mlp[@]}" --train.steps 4 --run.dir "$run" >"$TMP/make.log" 2>&1 ||
  { cat "$TMP/make.log"; fail "making a checkpoint"; }
good="$run/ckpt-00000004.h5"
[ -f "$good" ] || fail "no final checkpoint written at the end of training"
pass "a final checkpoint is written at the end of training"

# resume_fails REGEX [hpctrain options…]: 2 ranks, exit 2, the message once.
resume_fails() {
  local pattern=$1
  shift
  expect_exit 2 "$pattern" run_mpi 2 "$BUILD/hpctrain" "${base[@]}" --train.steps 8 --run.dir "$TMP/other" "$@"
  [ "$(grep -c 'hpctrain: error' "$TMP/err")" -eq 1 ] || { cat "$TMP/err"; fail "the error is not printed exactly once"; }
  ! grep -q '"loss"' "$TMP/other/metrics.jsonl" 2>/dev/null || fail "training started before the resume was checked"
}

resume_fails "is for another model: its spec is .*linear\(32\).*this run's is .*linear\(48\)" \
  --model.preset mlp --model.hidden 48 --resume "$good"
resume_fails "is for another model" --model.preset cnn --resume "$good"
resume_fails "was trained with optim.name adam, this run uses sgd" "${mlp[@]}" --optim.name sgd --resume "$good"
resume_fails "global batch of 32 \(16 per rank × 2 rank\(s\) × 1 accumulation\), this run's is 64 .*ckpt.allow_reshard" \
  "${mlp[@]}" --train.accum_steps 2 --resume "$good"

# The same spec text with a different parameter count: the same layers on 14x14 inputs.
"$PYTHON" - "$data" "$TMP/small.h5" <<'EOF'
import sys, h5py, numpy as np
src, dst = sys.argv[1:]
with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
    for split in ("train", "val"):
        x = f[split + "/x"][:2000, :, ::2, ::2]
        g.create_dataset(split + "/x", data=x)
        for k, v in f[split + "/x"].attrs.items():
            g[split + "/x"].attrs[k] = v
        g.create_dataset(split + "/y", data=f[split + "/y"][:2000])
        g[split + "/y"].attrs["num_classes"] = np.int32(10)
EOF
spec=(--model.spec "flatten linear(10)")
run_mpi 2 "$BUILD/hpctrain" "${base[@]}" "${spec[@]}" --train.steps 2 --run.dir "$TMP/spec28" >/dev/null 2>&1 ||
  fail "checkpoint of the 28x28 spec run"
expect_exit 2 "checkpoint '.*' is for inputs of 1x28x28, this data has 1x14x14" \
  run_mpi 2 "$BUILD/hpctrain" --data.path "$TMP/small.h5" --train.batch_size 16 --log.progress none "${spec[@]}" \
  --train.steps 4 --run.dir "$TMP/spec14" --resume "$TMP/spec28/ckpt-00000002.h5"

# Files that are not checkpoints, or not whole ones.
echo "not a checkpoint" >"$TMP/text.h5"
resume_fails "checkpoint '$TMP/text.h5': not an HDF5 file" "${mlp[@]}" --resume "$TMP/text.h5"
head -c 20000 "$good" >"$TMP/truncated.h5"
resume_fails "checkpoint '$TMP/truncated.h5': cannot open it \(truncated file" "${mlp[@]}" --resume "$TMP/truncated.h5"
"$PYTHON" - "$data" "$TMP/foreign.h5" <<'EOF'
import shutil, sys
shutil.copy(*sys.argv[1:])
EOF
resume_fails "not an hpctrain checkpoint" "${mlp[@]}" --resume "$TMP/foreign.h5"
"$PYTHON" - "$good" "$TMP/future.h5" "$TMP/damaged.h5" <<'EOF'
import shutil, sys, h5py, numpy as np
good, future, damaged = sys.argv[1:]
shutil.copy(good, future)
with h5py.File(future, "r+") as f:
    f.attrs["format_version"] = np.int64(f.attrs["format_version"] + 1)
shutil.copy(good, damaged)
with h5py.File(damaged, "r") as f:
    offset = f["optimizer/exp_avg"].id.get_offset()
with open(damaged, "r+b") as f:
    f.seek(offset + 8)
    f.write(b"\xff\xff\xff\xff")
EOF
resume_fails "format version 2 was written by a newer hpctrain .* reads versions up to 1: upgrade hpctrain" \
  "${mlp[@]}" --resume "$TMP/future.h5"
resume_fails "optimizer/exp_avg is damaged \(CRC-32" "${mlp[@]}" --resume "$TMP/damaged.h5"
expect_exit 2 "option --resume: cannot open '$TMP/missing.h5'" "$BUILD/hpctrain" "${base[@]}" --resume "$TMP/missing.h5"

# --resume auto: checkpoints present but none readable is an error, not a fresh start.
mkdir -p "$TMP/broken"
cp "$TMP/truncated.h5" "$TMP/broken/ckpt-00000004.h5"
cp "$TMP/damaged.h5" "$TMP/broken/ckpt-00000003.h5"
expect_exit 2 "--resume auto: $TMP/broken holds 2 checkpoint\(s\) and none is readable" \
  run_mpi 2 "$BUILD/hpctrain" "${base[@]}" "${mlp[@]}" --train.steps 8 --run.dir "$TMP/broken" --resume auto

# Allowed: another global batch with ckpt.allow_reshard (the position is carried over in samples).
mkdir -p "$TMP/reshard"
cp "$good" "$TMP/reshard/"
run_mpi 2 "$BUILD/hpctrain" "${base[@]}" "${mlp[@]}" --train.accum_steps 2 --train.steps 8 --ckpt.allow_reshard true \
  --run.dir "$TMP/reshard" --resume auto >"$TMP/reshard.log" 2>&1 || { cat "$TMP/reshard.log"; fail "allow_reshard"; }
grep -q "the global batch changes from 32 to 64 (ckpt.allow_reshard)" "$TMP/reshard.log" || fail "no reshard note"
grep -q "resumed from $TMP/reshard/ckpt-00000004.h5: step 2 of 8" "$TMP/reshard.log" ||
  { grep resum "$TMP/reshard.log"; fail "4 steps of 32 samples should continue at step 2 of 64"; }
pass "exit 0: another global batch with ckpt.allow_reshard continues at the same sample"

# Allowed: --resume auto with no checkpoint at all starts fresh.
run_mpi 2 "$BUILD/hpctrain" "${base[@]}" "${mlp[@]}" --train.steps 2 --run.dir "$TMP/fresh" --resume auto \
  >"$TMP/fresh.log" 2>&1 || { cat "$TMP/fresh.log"; fail "fresh start"; }
grep -q "resume: no checkpoint in $TMP/fresh: starting at step 0" "$TMP/fresh.log" || fail "no fresh-start line"
pass "exit 0: --resume auto in an empty run directory starts at step 0"
