#!/usr/bin/env bash
# ctest-timeout: 300
# A Llama trained on tokenised text, sampled and exported with its tokenizer:
#  1. a SentencePiece BPE model (byte fallback, 400 pieces) trained here by
#     Debian's python3-sentencepiece on this repository's documentation;
#     hpcdata packs the docs with it (the .model stored in the data file);
#     llama-tiny trains on the ids;
#  2. hpctrain sample from the checkpoint names that tokenizer, encodes the
#     prompt with it (the same ids as sentencepiece's), prints text that is
#     UTF-8 and starts with the prompt;
#  3. export --format hf writes the tokenizer file (the stored bytes) and
#     config.json's bos/eos ids from it; sample --model.init on the export
#     gives the checkpoint's greedy text.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import sentencepiece, h5py' >/dev/null 2>&1 || skip "$PYTHON cannot import sentencepiece and h5py"
hp="$BUILD/hpctrain"
export OMP_NUM_THREADS=1
cat "$ROOT/README.md" "$ROOT"/docs/*.md > "$TMP/docs.txt"
"$PYTHON" - "$TMP/docs.txt" "$TMP/m.model" <<'PY' || fail "training the SentencePiece model"
import io, sys, sentencepiece as spm
model = io.BytesIO()
lines = [l for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, model_type="bpe", vocab_size=400,
                               byte_fallback=True, character_coverage=0.9995, num_threads=2, minloglevel=2)
open(sys.argv[2], "wb").write(model.getvalue())
PY
"$BUILD/hpcdata" pack --from text "$TMP/docs.txt" --tokenizer "$TMP/m.model" -o "$TMP/docs.h5" > "$TMP/pack.log" ||
  { cat "$TMP/pack.log"; fail "pack --tokenizer"; }
run_mpi 1 "$hp" --data.path "$TMP/docs.h5" --model.preset llama-tiny --model.vocab 400 --optim.name adamw \
  --optim.lr 3e-3 --train.batch_size 8 --train.steps 100 --log.progress none --run.dir "$TMP/r" > "$TMP/r.log" 2>&1 ||
  { cat "$TMP/r.log"; fail "training on the tokenised docs"; }
ckpt="$TMP/r/ckpt-00000100.h5"
pass "llama-tiny trained on the docs packed with a SentencePiece BPE model: $(grep '^final:' "$TMP/r.log")"

# ---- 2. sample with the stored tokenizer
"$hp" sample --checkpoint "$ckpt" --prompt "The model" --tokens 30 --temperature 0 --stop false \
  > "$TMP/s.out" 2> "$TMP/s.err" || { cat "$TMP/s.err"; fail "sample"; }
grep -q "tokenizer: SentencePiece.* from the training data '$TMP/docs.h5'" "$TMP/s.err" ||
  { cat "$TMP/s.err"; fail "sample does not name the stored tokenizer"; }
"$PYTHON" - "$TMP/s.out" <<'PY' || fail "sample's text"
import sys
text = open(sys.argv[1], "rb").read().decode("utf-8")  # valid UTF-8, or this raises
assert text.startswith("The model") and len(text) > len("The model") + 10, repr(text)
print("sample:", repr(text[:80]))
PY
pass "sample decodes with the tokenizer stored in the training data"

# ---- 3. export with the tokenizer, sample from the export
timeout -k 10 120 "$hp" export --checkpoint "$ckpt" --format hf -o "$TMP/hf" > "$TMP/x.log" 2>&1 ||
  { cat "$TMP/x.log"; fail "export --format hf"; }
cmp -s "$TMP/hf/tokenizer.model" "$TMP/m.model" || fail "the exported tokenizer.model is not the one the data was packed with"
"$PYTHON" - "$TMP/hf/config.json" "$TMP/m.model" <<'PY' || fail "config.json's token ids"
import json, sys, sentencepiece as spm
c, sp = json.load(open(sys.argv[1])), spm.SentencePieceProcessor(model_file=sys.argv[2])
assert (c["bos_token_id"], c["eos_token_id"]) == (sp.bos_id(), sp.eos_id()), (c["bos_token_id"], c["eos_token_id"])
assert c["vocab_size"] == 400 and c["model_type"] == "llama", c
PY
"$hp" sample --model.init "$TMP/hf" --prompt "The model" --tokens 30 --temperature 0 --stop false \
  > "$TMP/s2.out" 2> "$TMP/s2.err" || { cat "$TMP/s2.err"; fail "sample --model.init"; }
cmp -s "$TMP/s.out" "$TMP/s2.out" || fail "sample from the export differs from sample from the checkpoint"
pass "export --format hf carries the tokenizer and its bos/eos; sampling the export gives the same text"
