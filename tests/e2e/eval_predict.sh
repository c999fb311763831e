#!/usr/bin/env bash
# ctest-timeout: 600
# hpctrain eval / predict: on 1 and 2 ranks, eval's numbers equal the
# training run's final evaluation bitwise (trained on 1 and on 2 ranks, a
# model with BatchNorm, a last batch shorter than the others); eval.json has
# the documented keys and its confusion matrix adds up; predict's /probs are
# the same bits on 1 and 2 ranks, in file order, and their arg max gives
# eval's accuracy; a regression model's /output and val_loss; bad input is
# one line and exit 2, and leaves no file behind.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
export HPC_TEST_TIMEOUT=300
# Bitwise across 1 and 2 ranks needs the same BLAS threads per rank (OpenBLAS's sgemm bits depend on
# its thread count; docs/troubleshooting.md).
export OPENBLAS_NUM_THREADS=1
spec="conv(8,3,pad=1) bn relu maxpool(2) flatten linear(10)"
common=(--data.path "$data" --train.steps 40 --log.every 20 --log.progress plain)

timeout -k 10 300 "$BUILD/hpctrain" "${common[@]}" --train.batch_size 64 --model.spec "$spec" --run.dir "$TMP/r1" > "$TMP/r1.log" 2>&1 ||
  { cat "$TMP/r1.log"; fail "training on 1 rank failed"; }
run_mpi 2 "$BUILD/hpctrain" "${common[@]}" --train.batch_size 32 --model.spec "$spec" --run.dir "$TMP/r2" \
  > "$TMP/r2.log" 2>&1 || { cat "$TMP/r2.log"; fail "training on 2 ranks failed"; }

for run in r1 r2; do
  ckpt=$TMP/$run/ckpt-00000040.h5
  [ -f "$ckpt" ] || { ls "$TMP/$run"; fail "no checkpoint $ckpt"; }
  timeout -k 10 120 "$BUILD/hpctrain" eval --checkpoint "$ckpt" --data.path "$data" --out "$TMP/$run-e1.json" \
    > "$TMP/$run-e1.log" 2>&1 || { cat "$TMP/$run-e1.log"; fail "eval on 1 rank failed"; }
  run_mpi 2 "$BUILD/hpctrain" eval --checkpoint "$ckpt" --data.path "$data" > "$TMP/$run-e2.log" 2>&1 ||
    { cat "$TMP/$run-e2.log"; fail "eval on 2 ranks failed"; }
  cp "$TMP/$run/eval.json" "$TMP/$run-e2.json"  # the default place: beside the checkpoint
  grep -q "^per-class accuracy:" "$TMP/$run-e1.log" || fail "no per-class accuracy line"
  $PYTHON - "$TMP/$run/metrics.jsonl" "$TMP/$run-e1.json" "$TMP/$run-e2.json" <<'PY' || fail "$run: eval differs"
import json, sys
final = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][-1]
for path in sys.argv[2:]:
    e = json.load(open(path))
    for k in ("val_loss", "val_acc", "val_top5"):
        assert e[k] == final[k], (path, k, e[k], final[k])  # bitwise: 17 digits both ways
    conf = e["confusion"]
    assert len(conf) == 10 and sum(map(sum, conf)) == e["count"] == 2000, e["count"]
    assert abs(sum(conf[i][i] for i in range(10)) / 2000 - e["val_acc"]) < 1e-12
    assert len(e["per_class_acc"]) == 10 and all(0 <= a <= 1 for a in e["per_class_acc"])
print("eval == training's final evaluation:", final["val_loss"], final["val_acc"])
PY
  pass "$run: eval on 1 and 2 ranks equals the training run's final evaluation bitwise"
done

ckpt=$TMP/r1/ckpt-00000040.h5
timeout -k 10 120 "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$data" --out "$TMP/p1.h5" \
  > "$TMP/p1.log" 2>&1 || { cat "$TMP/p1.log"; fail "predict on 1 rank failed"; }
run_mpi 2 "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$data" --out "$TMP/p2.h5" \
  > "$TMP/p2.log" 2>&1 || { cat "$TMP/p2.log"; fail "predict on 2 ranks failed"; }
$PYTHON - "$TMP/p1.h5" "$TMP/p2.h5" "$data" "$TMP/r1-e1.json" <<'PY' || fail "predict's output is wrong"
import json, sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
y = h5py.File(sys.argv[3], "r")["val/y"][...]
e = json.load(open(sys.argv[4]))
probs, pred = a["probs"][...], a["pred"][...]
assert probs.shape == (len(y), 10) and probs.dtype == np.float32 and pred.dtype == np.int32
assert np.array_equal(probs, b["probs"][...]) and np.array_equal(pred, b["pred"][...]), "1 rank != 2 ranks"
assert np.array_equal(pred, probs.argmax(1)) and np.allclose(probs.sum(1), 1, atol=1e-5)
acc = float((pred == y).mean())
assert abs(acc - e["val_acc"]) < 1e-12, (acc, e["val_acc"])
conf = np.zeros((10, 10), int)
np.add.at(conf, (y, pred), 1)
assert conf.tolist() == e["confusion"], "confusion differs from predict's"
print("predict: accuracy", acc, "== eval's; 1 rank == 2 ranks")
PY
pass "predict: /probs and /pred in file order, equal on 1 and 2 ranks, accuracy = eval's"
ls "$TMP" | grep -q 'tmp-' && fail "a temporary file was left behind"

# A regression model: val_loss (mse) and /output.
"$BUILD/hpcdata" synth -o "$TMP/reg.h5" --samples 512 --val 100 --shape 6 --regression 3 > /dev/null
timeout -k 10 120 "$BUILD/hpctrain" --data.path "$TMP/reg.h5" --model.preset mlp --train.steps 10 \
  --train.batch_size 32 --run.dir "$TMP/reg" > "$TMP/reg.log" 2>&1 || { cat "$TMP/reg.log"; fail "regression training"; }
timeout -k 10 60 "$BUILD/hpctrain" eval --checkpoint "$TMP/reg/ckpt-00000010.h5" --data.path "$TMP/reg.h5" \
  > /dev/null 2>&1 || fail "regression eval failed"
timeout -k 10 60 "$BUILD/hpctrain" predict --checkpoint "$TMP/reg/ckpt-00000010.h5" --data.path "$TMP/reg.h5" \
  --out "$TMP/reg-pred.h5" > /dev/null 2>&1 || fail "regression predict failed"
$PYTHON - "$TMP/reg/metrics.jsonl" "$TMP/reg/eval.json" "$TMP/reg-pred.h5" "$TMP/reg.h5" <<'PY' || fail "regression"
import json, sys, h5py, numpy as np
final = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][-1]
e = json.load(open(sys.argv[2]))
assert e["val_loss"] == final["val_loss"] and "confusion" not in e, e
out, t = h5py.File(sys.argv[3], "r")["output"][...], h5py.File(sys.argv[4], "r")["val/y"][...]
assert out.shape == (100, 3)
mse = float(((out.astype(np.float64) - t) ** 2).sum(1).mean())
assert abs(mse - e["val_loss"]) < 1e-4 * max(1, mse), (mse, e["val_loss"])
print("regression: /output mse", mse, "== val_loss", e["val_loss"])
PY
pass "regression: eval's val_loss = training's, predict writes /output"

# Bad input: one line, exit 2, nothing written.
"$BUILD/hpcdata" synth -o "$TMP/rgb.h5" --samples 64 --val 16 --shape 3x8x8 --classes 10 > /dev/null
"$BUILD/hpcdata" synth -o "$TMP/c12.h5" --samples 64 --val 16 --shape 1x28x28 --classes 12 > /dev/null
$PYTHON -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f["train/x"], f["train/y"] = np.zeros((64, 1, 28, 28), np.float32), np.arange(64, dtype=np.int32) % 10
' "$TMP/noval.h5"
expect_exit 2 "samples are 3x8x8 but the model .* takes 1x28x28" \
  "$BUILD/hpctrain" eval --checkpoint "$ckpt" --data.path "$TMP/rgb.h5"
expect_exit 2 "12 classes but the model .* predicts 10" \
  "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$TMP/c12.h5" --out "$TMP/x.h5"
[ ! -e "$TMP/x.h5" ] || fail "predict left a file after refusing its input"
expect_exit 2 "option --out: the directory '$TMP/missing' of .* does not exist" \
  "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$data" --out "$TMP/missing/p.h5"
expect_exit 2 "option --out: required for predict" "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$data"
expect_exit 2 "has no validation split.*--eval.split train" \
  "$BUILD/hpctrain" eval --checkpoint "$ckpt" --data.path "$TMP/noval.h5" --eval.split val
expect_exit 2 "option --eval.split: only for 'hpctrain eval', 'predict' and 'export'" \
  "$BUILD/hpctrain" --data.path "$data" --eval.split val
head -c 3000 "$ckpt" > "$TMP/cut.h5"
expect_exit 2 "checkpoint '$TMP/cut.h5'" "$BUILD/hpctrain" eval --checkpoint "$TMP/cut.h5" --data.path "$data"
run_mpi 2 "$BUILD/hpctrain" eval --checkpoint "$ckpt" --data.path "$TMP/rgb.h5" > "$TMP/bad2.log" 2>&1 && fail "2 ranks accepted bad data"
[ "$(grep -c 'error' "$TMP/bad2.log")" -eq 1 ] || { cat "$TMP/bad2.log"; fail "2 ranks: not one error line"; }
pass "2 ranks: one error line for data that does not fit"
# The train split evaluates too (auto picks it when there is no /val).
timeout -k 10 60 "$BUILD/hpctrain" eval --checkpoint "$ckpt" --data.path "$TMP/noval.h5" --out "$TMP/nv.json" \
  > "$TMP/nv.log" 2>&1 || { cat "$TMP/nv.log"; fail "eval of /train failed"; }
grep -q '"split": "train", "count": 64' "$TMP/nv.json" || { cat "$TMP/nv.json"; fail "auto split"; }
grep -q "(64 training samples)" "$TMP/nv.log" || { cat "$TMP/nv.log"; fail "the final line does not name the training split"; }
pass "eval.split auto: /train when there is no /val"

# A language model: loss per token and perplexity, equal to the training run's final evaluation.
"$BUILD/hpcdata" pack --from text "$ROOT/README.md" "$ROOT/docs/architecture.md" -o "$TMP/text.h5" > /dev/null
timeout -k 10 200 "$BUILD/hpctrain" --data.path "$TMP/text.h5" --model.preset gpt-tiny --train.steps 3 --train.batch_size 8 \
  --log.progress none --run.dir "$TMP/lm" > "$TMP/lm.log" 2>&1 || { cat "$TMP/lm.log"; fail "gpt-tiny training"; }
run_mpi 2 "$BUILD/hpctrain" eval --checkpoint "$TMP/lm/ckpt-00000003.h5" --data.path "$TMP/text.h5" > "$TMP/lme.log" 2>&1 ||
  { cat "$TMP/lme.log"; fail "gpt-tiny eval on 2 ranks"; }
grep -q "perplexity" "$TMP/lme.log" || fail "no perplexity in eval's output"
$PYTHON - "$TMP/lm/metrics.jsonl" "$TMP/lm/eval.json" <<'PY' || fail "language-model eval differs"
import json, math, sys
final = [json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][-1]
e = json.load(open(sys.argv[2]))
assert (e["val_loss"], e["val_acc"], e["val_ppl"]) == (final["val_loss"], final["val_acc"], final["val_ppl"]), (e, final)
assert "confusion" not in e
print("gpt-tiny: eval on 2 ranks == training's final evaluation:", e["val_loss"], "perplexity", e["val_ppl"])
PY
pass "language model: eval's loss per token and perplexity equal the training run's (bitwise, 2 ranks)"
