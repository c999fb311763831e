#!/usr/bin/env bash
# ctest-timeout: 400
# Tokenizers without the network: SentencePiece .model files trained here by
# Debian's python3-sentencepiece (unigram and BPE with byte fallback, and a
# lossy NFKC one without) on ~300 kB of varied text (tests/tokenizers/
# make_corpus.py: ASCII, accented Latin, CJK, emoji, code, every kind of
# whitespace, long pieces, bytes that are not UTF-8).
#  1. every document's ids equal sentencepiece's own, and decode back to the
#     document's bytes (test_tokenizer's Reference test);
#  2. `hpcdata pack --from text --tokenizer X.model` writes exactly those ids,
#     as <s> ids </s> per document, one per file or per line, on 1 and 2
#     threads, uint16, with the .model stored in /tokenizer; hpctrain trains
#     on it, and refuses a model.vocab smaller than the data's vocabulary;
#  3. bad input is one line, exit 2, and no file: text that is not UTF-8 for a
#     model without byte fallback, a .model that is not SentencePiece,
#     tokenizer.json files of another model type, malformed or missing keys,
#     and pack options that do not apply.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import sentencepiece, h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import sentencepiece, h5py and numpy"
cd "$TMP"
"$PYTHON" "$ROOT/tests/tokenizers/make_corpus.py" corpus --bytes 300000
"$PYTHON" "$ROOT/tests/tokenizers/spm_reference.py" corpus/docs.json ref
cp corpus/docs.json ref/

# ---- 1. ids and round trip --------------------------------------------------------------------
HPCTRAIN_TOKENIZER_REFERENCE=$TMP/ref "$BUILD/tests/test_tokenizer" --gtest_filter='Reference.*' > ref.log 2>&1 ||
  { cat ref.log; fail "ids differ from sentencepiece's"; }
grep -E "documents" ref.log
grep -q "0 differ" ref.log || fail "no comparison was made"
pass "SentencePiece: ids equal python3-sentencepiece's on every document, lossless models decode back"

# ---- 2. pack ----------------------------------------------------------------------------------
hd="$BUILD/hpcdata"
"$hd" pack --from text corpus/docs/*.txt --tokenizer ref/spm_unigram.model --val-fraction 0 --threads 2 -o file.h5 | tee pack.log
grep -q "uint16, SentencePiece unigram" pack.log || fail "the summary does not name the tokenizer"
"$PYTHON" "$ROOT/tests/tokenizers/check_packed.py" file.h5 ref/spm_unigram.ids uint16 || fail "pack --doc-sep file"
for threads in 1 2; do
  "$hd" pack --from text corpus/lines.txt --tokenizer ref/spm_bpe.model --doc-sep line --val-fraction 0 \
    --threads $threads -o lines$threads.h5 > /dev/null
done
"$PYTHON" "$ROOT/tests/tokenizers/check_packed.py" lines1.h5 ref/spm_bpe.ids uint16 corpus/lines.json || fail "pack --doc-sep line"
cmp <(h5dump -d /train/tokens lines1.h5 | tail -n +3) <(h5dump -d /train/tokens lines2.h5 | tail -n +3) ||
  fail "1 and 2 threads wrote different tokens"
pass "pack: documents as <s> ids </s>, per file and per line, 1 and 2 threads alike"
"$hd" pack --from text corpus/docs/*.txt --tokenizer ref/spm_unigram.model --val-fraction 0.1 --context 32 -o split.h5 > /dev/null
"$PYTHON" - <<'PY' || fail "the stored tokenizer"
import h5py
with h5py.File("split.h5") as f, open("ref/spm_unigram.model", "rb") as m:
    assert bytes(f["tokenizer"][...]) == m.read(), "/tokenizer is not the .model's bytes"
    a = f["tokenizer"].attrs
    assert a["format"] == b"sentencepiece" and a["file"] == b"spm_unigram.model", dict(a)
    assert f["val/tokens"].attrs["bos_id"] == 1 and f["val/tokens"].attrs["eos_id"] == 2
PY
"$hd" inspect split.h5 > inspect.log || { cat inspect.log; fail "inspect"; }
"$hd" repack split.h5 repacked.h5 > /dev/null
cmp <(h5dump -d /tokenizer split.h5 | tail -n +3) <(h5dump -d /tokenizer repacked.h5 | tail -n +3) ||
  fail "repack lost /tokenizer"
pass "the .model is stored in /tokenizer with its attributes; inspect and repack keep it"
timeout -k 10 200 "$BUILD/hpctrain" --data.path split.h5 --model.preset gpt-tiny --model.vocab 7124 --model.context 32 \
  --train.steps 2 --train.batch_size 4 --log.progress none --run.dir run > run.log 2>&1 || { cat run.log; fail "training"; }
pass "hpctrain trains gpt-tiny on the packed SentencePiece tokens"
expect_exit 2 "the data has 7124 token ids but model.vocab is 300" \
  "$BUILD/hpctrain" --data.path split.h5 --model.preset gpt-tiny --model.vocab 300 --model.context 32 --train.steps 1 --run.dir run2

# ---- 3. bad input -----------------------------------------------------------------------------
expect_exit 2 "docs/00007.txt: not UTF-8 at byte [0-9]+, and the tokenizer \(SentencePiece unigram .* has no byte fallback" \
  "$hd" pack --from text corpus/docs/00007.txt --tokenizer ref/spm_nfkc.model -o bad1.h5
expect_exit 2 "docs.json: not a SentencePiece model" "$hd" pack --from text corpus/lines.txt --tokenizer ref/docs.json -o bad2.h5
"$PYTHON" - <<'PY'
import json
base = {"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}
def write(name, obj): open(name, "w").write(obj if isinstance(obj, str) else json.dumps(obj))
write("wordpiece.json", {**base, "model": {"type": "WordPiece", "vocab": {"a": 0}}})
write("unigram.json", {**base, "model": {"type": "Unigram", "vocab": [["a", 0.0]]}})
write("nomerges.json", {**base, "model": {"type": "BPE", "vocab": {"a": 0}}})
write("broken.json", '{"model": {"type": "BPE", "vocab": {"a": 0},')
PY
expect_exit 2 "wordpiece.json: model.type is WordPiece: only byte-level BPE is supported" \
  "$hd" pack --from text corpus/lines.txt --tokenizer wordpiece.json -o bad3.h5
expect_exit 2 "unigram.json: model.type is Unigram" "$hd" pack --from text corpus/lines.txt --tokenizer unigram.json -o bad4.h5
expect_exit 2 "nomerges.json: model.merges is missing" "$hd" pack --from text corpus/lines.txt --tokenizer nomerges.json -o bad5.h5
expect_exit 2 "broken.json: not valid JSON \(parse error at line 1, column" \
  "$hd" pack --from text corpus/lines.txt --tokenizer broken.json -o bad6.h5
expect_exit 2 "missing.model: cannot open" "$hd" pack --from text corpus/lines.txt --tokenizer missing.model -o bad7.h5
expect_exit 2 "--doc-sep applies to pack --from text with --tokenizer only" "$hd" pack --from text corpus/lines.txt --doc-sep line -o bad8.h5
expect_exit 2 "--vocab applies to pack --from tokens-bin only" "$hd" pack --from text corpus/lines.txt --vocab 300 -o bad9.h5
expect_exit 2 "--tokenizer applies to pack --from text and tokens-bin only" \
  "$hd" pack --from csv corpus/lines.txt --tokenizer ref/spm_bpe.model -o bad10.h5
expect_exit 2 "--doc-sep expects file or line" "$hd" pack --from text corpus/lines.txt --tokenizer ref/spm_bpe.model --doc-sep para -o bad11.h5
ls bad*.h5* .hpcdata-tokens-* 2>/dev/null && fail "a refused pack left a file behind"
pass "bad tokenizers, text and options: one line, exit 2, nothing written"
