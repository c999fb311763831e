#!/usr/bin/env bash
# ctest-timeout: 600
# Byte-level BPE (tokenizer.json) against OpenAI's tiktoken, the WebAssembly
# build of its Rust core (npm `tiktoken`), on ~1 MB of varied text
# (tests/tokenizers/make_corpus.py), with four real vocabularies: GPT-2's,
# cl100k_base and o200k_base (tiktoken's own rank files) and Llama 3's (as
# `llama3-tokenizer-js` bundles its vocabulary and merges; tiktoken with those
# ranks is Meta's own Llama 3 tokenizer). The tokenizer.json files hpctrain
# reads are built from those files (tests/tokenizers/tiktoken_reference.cjs).
#  1. every document's ids equal tiktoken's and decode back to its bytes;
#  2. `hpcdata pack` writes exactly those ids (GPT-2: uint16, ids <|endoftext|>;
#     Llama 3: uint32, <|begin_of_text|> ids <|end_of_text|>), per file and per
#     line; hpctrain trains on the uint32 file and refuses a smaller model.vocab.
# The npm packages (pinned versions) and the reference ids are made once per
# build directory (tests/tokenizers/fetch_reference.sh, like the MNIST sample)
# and reused while the scripts that make them are unchanged; without npm or
# node, or without the registry, the test is skipped.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import h5py and numpy"
ref=$("$ROOT/tests/tokenizers/fetch_reference.sh" "$BUILD") ||
  skip "the npm packages tiktoken and llama3-tokenizer-js could not be installed"
corpus="$BUILD/testdata/tokenizers/corpus"
cd "$TMP"

# ---- 1. ids and round trip --------------------------------------------------------------------
HPCTRAIN_TOKENIZER_REFERENCE=$ref "$BUILD/tests/test_tokenizer" --gtest_filter='Reference.*' > ref.log 2>&1 ||
  { cat ref.log; fail "ids differ from tiktoken's"; }
grep -E "documents" ref.log
[ "$(grep -c "0 differ from the reference, every one decodes back" ref.log)" -eq 4 ] || fail "not all four vocabularies were compared"
pass "byte-level BPE: ids equal tiktoken's for GPT-2, cl100k, o200k and Llama 3; every document decodes back"

# ---- 2. pack ----------------------------------------------------------------------------------
hd="$BUILD/hpcdata"
"$hd" pack --from text "$corpus"/docs/*.txt --tokenizer "$ref/gpt2.json" --val-fraction 0 -o gpt2.h5 | tee gpt2.log
grep -q "ending with <|endoftext|> (50256)" gpt2.log || fail "GPT-2 documents are not ended by <|endoftext|>"
"$PYTHON" "$ROOT/tests/tokenizers/check_packed.py" gpt2.h5 "$ref/gpt2.ids" uint16 || fail "GPT-2 pack"
"$hd" pack --from text "$corpus/lines.txt" --tokenizer "$ref/llama3.json" --doc-sep line --val-fraction 0 --threads 2 -o llama3.h5 | tee llama3.log
grep -q "starting with <|begin_of_text|> (128000), ending with <|end_of_text|> (128001)" llama3.log || fail "Llama 3 separators"
"$PYTHON" "$ROOT/tests/tokenizers/check_packed.py" llama3.h5 "$ref/llama3.ids" uint32 "$corpus/lines.json" || fail "Llama 3 pack"
pass "pack: GPT-2 as uint16 ids <|endoftext|>, Llama 3 as uint32 <|begin_of_text|> ids <|end_of_text|>"

"$hd" pack --from text "$corpus/lines.txt" --tokenizer "$ref/llama3.json" --doc-sep line --context 16 -o llama3s.h5 > /dev/null
"$hd" inspect llama3s.h5 | grep -E "OK, [0-9]+ tokens \(uint32\), vocabulary 128256" || fail "inspect of uint32 tokens"
timeout -k 10 300 "$BUILD/hpctrain" --data.path llama3s.h5 --model.preset gpt-tiny --model.vocab 128256 --model.context 16 \
  --train.steps 1 --train.batch_size 2 --log.progress none --run.dir run > run.log 2>&1 || { cat run.log; fail "training on uint32 tokens"; }
pass "hpctrain trains on Llama 3's uint32 ids"
expect_exit 2 "the data has 128256 token ids but model.vocab is 50257" \
  "$BUILD/hpctrain" --data.path llama3s.h5 --model.preset gpt-tiny --model.vocab 50257 --model.context 16 --train.steps 1 --run.dir run2
