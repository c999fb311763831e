#!/usr/bin/env bash
# ctest-timeout: 600
# hpctrain export --format onnx (built with Debian's libonnx-dev): for mlp,
# cnn and resnet20 checkpoints the model passes onnx.checker (full check) and
# strict shape inference, is opset 17 with BatchNormalization in inference
# form and no Dropout, carries the input's normalisation in metadata_props,
# and a small numpy evaluator written here (float64) gives `hpctrain
# predict`'s logits within 1e-5 relative. A layer without operators is
# refused naming it (exit 2), before anything is written. Language models:
# export_onnx_lm.sh. SKIPPED when the
# build has no ONNX support (make's summary shows ✗ ONNX export).
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import onnx, h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import onnx, h5py and numpy"
data=$(mnist_h5)
"$PYTHON" - "$data" "$TMP/m.h5" <<'PY'
import sys, h5py
src, dst = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "w")
for split, n in (("train", 512), ("val", 128)):
    for k in ("x", "y"):
        d = dst.create_dataset(f"{split}/{k}", data=src[f"{split}/{k}"][:n])
        for a, v in src[f"{split}/{k}"].attrs.items():
            d.attrs[a] = v
PY
timeout -k 10 300 "$BUILD/hpctrain" --data.path "$TMP/m.h5" --model.preset mlp --train.steps 2 --train.batch_size 8 \
  --log.progress none --run.dir "$TMP/probe" > /dev/null 2>&1 || fail "training"
rc=0; "$BUILD/hpctrain" export --checkpoint "$TMP/probe/ckpt-00000002.h5" --format onnx -o "$TMP/probe.onnx" > "$TMP/p.log" 2>&1 || rc=$?
if [ $rc -ne 0 ] && grep -q "built without ONNX support" "$TMP/p.log"; then skip "this build has no ONNX support"; fi
[ $rc -eq 0 ] || { cat "$TMP/p.log"; fail "export --format onnx"; }

for preset in mlp cnn resnet20; do
  timeout -k 10 300 "$BUILD/hpctrain" --data.path "$TMP/m.h5" --model.preset $preset --train.steps 3 --train.batch_size 8 \
    --log.progress none --run.dir "$TMP/$preset" > "$TMP/$preset.log" 2>&1 || { cat "$TMP/$preset.log"; fail "$preset: training"; }
  ckpt=$TMP/$preset/ckpt-00000003.h5
  timeout -k 10 120 "$BUILD/hpctrain" predict --checkpoint "$ckpt" --data.path "$TMP/m.h5" --out "$TMP/$preset.pred.h5" \
    > /dev/null 2>&1 || fail "$preset: predict"
  timeout -k 10 60 "$BUILD/hpctrain" export --checkpoint "$ckpt" --format onnx -o "$TMP/$preset.out" > "$TMP/$preset.x.log" 2>&1 ||
    { cat "$TMP/$preset.x.log"; fail "$preset: export"; }
  "$PYTHON" - "$TMP/$preset.out/model.onnx" "$TMP/m.h5" "$TMP/$preset.pred.h5" <<'PY' || fail "$preset: ONNX model wrong"
import sys, h5py, numpy as np, onnx
from onnx import numpy_helper
path, data, pred = sys.argv[1:]
m = onnx.load(path)
onnx.checker.check_model(m, full_check=True)
onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
assert max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")) == 17
meta = {p.key: p.value for p in m.metadata_props}
assert meta.get("input_normalization", "").startswith("x = (byte * input_scale"), meta
assert float(meta["input_scale"]) > 0 and "input_mean" in meta and "input_std" in meta, meta
ops = [n.op_type for n in m.graph.node]
assert "Dropout" not in ops, ops
for n in m.graph.node:
    if n.op_type == "BatchNormalization":
        assert len(n.output) == 1 and not any(a.name == "training_mode" and a.i for a in n.attribute)

# ---- a numpy reference evaluator of the operators the export uses (float64) ----
W = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
def attrs(n):
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
def conv(x, w, b, strides, pads):
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::strides[0], ::strides[1]]
    y = np.einsum("nchwij,ocij->nohw", win, w)
    return y + (b[None, :, None, None] if b is not None else 0)
def pool(x, k, s, reduce):
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    return reduce(win, axis=(4, 5))
def run(x):
    env = {"x": x, **W}
    for n in m.graph.node:
        a, i = attrs(n), [env[name] if name else None for name in n.input]
        op = n.op_type
        if op == "Conv":
            y = conv(i[0], i[1], i[2] if len(i) > 2 else None, a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0]))
        elif op == "Gemm":
            y = i[0] @ (i[1].T if a.get("transB", 0) else i[1]) + (i[2] if len(i) > 2 else 0)
        elif op == "BatchNormalization":
            shape = (1, -1) + (1,) * (i[0].ndim - 2)
            g, b, mu, var = (v.reshape(shape) for v in i[1:5])
            y = (i[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * g + b
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "MaxPool":
            y = pool(i[0], a["kernel_shape"][0], a.get("strides", a["kernel_shape"])[0], np.max)
        elif op == "AveragePool":
            y = pool(i[0], a["kernel_shape"][0], a.get("strides", a["kernel_shape"])[0], np.mean)
        elif op == "GlobalAveragePool":
            y = i[0].mean(axis=(2, 3), keepdims=True)
        elif op == "Flatten":
            y = i[0].reshape(i[0].shape[0], -1)
        elif op == "Add":
            y = i[0] + i[1]
        else:
            raise SystemExit(f"the reference evaluator has no {op}")
        env[n.output[0]] = y
    return env[m.graph.output[0].name]

with h5py.File(data, "r") as f:
    d = f["val/x"]
    x = (d[...].astype(np.float64) * float(d.attrs["scale"]) - float(d.attrs["mean"])) / float(d.attrs["std"])
ours = run(x.astype(np.float32).astype(np.float64))
ref = h5py.File(pred, "r")["logits"][...]
err = float(np.abs(ours - ref).max() / np.abs(ref).max())
print(f"{len(ops)} nodes ({', '.join(sorted(set(ops)))}): numpy reference vs predict {err:.2e}")
assert ours.shape == ref.shape and err < 1e-5, (ours.shape, ref.shape, err)
PY
  pass "$preset: model.onnx passes onnx.checker and shape inference; a numpy evaluator gives predict's logits"
done

# A layer the image/tabular export has no operators for (a LayerNorm on features) is refused, naming it,
# before anything is written.
timeout -k 10 120 "$BUILD/hpctrain" --data.path "$TMP/m.h5" --model.spec "flatten linear(16) ln linear(10)" \
  --train.steps 1 --train.batch_size 8 --log.progress none --run.dir "$TMP/ln" > /dev/null 2>&1 || fail "flatten-ln model"
expect_exit 2 "layer 2 'ln' cannot be expressed in the ONNX export.*use --format torch" \
  "$BUILD/hpctrain" export --checkpoint "$TMP/ln/ckpt-00000001.h5" --format onnx -o "$TMP/ln.onnx"
[ ! -e "$TMP/ln.onnx" ] || fail "a refused export left a directory"
