#!/usr/bin/env bash
# ctest-timeout: 120
# src/train/model.py, the model.py that `hpctrain export --format torch`
# writes, imported as Python from the source tree (no checkpoint, no
# training): its spec parser and every layer kind it builds, with hpctrain's
# state_dict names and shapes and the output shape of a forward pass;
# build_model() of the unfilled template is a clear error; the raw-string
# delimiter the build wraps it in does not occur in it; and the copy inside
# the binary is that file with SPEC and INPUT_SHAPE filled in
# (export_torch.sh holds an exported model to hpctrain's own logits).
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import torch and numpy (Debian: python3-torch)"
src=$ROOT/src/train/model.py
! grep -q 'HPCTRAIN_PY' "$src" || fail "model.py holds the build's raw-string delimiter HPCTRAIN_PY"

"$PYTHON" - "$src" <<'PY' || fail "src/train/model.py does not build hpctrain's layers"
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("model", sys.argv[1])
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)

assert model.SPEC is None and model.INPUT_SHAPE is None, (model.SPEC, model.INPUT_SHAPE)
try:
    model.build_model()
    raise AssertionError("build_model() of the template did not refuse")
except RuntimeError as e:
    assert "SPEC is not set" in str(e), e

assert model.parse("conv(8,3,pad=1) relu res(conv(8,3,pad=1) bn) dropout(0.25)") == [
    ("conv", [8.0, 3.0], {"pad": 1.0}, []), ("relu", [], {}, []),
    ("res", [], {}, [("conv", [8.0, 3.0], {"pad": 1.0}, []), ("bn", [], {}, [])]),
    ("dropout", [0.25], {}, [])], model.parse("conv(8,3,pad=1) relu res(conv(8,3,pad=1) bn) dropout(0.25)")

def check(spec, shape, out, names):
    net = model.Net(spec, shape)
    got = {k: tuple(v.shape) for k, v in net.state_dict().items()}
    assert got == names, (spec, got)
    net.eval()
    x = torch.rand((2,) + shape) * (50 if spec.startswith("embed") else 1)
    with torch.no_grad():
        y = net(x.floor() if spec.startswith("embed") else x)
    assert tuple(y.shape) == (2,) + out and net.output_shape == out, (spec, y.shape, net.output_shape)
    print(f"{spec[:70]}: {len(names)} tensors, output {out}")

# Every image layer kind, a residual block with a strided shortcut (conv + bn) and one without.
check("conv(8,3,pad=1,bias=0) bn relu maxpool(2) res(conv(16,3,stride=2,pad=1) bn tanh) "
      "res(conv(16,3,pad=1) gelu) avgpool(2) conv(4,1) gap dropout(0.5) linear(10)", (3, 16, 16), (10,), {
          "0.conv.weight": (8, 3, 3, 3), "1.bn.gamma": (8,), "1.bn.beta": (8,), "1.bn.running_mean": (8,),
          "1.bn.running_var": (8,), "4.res.body.0.weight": (16, 8, 3, 3), "4.res.body.0.bias": (16,),
          "4.res.body.1.gamma": (16,), "4.res.body.1.beta": (16,), "4.res.body.1.running_mean": (16,),
          "4.res.body.1.running_var": (16,), "4.res.shortcut.0.weight": (16, 8, 1, 1),
          "4.res.shortcut.1.gamma": (16,), "4.res.shortcut.1.beta": (16,),
          "4.res.shortcut.1.running_mean": (16,), "4.res.shortcut.1.running_var": (16,),
          "5.res.body.0.weight": (16, 16, 3, 3), "5.res.body.0.bias": (16,), "7.conv.weight": (4, 16, 1, 1),
          "7.conv.bias": (4,), "10.linear.weight": (10, 4), "10.linear.bias": (10,)})
# Flatten, a fully connected residual block whose width changes (linear shortcut + bn), no bias.
check("flatten linear(32) res(linear(16,bias=0) relu) linear(3)", (1, 4, 4), (3,), {
    "1.linear.weight": (32, 16), "1.linear.bias": (32,), "2.res.body.0.weight": (16, 32),
    "2.res.shortcut.0.weight": (16, 32), "2.res.shortcut.1.gamma": (16,), "2.res.shortcut.1.beta": (16,),
    "2.res.shortcut.1.running_mean": (16,), "2.res.shortcut.1.running_var": (16,),
    "3.linear.weight": (3, 16), "3.linear.bias": (3,)})
# The GPT layers: embedding, a block, a bare attention layer, LayerNorm, the tied head (no tensor).
check("embed(64,16,8) block(2) attn(4) ln lm_head(64)", (8,), (8, 64), {
    "0.embed.token": (64, 16), "0.embed.position": (8, 16), "1.block.ln1.gamma": (16,),
    "1.block.ln1.beta": (16,), "1.block.attn.qkv.weight": (48, 16), "1.block.attn.qkv.bias": (48,),
    "1.block.attn.proj.weight": (16, 16), "1.block.attn.proj.bias": (16,), "1.block.ln2.gamma": (16,),
    "1.block.ln2.beta": (16,), "1.block.mlp.fc.weight": (64, 16), "1.block.mlp.fc.bias": (64,),
    "1.block.mlp.proj.weight": (16, 64), "1.block.mlp.proj.bias": (16,), "2.attn.qkv.weight": (48, 16),
    "2.attn.qkv.bias": (48,), "2.attn.proj.weight": (16, 16), "2.attn.proj.bias": (16,),
    "3.ln.gamma": (16,), "3.ln.beta": (16,)})
try:
    model.Net("linear(4) softmax", (3,))
    raise AssertionError("an unknown layer was accepted")
except ValueError as e:
    assert "unknown layer 'softmax'" in str(e), e
PY
pass "src/train/model.py: the parser, every layer kind with hpctrain's names and shapes, the template's refusal"

# The binary's copy: the file itself, only SPEC and INPUT_SHAPE set.
data=$(mnist_h5)
timeout -k 10 120 "$BUILD/hpctrain" --data.path "$data" --model.preset mlp --train.steps 1 --train.batch_size 8 \
  --log.progress none --run.dir "$TMP/run" > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; fail "1-step run"; }
"$BUILD/hpctrain" export --checkpoint "$TMP/run/ckpt-00000001.h5" --format torch -o "$TMP/out" > /dev/null ||
  fail "export"
diff <(grep -v '^SPEC = \|^INPUT_SHAPE = ' "$src") <(grep -v '^SPEC = \|^INPUT_SHAPE = ' "$TMP/out/model.py") ||
  fail "the exported model.py differs from src/train/model.py beyond SPEC and INPUT_SHAPE"
grep -q '^SPEC = "flatten linear(512) relu linear(512) relu linear(10)"$' "$TMP/out/model.py" &&
  grep -q '^INPUT_SHAPE = (1, 28, 28, )$' "$TMP/out/model.py" ||
  { grep '^SPEC\|^INPUT_SHAPE' "$TMP/out/model.py"; fail "SPEC / INPUT_SHAPE not filled in"; }
pass "the exported model.py is src/train/model.py with SPEC and INPUT_SHAPE filled in"
