#!/usr/bin/env bash
# ctest-timeout: 600
# hpctrain export --format torch: for mlp, cnn, resnet20 and gpt-tiny
# checkpoints, Debian's python3-torch imports the exported model.py, loads
# model.safetensors with load_state_dict (strict: every name and shape as it
# is), and its logits on the validation split equal `hpctrain predict`'s
# /logits within 1e-5 relative (to the largest logit). Bad input: exit 2.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import torch, h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import torch, h5py and numpy (Debian: python3-torch python3-h5py)"
data=$(mnist_h5)
"$BUILD/hpcdata" pack --from text "$ROOT/README.md" "$ROOT/docs/architecture.md" -o "$TMP/text.h5" > /dev/null
# A small validation split keeps predict quick: the first 256 MNIST validation samples.
"$PYTHON" - "$data" "$TMP/mnist256.h5" <<'PY'
import sys, h5py
src, dst = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "w")
for split, n in (("train", 512), ("val", 256)):
    for k in ("x", "y"):
        d = dst.create_dataset(f"{split}/{k}", data=src[f"{split}/{k}"][:n])
        for a, v in src[f"{split}/{k}"].attrs.items():
            d.attrs[a] = v
PY

for preset in mlp cnn resnet20 gpt-tiny; do
  file=$TMP/mnist256.h5
  [ "$preset" = gpt-tiny ] && file=$TMP/text.h5
  timeout -k 10 300 "$BUILD/hpctrain" --data.path "$file" --model.preset "$preset" --train.steps 3 \
    --train.batch_size 8 --log.progress none --run.dir "$TMP/$preset" > "$TMP/$preset.log" 2>&1 ||
    { cat "$TMP/$preset.log"; fail "$preset: training"; }
  ckpt=$TMP/$preset/ckpt-00000003.h5
  timeout -k 10 120 "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$file" --out "$TMP/$preset.pred.h5" \
    > "$TMP/$preset.pred.log" 2>&1 || { cat "$TMP/$preset.pred.log"; fail "$preset: predict"; }
  timeout -k 10 60 "$BUILD/hpctrain" export --checkpoint "$ckpt" --format torch -o "$TMP/$preset.out" \
    > "$TMP/$preset.export.log" 2>&1 || { cat "$TMP/$preset.export.log"; fail "$preset: export"; }
  "$PYTHON" - "$TMP/$preset.out" "$file" "$TMP/$preset.pred.h5" <<'PY' || fail "$preset: PyTorch's logits differ from predict's"
import sys, importlib.util, h5py, numpy as np, torch
out, data, pred = sys.argv[1:]
spec = importlib.util.spec_from_file_location("model", f"{out}/model.py")
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)
net = model.build_model()
net.load_state_dict(model.load_safetensors(f"{out}/model.safetensors"))  # strict
net.eval()
with h5py.File(data, "r") as f:
    if "val/tokens" in f:  # windows of T tokens, as hpctrain's TokenDataset cuts them
        t = model.INPUT_SHAPE[0]
        tok = f["val/tokens"][...].astype(np.int64)
        n = (len(tok) - 1) // t
        x = torch.tensor(tok[: n * t].reshape(n, t), dtype=torch.float32)
    else:  # uint8 normalised by the file's scale/mean/std, as the loader does
        d = f["val/x"]
        scale, mean, std = (float(d.attrs.get(k, v)) for k, v in (("scale", 1), ("mean", 0), ("std", 1)))
        x = torch.tensor((d[...].astype(np.float64) * scale - mean) / std, dtype=torch.float32)
with torch.no_grad():
    ours = net(x).numpy()
ref = h5py.File(pred, "r")["logits"][...]
assert ours.shape == ref.shape, (ours.shape, ref.shape)
err = float(np.abs(ours - ref).max() / np.abs(ref).max())
print(f"{model.SPEC[:60]}...: max |torch - predict| / max |logit| = {err:.2e} over {ref.size} logits")
assert err < 1e-5, err
PY
  pass "$preset: model.py + model.safetensors in PyTorch give predict's logits"
done

expect_exit 2 "option --format: .*torch" "$BUILD/hpctrain" export --checkpoint "$TMP/mlp/ckpt-00000003.h5" --format keras -o "$TMP/k"
expect_exit 2 "option -o/--out: required for export" "$BUILD/hpctrain" export --checkpoint "$TMP/mlp/ckpt-00000003.h5"
expect_exit 2 "option --checkpoint" "$BUILD/hpctrain" export --checkpoint "$TMP/none.h5" -o "$TMP/k"
