#!/usr/bin/env bash
# bench/tokenizer.sh [BUILD]: tokenizer throughput, MB/s at 1 and 2 threads, of
# `hpcdata pack --from text --tokenizer` against the third-party tokenizers its
# tests compare ids with: OpenAI's tiktoken (npm, its Rust core as WebAssembly;
# 2 threads = 2 worker threads with an encoder each) for GPT-2 and cl100k_base
# (Llama 3's regex), and python3-sentencepiece (its num_threads) for a unigram
# model (8000 pieces) with byte fallback trained here on 2 MB of the corpus.
# Corpus: CPython's standard library sources (/usr/lib/python3.11/**/*.py,
# about 11 MB: code, comments, docstrings), one document per file. hpcdata's number is
# the one it prints (files read, encoded and spooled: the whole pack but the
# HDF5 copy); the others time encoding of text already in memory. Ratios > 1:
# hpcdata is faster. The tokenizer.json files are the tests' (tests/tokenizers/
# fetch_reference.sh: needs npm once). Never part of `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
python=${PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tokenizer-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

ref=$("$root/tests/tokenizers/fetch_reference.sh" "$build")
modules="$build/testdata/tokenizers/npm/node_modules"
stdlib=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
mapfile -t files < <(find "$stdlib" -path "$stdlib/site-packages" -prune -o -name '*.py' -size +0 -print | LC_ALL=C sort)
mb=$(cat "${files[@]}" | wc -c | awk '{printf "%.1f", $1 / 1e6}')
"$python" - "$tmp/spm.model" "${files[@]}" <<'PY'
import io, sys, sentencepiece as spm
text = "".join(open(f, encoding="utf-8", errors="replace").read() for f in sys.argv[2:])[:2_000_000]
model = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(l for l in text.split("\n") if l.strip()), model_writer=model,
                               vocab_size=8000, byte_fallback=True, character_coverage=0.9995, minloglevel=2,
                               num_threads=2)
open(sys.argv[1], "wb").write(model.getvalue())
PY
hpcdata_rate() {  # TOKENIZER THREADS → MB/s as hpcdata reports it
  "$build/hpcdata" pack --from text "${files[@]}" --tokenizer "$1" --threads "$2" --val-fraction 0 -o "$tmp/out.h5" --force |
    grep -oP 'tokenized .* \K[0-9.e+]+(?= MB/s)'
}
spm_rate() {  # THREADS
  "$python" - "$tmp/spm.model" "$1" "${files[@]}" <<'PY'
import sys, time, sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
texts = [open(f, "rb").read().decode("utf-8", "replace") for f in sys.argv[3:]]
start = time.perf_counter()
sp.encode(texts, num_threads=int(sys.argv[2]))
print("%.3g" % (sum(len(t.encode()) for t in texts) / 1e6 / (time.perf_counter() - start)))
PY
}
tiktoken_rate() {  # ENCODING THREADS
  node "$root/bench/tokenizer_tiktoken.cjs" "$modules" "$1" "$2" "${files[@]}" | "$python" -c 'import json,sys; print("%.3g" % json.load(sys.stdin)["mb_per_s"])'
}

echo "tokenizer throughput on CPython's stdlib sources ($mb MB, ${#files[@]} files, one document each); $(lscpu | sed -n 's/^Model name: *//p')"
printf '%-34s %8s %12s %12s %8s\n' tokenizer threads "hpcdata MB/s" "third MB/s" ratio
row() {  # NAME THREADS OURS THEIRS
  printf '%-34s %8s %12s %12s %8s\n' "$1" "$2" "$3" "$4" "$(awk -v a="$3" -v b="$4" 'BEGIN{printf "%.2fx", a / b}')"
}
for threads in 1 2; do
  row "GPT-2 (tiktoken gpt2)" "$threads" "$(hpcdata_rate "$ref/gpt2.json" "$threads")" "$(tiktoken_rate gpt2 "$threads")"
  row "cl100k / Llama 3 regex (tiktoken)" "$threads" "$(hpcdata_rate "$ref/cl100k.json" "$threads")" "$(tiktoken_rate cl100k_base "$threads")"
  row "SentencePiece unigram (python)" "$threads" "$(hpcdata_rate "$tmp/spm.model" "$threads")" "$(spm_rate "$threads")"
done
