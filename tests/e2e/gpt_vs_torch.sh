#!/usr/bin/env bash
# ctest-timeout: 300
# Cross-checks the gpt-tiny model against PyTorch on the same weights and batch.
#
# usage: bash tests/e2e/gpt_vs_torch.sh BUILD_DIR   (from the repository root)
#
# BUILD_DIR/tests/test_gpt's GptExport test runs gpt-tiny (float32, and
# float64 from the same float32 weights) on one batch and writes weights,
# batch, losses and gradients as .npy; tests/torch/gpt_reference.py builds
# the model from torch.nn.functional ops and compares loss and every
# parameter's gradient (tolerances and their reasons are in that file).
# Then gpt-tiny is trained 5 steps on packed text by hpctrain itself, and
# PyTorch recomputes its validation loss from the checkpoint's weights.
# Exits 77 (SKIPPED) when /usr/bin/python3 cannot import torch.
source "$(dirname "$0")/lib.bash"
bin="$BUILD/tests/test_gpt"
"$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1 ||
  skip "$PYTHON cannot import torch and numpy (Debian: apt-get install python3-torch)"
[ -x "$bin" ] || fail "$bin is missing (make $bin)"

HPCTRAIN_GPT_EXPORT="$TMP" "$bin" --gtest_also_run_disabled_tests \
  --gtest_filter='GptExport.DISABLED_TorchExport' >"$TMP/export.log" 2>&1 ||
  { cat "$TMP/export.log" >&2; fail "the export test failed"; }
"$PYTHON" "$ROOT/tests/torch/gpt_reference.py" "$TMP" || fail "hpctrain and PyTorch disagree"
pass "gpt-tiny loss and gradients agree with PyTorch"

# The same model through the real pipeline: hpcdata packs text, hpctrain
# trains gpt-tiny a few steps (with recompute) and evaluates; PyTorch
# recomputes that validation loss from the checkpoint's /params tensors.
"$BUILD/hpcdata" pack --from text "$ROOT/README.md" "$ROOT/docs/architecture.md" -o "$TMP/text.h5" \
  >/dev/null || fail "hpcdata pack --from text failed"
timeout 300 "$BUILD/hpctrain" --data.path "$TMP/text.h5" --model.preset gpt-tiny --model.recompute true \
  --train.steps 5 --train.batch_size 8 --optim.name adamw --optim.lr 3e-3 --log.progress none \
  --run.dir "$TMP/run" >"$TMP/train.log" 2>&1 || { cat "$TMP/train.log" >&2; fail "hpctrain gpt-tiny failed"; }
grep -q "recompute saves" "$TMP/train.log" || fail "no 'activations: … (recompute saves …)' line at start-up"
val_loss=$("$PYTHON" -c 'import json, sys
print([json.loads(l) for l in open(sys.argv[1]) if "val_loss" in l][-1]["val_loss"])' "$TMP/run/metrics.jsonl")
ckpt=$(ls "$TMP"/run/ckpt-*.h5 | tail -1)
"$PYTHON" "$ROOT/tests/torch/gpt_reference.py" --checkpoint "$ckpt" "$TMP/text.h5" "$val_loss" ||
  fail "PyTorch does not reproduce hpctrain's validation loss from the checkpoint"
pass "a trained gpt-tiny checkpoint gives PyTorch hpctrain's validation loss"
