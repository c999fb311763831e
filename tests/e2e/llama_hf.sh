#!/usr/bin/env bash
# ctest-timeout: 300
# Llama weights in the Hugging Face layout, in and out (tests/torch/hf_llama.py
# writes and reads the formats itself, without transformers or safetensors):
#  1. a random LlamaForCausalLM (GQA, llama3 rope scaling, untied head) in F32
#     as one model.safetensors and in BF16 as three shards with
#     model.safetensors.index.json → export --model.init DIR --format hf →
#     bitwise the same tensors (names, dtype, shapes, bytes; the BF16 one
#     sharded again below --max-shard-mb) and an equivalent config.json;
#  2. predict, eval and sample --model.init DIR give the reference's logits
#     (the standard Llama equations in float64) within 1e-5, its loss, and
#     its greedy tokens; training starts from DIR with the model of its
#     config.json;
#  3. bad input is one line, exit 2: token ids past the vocabulary, a
#     config.json whose shapes do not match the safetensors, an index naming
#     a missing shard, a NaN in BF16 weights, heads not a multiple of
#     kv_heads, an unsupported rope_scaling.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import torch, h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import torch, h5py and numpy"
hp="$BUILD/hpctrain"
tool="$ROOT/tests/torch/hf_llama.py"
export OMP_NUM_THREADS=1
"$BUILD/hpcdata" pack --from text "$ROOT/README.md" -o "$TMP/text.h5" > /dev/null || fail "pack"

# ---- 1. round trip
"$PYTHON" "$tool" write "$TMP/f32" F32 1 || fail "writing the F32 model"
"$PYTHON" "$tool" write "$TMP/bf16" BF16 3 || fail "writing the BF16 model"
timeout -k 10 120 "$hp" export --model.init "$TMP/f32" --format hf -o "$TMP/f32.out" > "$TMP/x1.log" 2>&1 ||
  { cat "$TMP/x1.log"; fail "export of the F32 model"; }
grep -q "LlamaForCausalLM layout, float32" "$TMP/x1.log" || { cat "$TMP/x1.log"; fail "export's line"; }
"$PYTHON" "$tool" same "$TMP/f32" "$TMP/f32.out" || fail "F32: the export differs from its source"
timeout -k 10 120 "$hp" export --model.init "$TMP/bf16" --format hf -o "$TMP/bf16.out" --max-shard-mb 0.05 \
  > "$TMP/x2.log" 2>&1 || { cat "$TMP/x2.log"; fail "export of the BF16 model"; }
[ -f "$TMP/bf16.out/model.safetensors.index.json" ] && ls "$TMP/bf16.out"/model-0000*-of-*.safetensors > /dev/null ||
  fail "the BF16 export is not sharded: $(ls "$TMP/bf16.out")"
"$PYTHON" "$tool" same "$TMP/bf16" "$TMP/bf16.out" || fail "BF16: the export differs from its source"
pass "F32 single file and BF16 shards: export --format hf gives back bitwise the same tensors and config.json"

# ---- 2. predict, eval, sample and training from the directory
for m in f32 bf16; do
  timeout -k 10 120 "$hp" predict --model.init "$TMP/$m" --data.path "$TMP/text.h5" --out "$TMP/$m.pred.h5" \
    --train.batch_size 4 > "$TMP/$m.p.log" 2>&1 || { cat "$TMP/$m.p.log"; fail "$m: predict --model.init"; }
  "$PYTHON" "$tool" logits "$TMP/$m" "$TMP/text.h5" "$TMP/$m.pred.h5" || fail "$m: predict's logits"
done
timeout -k 10 120 "$hp" eval --model.init "$TMP/bf16" --data.path "$TMP/text.h5" --out "$TMP/eval.json" \
  --train.batch_size 4 > "$TMP/e.log" 2>&1 || { cat "$TMP/e.log"; fail "eval --model.init"; }
"$PYTHON" "$tool" eval "$TMP/bf16" "$TMP/text.h5" "$TMP/eval.json" || fail "eval's loss"
"$hp" sample --model.init "$TMP/bf16" --prompt "The " --tokens 12 --temperature 0 --stop false \
  > "$TMP/s.out" 2> "$TMP/s.err" || { cat "$TMP/s.err"; fail "sample --model.init"; }
"$PYTHON" "$tool" greedy "$TMP/bf16" "The " "$TMP/s.out" || fail "sample's greedy tokens"
timeout -k 10 120 "$hp" --data.path "$TMP/text.h5" --model.init "$TMP/bf16" --train.steps 2 --train.batch_size 4 \
  --log.progress none --run.dir "$TMP/ft" > "$TMP/ft.log" 2>&1 || { cat "$TMP/ft.log"; fail "training from the directory"; }
grep -q "model.init: 21 tensors from $TMP/bf16 (Hugging Face Llama layout), BF16 widened to float32" "$TMP/ft.log" ||
  { cat "$TMP/ft.log"; fail "the start-up line of model.init"; }
pass "predict, eval and sample from the directory agree with the reference; training starts from it"

# ---- 3. bad input
bad() {  # bad NAME PYTHON: a copy of the BF16 model changed by the Python snippet (d: its directory)
  cp -r "$TMP/bf16" "$TMP/$1"
  "$PYTHON" - "$TMP/$1" <<< "import json, sys, pathlib; d = pathlib.Path(sys.argv[1]); $2" || fail "making $1"
}
"$PYTHON" - "$TMP/big.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    t = (np.arange(2000) % 256).astype(np.uint16)
    t[100] = 299
    for s in ("train", "val"):
        f.create_dataset(f"{s}/tokens", data=t).attrs["vocab_size"] = 320
PY
expect_exit 2 "token ids up to 319 but the model of model '$TMP/bf16' gives 48x300 logits" \
  "$hp" eval --model.init "$TMP/bf16" --data.path "$TMP/big.h5"
bad shape 'c = json.loads((d / "config.json").read_text()); c["intermediate_size"] = 96; (d / "config.json").write_text(json.dumps(c))'
expect_exit 2 "tensor 'model.layers.0.mlp.gate_proj.weight \(hpctrain's 1.llama_block.mlp.gate.weight\)' is 128x64 there but 96x64 in the model of its config.json" \
  "$hp" predict --model.init "$TMP/shape" --data.path "$TMP/text.h5" --out "$TMP/no.h5"
bad shard '(d / "model-00002-of-00003.safetensors").unlink()'
expect_exit 2 "model.safetensors.index.json' names the shard 'model-00002-of-00003.safetensors' \(for tensor '.*'\), which is missing" \
  "$hp" sample --model.init "$TMP/shard" --prompt x
bad nan 'p = d / "model-00001-of-00003.safetensors"; b = bytearray(p.read_bytes()); n = int.from_bytes(b[:8], "little"); b[8 + n + 6:8 + n + 8] = bytes([0xc0, 0x7f]); p.write_bytes(bytes(b))'
expect_exit 2 "tensor 'model.embed_tokens.weight' holds NaN at element 3 \(BF16\)" \
  "$hp" export --model.init "$TMP/nan" --format hf -o "$TMP/no"
bad kv 'c = json.loads((d / "config.json").read_text()); c["num_key_value_heads"] = 3; (d / "config.json").write_text(json.dumps(c))'
expect_exit 2 "num_attention_heads 4 is not a multiple of num_key_value_heads 3" \
  "$hp" sample --model.init "$TMP/kv" --prompt x
bad yarn 'c = json.loads((d / "config.json").read_text()); c["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}; (d / "config.json").write_text(json.dumps(c))'
expect_exit 2 'rope_scaling of type "yarn" is not supported \(hpctrain has the llama3 and linear scalings\)' \
  "$hp" sample --model.init "$TMP/yarn" --prompt x
[ ! -e "$TMP/no" ] && [ ! -e "$TMP/no.h5" ] || fail "a refused command left a file behind"
expect_exit 2 "options --checkpoint and --model.init: sample takes its model from one of them" \
  "$hp" sample --model.init "$TMP/bf16" --checkpoint "$TMP/text.h5" --prompt x
