#!/usr/bin/env bash
# ctest-timeout: 400
# data.augment = "flip, crop:4" on the MNIST sample, through the real loader:
#  1. 2 ranks × 100 == 1 rank × 200 (each sample's transformation depends on
#     (seed, epoch, sample) only, not on the rank or the batch slot): losses
#     to float rounding, across an epoch end (40 steps per epoch);
#  2. a run stopped by SIGUSR1 after step 21 and resumed is bitwise the
#     uninterrupted one (losses, evaluations, final parameters);
#  3. augmentation changes training (losses differ from the run without it)
#     but not validation: `hpctrain eval` (never augmented) of the final
#     checkpoint gives bitwise the training run's final evaluation;
#  4. a non-image dataset or a bad word is one line, exit 2.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
export HPC_TEST_TIMEOUT=300
args=(--data.path "$data" --model.spec "conv(8,3,pad=1) bn relu maxpool(2) flatten linear(32) relu linear(10)"
      --train.steps 48 --log.every 4 --log.progress plain)
plain=("${args[@]}")
args+=(--data.augment "flip, crop:4")

run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 100 --run.dir "$TMP/two" >"$TMP/two.log" 2>&1 ||
  { cat "$TMP/two.log"; fail "2 ranks"; }
grep -q "augment: flip, crop:4" "$TMP/two.log" || fail "the start-up report does not name the augmentation"
run_mpi 1 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 200 --run.dir "$TMP/one" >"$TMP/one.log" 2>&1 ||
  { cat "$TMP/one.log"; fail "1 rank"; }
run_mpi 1 "$BUILD/hpctrain" "${plain[@]}" --train.batch_size 200 --run.dir "$TMP/plain" \
  >"$TMP/plain.log" 2>&1 || { cat "$TMP/plain.log"; fail "1 rank without augmentation"; }
"$PYTHON" - "$TMP/two/metrics.jsonl" "$TMP/one/metrics.jsonl" "$TMP/plain/metrics.jsonl" <<'EOF' ||
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b, c = (losses(p) for p in sys.argv[1:])
assert sorted(a) == sorted(b) and len(a) == 12, (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
print(f"2 ranks x 100 vs 1 rank x 200: largest relative loss difference {worst:.2e}")
assert worst < 1e-5, worst  # summation order only (see resume_exact.sh); a wrong transform moves it 1e-2
moved = max(abs(a[s] - c[s]) / abs(c[s]) for s in a if s > 1)
print(f"with vs without augmentation: {moved:.2e}")
assert moved > 1e-3, moved
EOF
  fail "2 ranks differ from 1 rank with the double batch"
pass "2 ranks x 100 == 1 rank x 200 with flip, crop:4; augmentation changes the losses"

rc=0
HPCTRAIN_FAULT=sigusr1@step_end:1:21 run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 100 \
  --run.dir "$TMP/split" >"$TMP/split1.log" 2>&1 || rc=$?
[ "$rc" -eq 75 ] || { cat "$TMP/split1.log"; fail "the stopped run exited $rc, expected 75"; }
run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 100 --run.dir "$TMP/split" --resume auto \
  >"$TMP/split2.log" 2>&1 || { cat "$TMP/split2.log"; fail "resumed run"; }
records() { grep -oE '"(step|loss|val_loss|val_acc|train_acc|grad_norm|lr)": [^,}]*' "$1/metrics.jsonl"; }
diff <(records "$TMP/two") <(records "$TMP/split") || fail "stop + resume changed the logged losses"
"$PYTHON" - "$TMP/two/ckpt-00000048.h5" "$TMP/split/ckpt-00000048.h5" <<'EOF' || fail "final parameters differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["params_flat"][...] for p in sys.argv[1:])
assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
EOF
pass "SIGUSR1 after step 21 + resume: bitwise the uninterrupted run (losses, evaluations, parameters)"

timeout -k 10 120 "$BUILD/hpctrain" eval --checkpoint "$TMP/one/ckpt-00000048.h5" --data.path "$data" \
  --out "$TMP/e.json" >"$TMP/e.log" 2>&1 || { cat "$TMP/e.log"; fail "eval"; }
"$PYTHON" - "$TMP/one/metrics.jsonl" "$TMP/e.json" <<'EOF' || fail "validation was augmented"
import json, sys
final = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][-1]
e = json.load(open(sys.argv[2]))
assert (e["val_loss"], e["val_acc"]) == (final["val_loss"], final["val_acc"]), (e, final)
print("validation during training == eval without augmentation:", e["val_loss"])
EOF
pass "validation batches are not augmented (training's final evaluation == eval's, bitwise)"

"$BUILD/hpcdata" synth -o "$TMP/flat.h5" --samples 64 --val 16 --shape 12 --classes 3 > /dev/null
expect_exit 2 "data.augment flip: needs image samples C×H×W" \
  "$BUILD/hpctrain" --data.path "$TMP/flat.h5" --model.preset mlp --train.steps 1 --data.augment flip --run.dir "$TMP/f"
expect_exit 2 "option --data.augment: unknown augmentation 'rotate'" \
  "$BUILD/hpctrain" --data.path "$data" --data.augment "flip, rotate" --run.dir "$TMP/g"
