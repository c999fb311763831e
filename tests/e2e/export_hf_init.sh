#!/usr/bin/env bash
# ctest-timeout: 600
# export --format hf and --model.init:
#  1. a gpt-tiny checkpoint exported in the Hugging Face GPT-2 layout
#     (config.json + model.safetensors, GPT-2's names and Conv1D orientation):
#     a PyTorch GPT-2 written here from those names alone gives predict's logits;
#  2. --model.init DIR (that directory) reproduces the logits before training;
#  3. fine-tuning a 10-class mlp on 12 classes: the old head is refused with
#     both shapes named (exit 2); with --model.init_skip the head is fresh,
#     the rest loaded, and training lowers the loss;
#  4. --model.init from `export --format torch`'s safetensors; bad input exit 2.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import torch, h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import torch, h5py and numpy"
data=$(mnist_h5)
"$BUILD/hpcdata" pack --from text "$ROOT/README.md" "$ROOT/docs/architecture.md" -o "$TMP/text.h5" > /dev/null
gpt=(--data.path "$TMP/text.h5" --model.preset gpt-tiny --train.batch_size 8 --log.progress none)
timeout -k 10 300 "$BUILD/hpctrain" "${gpt[@]}" --train.steps 3 --run.dir "$TMP/g" > "$TMP/g.log" 2>&1 ||
  { cat "$TMP/g.log"; fail "gpt-tiny training"; }
timeout -k 10 120 "$BUILD/hpctrain" predict --checkpoint "$TMP/g/ckpt-00000003.h5" --data.path "$TMP/text.h5" \
  --out "$TMP/g.pred.h5" > /dev/null 2>&1 || fail "predict"
timeout -k 10 60 "$BUILD/hpctrain" export --checkpoint "$TMP/g/ckpt-00000003.h5" --format hf -o "$TMP/hf" \
  > "$TMP/hf.log" 2>&1 || { cat "$TMP/hf.log"; fail "export --format hf"; }

"$PYTHON" - "$TMP/hf" "$TMP/text.h5" "$TMP/g.pred.h5" <<'PY' || fail "the GPT-2 reference disagrees with predict"
# A GPT-2 forward pass from the Hugging Face names alone (GPT2LMHeadModel's conventions: Conv1D
# weights [in, out], pre-LN blocks, gelu_new, lm_head tied to wte).
import json, math, struct, sys, h5py, numpy as np, torch, torch.nn.functional as F
d, data, pred = sys.argv[1:]
cfg = json.load(open(f"{d}/config.json"))
assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"] and cfg["activation_function"] == "gelu_new"
raw = open(f"{d}/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
w = {k: torch.from_numpy(np.frombuffer(raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][1]], np.float32)
                         .reshape(v["shape"]).copy()) for k, v in head.items() if k != "__metadata__"}
L, H, C, T = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_positions"]
assert w["transformer.h.0.attn.c_attn.weight"].shape == (C, 3 * C), "not GPT-2's Conv1D orientation"
assert "lm_head.weight" not in w and len(w) == 2 + 12 * L + 2, sorted(w)
conv1d = lambda x, p: x @ w[p + ".weight"] + w[p + ".bias"]
ln = lambda x, p: F.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], cfg["layer_norm_epsilon"])
with h5py.File(data, "r") as f:
    tok = f["val/tokens"][...].astype(np.int64)
m = (len(tok) - 1) // T
ids = torch.tensor(tok[: m * T].reshape(m, T))
with torch.no_grad():
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        p = f"transformer.h.{i}"
        q, k, v = conv1d(ln(x, p + ".ln_1"), p + ".attn.c_attn").split(C, dim=2)
        q, k, v = (z.view(m, T, H, C // H).transpose(1, 2) for z in (q, k, v))
        a = ((q @ k.transpose(-2, -1)) / math.sqrt(C // H)).masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + conv1d((a @ v).transpose(1, 2).reshape(m, T, C), p + ".attn.c_proj")
        h = F.gelu(conv1d(ln(x, p + ".ln_2"), p + ".mlp.c_fc"), approximate="tanh")
        x = x + conv1d(h, p + ".mlp.c_proj")
    logits = (ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].t()).numpy()
ref = h5py.File(pred, "r")["logits"][...]
err = float(np.abs(logits - ref).max() / np.abs(ref).max())
print(f"GPT-2 reference from the HF names vs predict: {err:.2e} (max relative to the largest logit)")
assert err < 1e-5, err
PY
pass "export --format hf: a GPT-2 reference from the Hugging Face names gives predict's logits"

# 2. --model.init from the HF directory: an SGD step of 1e-30 changes no logit visibly.
timeout -k 10 300 "$BUILD/hpctrain" "${gpt[@]}" --train.steps 1 --optim.name sgd --optim.momentum 0 --optim.lr 1e-30 \
  --model.init "$TMP/hf" --run.dir "$TMP/gi" > "$TMP/gi.log" 2>&1 || { cat "$TMP/gi.log"; fail "training from the hf directory"; }
grep -q "^model.init: .* tensors from $TMP/hf (Hugging Face GPT-2 layout)" "$TMP/gi.log" || { cat "$TMP/gi.log"; fail "no model.init line"; }
timeout -k 10 120 "$BUILD/hpctrain" predict --checkpoint "$TMP/gi/ckpt-00000001.h5" --data.path "$TMP/text.h5" \
  --out "$TMP/gi.pred.h5" > /dev/null 2>&1 || fail "predict after init"
"$PYTHON" - "$TMP/g.pred.h5" "$TMP/gi.pred.h5" <<'PY' || fail "model.init from hf does not reproduce the logits"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["logits"][...] for p in sys.argv[1:])
err = float(np.abs(a - b).max() / np.abs(a).max())
print(f"logits after --model.init hf vs the exported checkpoint: {err:.2e}")
assert err < 1e-6, err
PY
pass "--model.init from the Hugging Face directory reproduces the logits"

# 3. A new head: 10 classes → 12.
"$PYTHON" - "$data" "$TMP/m10.h5" "$TMP/m12.h5" <<'PY'
import sys, h5py, numpy as np
src = h5py.File(sys.argv[1], "r")
for path, classes in ((sys.argv[2], 10), (sys.argv[3], 12)):
    with h5py.File(path, "w") as f:
        for split, n in (("train", 2048), ("val", 512)):
            x = f.create_dataset(f"{split}/x", data=src[f"{split}/x"][:n])
            for a, v in src[f"{split}/x"].attrs.items():
                x.attrs[a] = v
            y = src[f"{split}/y"][:n].astype(np.int32)
            if classes == 12:
                y = np.where(np.arange(n) % 7 == 0, 10 + y % 2, y).astype(np.int32)  # two new classes
            f[f"{split}/y"] = y
PY
mlp=(--model.preset mlp --train.batch_size 64 --log.progress plain --log.every 8)
timeout -k 10 300 "$BUILD/hpctrain" --data.path "$TMP/m10.h5" "${mlp[@]}" --train.steps 32 --run.dir "$TMP/m10" \
  > "$TMP/m10.log" 2>&1 || { cat "$TMP/m10.log"; fail "mlp on 10 classes"; }
expect_exit 2 "tensor '5.linear.weight' is 10x512 there but 12x512 in this model .*--model.init_skip 5.linear" \
  "$BUILD/hpctrain" --data.path "$TMP/m12.h5" "${mlp[@]}" --train.steps 1 --model.init "$TMP/m10/ckpt-00000032.h5" --run.dir "$TMP/x"
timeout -k 10 300 "$BUILD/hpctrain" --data.path "$TMP/m12.h5" "${mlp[@]}" --train.steps 32 --run.dir "$TMP/m12" \
  --model.init "$TMP/m10/ckpt-00000032.h5" --model.init_skip 5.linear > "$TMP/m12.log" 2>&1 || { cat "$TMP/m12.log"; fail "fine-tuning"; }
grep -q "^model.init: 4 tensors from .*, 2 freshly initialised" "$TMP/m12.log" || { grep model.init "$TMP/m12.log"; fail "init line"; }
"$PYTHON" - "$TMP/m12/metrics.jsonl" "$TMP/m10/ckpt-00000032.h5" "$TMP/m12/ckpt-00000032.h5" <<'PY' || fail "fine-tuning did not train"
import json, sys
losses = [r["loss"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
final = [r for r in map(json.loads, open(sys.argv[1])) if "val_acc" in r][-1]
print("fine-tuning losses:", ["%.3f" % l for l in losses], "val_acc", final["val_acc"])
assert losses[-1] < 0.9 * losses[0], losses
assert final["val_acc"] > 0.5, final
PY
pass "a replaced head: refused without init_skip (shapes named), trains with it"

# 4. From export --format torch's safetensors (hpctrain's names).
timeout -k 10 60 "$BUILD/hpctrain" export --checkpoint "$TMP/m10/ckpt-00000032.h5" -o "$TMP/t" > /dev/null || fail "export torch"
timeout -k 10 120 "$BUILD/hpctrain" --data.path "$TMP/m10.h5" "${mlp[@]}" --train.steps 1 --model.init "$TMP/t/model.safetensors" \
  --run.dir "$TMP/ti" > "$TMP/ti.log" 2>&1 || { cat "$TMP/ti.log"; fail "init from safetensors"; }
grep -q "^model.init: 6 tensors from $TMP/t/model.safetensors$" "$TMP/ti.log" || { grep model.init "$TMP/ti.log"; fail "init line"; }
pass "--model.init from an exported model.safetensors"
expect_exit 2 "option --model.init_skip: 'nothing' names no tensor" \
  "$BUILD/hpctrain" --data.path "$TMP/m10.h5" "${mlp[@]}" --train.steps 1 --model.init "$TMP/t" --model.init_skip nothing --run.dir "$TMP/x"
expect_exit 2 "option --model.init: '$TMP/none'" \
  "$BUILD/hpctrain" --data.path "$TMP/m10.h5" "${mlp[@]}" --train.steps 1 --model.init "$TMP/none" --run.dir "$TMP/x"
expect_exit 2 "layer 1 'linear' has no Hugging Face GPT-2 counterpart|layer 0 'flatten' has no Hugging Face" \
  "$BUILD/hpctrain" export --checkpoint "$TMP/m10/ckpt-00000032.h5" --format hf -o "$TMP/h2"
[ ! -e "$TMP/h2" ] || fail "a refused hf export left a directory"
