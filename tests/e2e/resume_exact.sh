#!/usr/bin/env bash
# ctest-timeout: 300
# Exact resume on CPU with 2 ranks: 48 steps straight, versus a run stopped
# after step 21 (mid-epoch, mid logging window, through the real signal
# path: the test hook raises SIGUSR1 on rank 1) and resumed with --resume
# auto: bitwise-identical losses (every logged one, 17 digits), evaluations,
# final parameters, BatchNorm buffers and Adam state. The run crosses an
# epoch end (40 steps per epoch) after the resume.
# Then the same checkpoint resumed on 1 rank with the same global batch:
# the same losses to float rounding (tolerance below).
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
# 2 ranks x 100 = global batch 200: 40 steps per epoch of the 8000 samples.
# No dropout: its masks depend on the rank, so the 1-rank comparison needs none.
args=(--data.path "$data" --model.spec "conv(8,3,pad=1) bn relu maxpool(2) flatten linear(32) relu linear(10)"
      --train.steps 48 --log.every 4 --log.progress plain --optim.schedule cosine)

args2=("${args[@]}" --train.batch_size 100)
run_mpi 2 "$BUILD/hpctrain" "${args2[@]}" --run.dir "$TMP/straight" >"$TMP/straight.log" 2>&1 ||
  { cat "$TMP/straight.log"; fail "straight run"; }

rc=0
HPCTRAIN_FAULT=sigusr1@step_end:1:21 run_mpi 2 "$BUILD/hpctrain" "${args2[@]}" --run.dir "$TMP/split" >"$TMP/split1.log" 2>&1 || rc=$?
[ "$rc" -eq 75 ] || { cat "$TMP/split1.log"; fail "the stopped run exited $rc, expected 75"; }
grep -q "stopped after step 21 on all 2 rank(s)" "$TMP/split1.log" || { cat "$TMP/split1.log"; fail "no stop at step 21"; }
[ -f "$TMP/split/ckpt-00000021.h5" ] || fail "no checkpoint at step 21"
! grep -q '^final:' "$TMP/split1.log" || fail "a stopped run must not print a final result"
pass "stopped after step 21 with exit 75 and a checkpoint"

run_mpi 2 "$BUILD/hpctrain" "${args2[@]}" --run.dir "$TMP/split" --resume auto >"$TMP/split2.log" 2>&1 ||
  { cat "$TMP/split2.log"; fail "resumed run"; }
grep -q "resumed from $TMP/split/ckpt-00000021.h5: step 21 of 48" "$TMP/split2.log" || { cat "$TMP/split2.log"; fail "did not resume from step 21"; }

# Every training and evaluation record, without the timing fields.
records() { grep -oE '"(step|loss|val_loss|val_acc|train_acc|grad_norm|lr)": [^,}]*' "$1/metrics.jsonl"; }
[ "$(records "$TMP/straight" | grep -c '"loss"')" -eq 12 ] || fail "expected 12 loss records"
grep -q '"val_loss"' "$TMP/straight/metrics.jsonl" || fail "no evaluation in the run"
diff <(records "$TMP/straight") <(records "$TMP/split") || fail "stop + resume changed the logged losses"
diff <(grep '^final:' "$TMP/straight.log") <(grep '^final:' "$TMP/split2.log") || fail "final evaluation differs"
pass "identical losses, evaluations and final line (bitwise)"

"$PYTHON" - "$TMP/straight/ckpt-00000048.h5" "$TMP/split/ckpt-00000048.h5" <<'EOF' || fail "final checkpoints differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = ["params_flat"] + ["buffers/" + k for k in a["buffers"]] + ["optimizer/" + k for k in a["optimizer"]]
assert len(names) == 1 + 2 + 2, names  # params, one BatchNorm, Adam
for n in names:
    x, y = a[n][...], b[n][...]
    if x.shape != y.shape or not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
        sys.exit(f"{n}: differs in {np.count_nonzero(x != y)} of {x.size} values")
for k in ["step", "epoch", "consumed_samples"]:
    assert a.attrs[k] == b.attrs[k], k
assert a["optimizer"].attrs["steps_taken"] == b["optimizer"].attrs["steps_taken"] == 48
print("bitwise equal:", ", ".join(names))
EOF
pass "final parameters, BatchNorm buffers and Adam state are bitwise identical"

# Another world size, same global batch: 1 rank x 200.
mkdir -p "$TMP/one"
cp "$TMP/split/ckpt-00000021.h5" "$TMP/one/"
run_mpi 1 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 200 --run.dir "$TMP/one" --resume auto \
  >"$TMP/one.log" 2>&1 || { cat "$TMP/one.log"; fail "resume on 1 rank"; }
grep -q "resuming on 1 rank(s) a run saved on 2" "$TMP/one.log" || { cat "$TMP/one.log"; fail "no note about the world size"; }
# Tolerance: the same samples in each global batch, so only float summation
# order differs (per-rank partial sums, the allreduce, SyncBN statistics),
# grown by 27 Adam steps. Measured: about 5e-9 relative. 1e-5 leaves room for
# other BLAS builds and still catches any wrong sample, batch or restored
# state, which move the loss at the 1e-2 level.
"$PYTHON" - "$TMP/straight/metrics.jsonl" "$TMP/one/metrics.jsonl" <<'EOF' || fail "1-rank resume does not match"
import json, sys
def losses(p, after):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and r["step"] > after}
a, b = losses(sys.argv[1], 21), losses(sys.argv[2], 21)
assert sorted(a) == sorted(b) and len(a) == 7, (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
print(f"largest relative loss difference after the resume: {worst:.2e}")
assert worst < 1e-5, worst
EOF
pass "resume on another world size with the same global batch: same losses to float rounding"
