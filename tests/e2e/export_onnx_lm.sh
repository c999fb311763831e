#!/usr/bin/env bash
# ctest-timeout: 300
# hpctrain export --format onnx of language models: gpt-tiny and a Llama
# (grouped kv heads, rotary with llama3 scaling, untied head) trained two
# steps on text; each model.onnx passes onnx.checker (full check) and strict
# shape inference, is opset 17 with input_ids [batch, seq] int64 and logits
# [batch, seq, vocab], carries the producer's version and metadata_props, and
# a numpy evaluator of its operators written here (float64) gives predict's
# logits within 1e-5 relative — for whole windows and for a shorter
# sequence (the rotary tables and the causal mask sliced to seq). SKIPPED
# when the build has no ONNX support.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import onnx, h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import onnx, h5py and numpy"
hp="$BUILD/hpctrain"
export OMP_NUM_THREADS=1
"$BUILD/hpcdata" pack --from text "$ROOT/README.md" -o "$TMP/text.h5" > /dev/null || fail "pack"
llama="embed(256,32,24,positions=0) llama_block(4,kv_heads=2,ffn=64,theta=10000,llama3=4,orig=8,layers=2)"
llama="$llama llama_block(4,kv_heads=2,ffn=64,theta=10000,llama3=4,orig=8,layers=2) rmsnorm lm_head(256,tied=0)"
for m in gpt llama; do
  if [ $m = gpt ]; then model=(--model.preset gpt-tiny --model.context 24); else model=(--model.spec "$llama"); fi
  timeout -k 10 120 "$hp" --data.path "$TMP/text.h5" "${model[@]}" --train.steps 2 --train.batch_size 4 \
    --log.progress none --run.dir "$TMP/$m" > "$TMP/$m.log" 2>&1 || { cat "$TMP/$m.log"; fail "$m: training"; }
  ckpt=$TMP/$m/ckpt-00000002.h5
  timeout -k 10 120 "$hp" predict --checkpoint "$ckpt" --data.path "$TMP/text.h5" --out "$TMP/$m.pred.h5" > /dev/null 2>&1 ||
    fail "$m: predict"
  rc=0; timeout -k 10 60 "$hp" export --checkpoint "$ckpt" --format onnx -o "$TMP/$m.out" > "$TMP/$m.x.log" 2>&1 || rc=$?
  if [ $rc -ne 0 ] && grep -q "built without ONNX support" "$TMP/$m.x.log"; then skip "this build has no ONNX support"; fi
  [ $rc -eq 0 ] || { cat "$TMP/$m.x.log"; fail "$m: export"; }
  "$PYTHON" - "$TMP/$m.out/model.onnx" "$TMP/text.h5" "$TMP/$m.pred.h5" <<'PY' || fail "$m: ONNX model wrong"
import sys, h5py, numpy as np, onnx
from onnx import numpy_helper
path, data, pred = sys.argv[1:]
m = onnx.load(path)
onnx.checker.check_model(m, full_check=True)
onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [17]
assert m.producer_name == "hpctrain" and m.producer_version.split()[0].count(".") == 2, m.producer_version
meta = {p.key: p.value for p in m.metadata_props}
assert "hpctrain_spec" in meta and meta["input"].startswith("input_ids"), meta
inp, out = m.graph.input[0], m.graph.output[0]
assert inp.name == "input_ids" and inp.type.tensor_type.elem_type == onnx.TensorProto.INT64
assert [d.dim_param for d in inp.type.tensor_type.shape.dim] == ["batch", "seq"]
assert out.name == "logits" and out.type.tensor_type.shape.dim[2].dim_value == 256

# ---- a numpy evaluator of the operators the export uses (float64) ----
W = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
W = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in W.items()}
def attrs(n):
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
def run(ids):
    env = {"input_ids": ids, **W}
    for n in m.graph.node:
        a, i = attrs(n), [env[x] for x in n.input]
        op = n.op_type
        if op == "Gather":
            y = np.take(i[0], i[1], axis=a.get("axis", 0))
        elif op == "Shape":
            y = np.array(i[0].shape, dtype=np.int64)
        elif op == "Slice":
            sl = [slice(None)] * i[0].ndim
            for s, e, ax in zip(i[1], i[2], i[3]):
                sl[ax] = slice(int(s), int(e))
            y = i[0][tuple(sl)]
        elif op in ("Add", "Mul", "Div"):
            y = {"Add": np.add, "Mul": np.multiply, "Div": np.divide}[op](i[0], i[1])
        elif op in ("Sqrt", "Neg", "Tanh"):
            y = {"Sqrt": np.sqrt, "Neg": np.negative, "Tanh": np.tanh}[op](i[0])
        elif op == "Sigmoid":
            y = 1 / (1 + np.exp(-i[0]))
        elif op == "ReduceMean":
            y = i[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
        elif op == "LayerNormalization":
            mu = i[0].mean(-1, keepdims=True)
            var = ((i[0] - mu) ** 2).mean(-1, keepdims=True)
            y = (i[0] - mu) / np.sqrt(var + a.get("epsilon", 1e-5)) * i[1] + i[2]
        elif op == "Transpose":
            y = np.transpose(i[0], a["perm"])
        elif op == "MatMul":
            y = i[0] @ i[1]
        elif op == "Reshape":
            shape = [i[0].shape[k] if s == 0 else int(s) for k, s in enumerate(i[1])]
            y = i[0].reshape(shape)
        elif op == "Split":
            ys = np.split(i[0], np.cumsum(i[1])[:-1], axis=a.get("axis", 0))
            for name, v in zip(n.output, ys):
                env[name] = v
            continue
        elif op == "Concat":
            y = np.concatenate(i, axis=a["axis"])
        elif op == "Unsqueeze":
            y = np.expand_dims(i[0], tuple(int(x) for x in i[1]))
        elif op == "Where":
            y = np.where(i[0], i[1], i[2])
        elif op == "Softmax":
            e = np.exp(i[0] - i[0].max(axis=a.get("axis", -1), keepdims=True))
            y = e / e.sum(axis=a.get("axis", -1), keepdims=True)
        else:
            raise SystemExit(f"the reference evaluator has no {op}")
        env[n.output[0]] = y
    return env["logits"]

ref = h5py.File(pred, "r")["logits"][...]
t = ref.shape[1]
with h5py.File(data, "r") as f:
    tok = f["val/tokens"][...].astype(np.int64)
ids = tok[: ref.shape[0] * t].reshape(ref.shape[0], t)
ours = run(ids)
err = float(np.abs(ours - ref).max() / np.abs(ref).max())
short = run(ids[:, : t // 2])  # causal: a shorter sequence gives the first rows of the full one
err_short = float(np.abs(short - ref[:, : t // 2]).max() / np.abs(ref).max())
ops = sorted({n.op_type for n in m.graph.node})
print(f"{len(m.graph.node)} nodes ({', '.join(ops)}): numpy evaluator vs predict {err:.2e}, half windows {err_short:.2e}")
assert ours.shape == ref.shape and err < 1e-5 and err_short < 1e-5, (ours.shape, ref.shape, err, err_short)
PY
  pass "$m: model.onnx passes onnx.checker and shape inference; a numpy evaluator gives predict's logits"
done
