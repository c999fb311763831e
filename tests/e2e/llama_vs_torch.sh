#!/usr/bin/env bash
# ctest-timeout: 300
# Cross-checks Llama models against a PyTorch reference written from the
# standard Llama equations with Hugging Face's parameter names.
#
# usage: bash tests/e2e/llama_vs_torch.sh BUILD_DIR   (from the repository root)
#
# BUILD_DIR/tests/test_llama's LlamaExport test runs four models (llama-tiny;
# llama-tiny at 160 positions, past its 64-token window; multi-query
# attention with a tied head and Llama 3's rope scaling; multi-head attention
# with linear scaling) in float32 and float64 on one batch and writes
# weights, batch, logits, losses and gradients as .npy;
# tests/torch/llama_reference.py compares them (tolerances and their reasons
# are in that file). Exits 77 (SKIPPED) when /usr/bin/python3 cannot import torch.
source "$(dirname "$0")/lib.bash"
bin="$BUILD/tests/test_llama"
"$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1 ||
  skip "$PYTHON cannot import torch and numpy (Debian: apt-get install python3-torch)"
[ -x "$bin" ] || fail "$bin is missing (make $bin)"

HPCTRAIN_LLAMA_EXPORT="$TMP" "$bin" --gtest_also_run_disabled_tests \
  --gtest_filter='LlamaExport.DISABLED_TorchExport' >"$TMP/export.log" 2>&1 ||
  { cat "$TMP/export.log" >&2; fail "the export test failed"; }
"$PYTHON" "$ROOT/tests/torch/llama_reference.py" "$TMP" || fail "hpctrain and PyTorch disagree"
pass "Llama logits, losses and gradients agree with PyTorch (GQA 1, 2 and all heads; rotary past the window; llama3 and linear scaling)"
