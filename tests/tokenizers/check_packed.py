#!/usr/bin/env python3
"""Checks a file of `hpcdata pack --from text --tokenizer` against reference ids (h5py).

Usage: check_packed.py OUT.h5 REF.ids DTYPE [LINES.json]

/train/tokens (packed with --val-fraction 0) must be exactly the documents' reference
ids in order, each as [bos] ids [eos] with the bos_id/eos_id the file records; DTYPE
(uint16 or uint32) is the token type expected; LINES.json picks and orders the
documents (pack --doc-sep line), else every document in order (--doc-sep file).
/tokenizer must hold a tokenizer file and the attributes the reader needs.
"""
import json
import sys

import h5py
import numpy as np

h5, ids_path, dtype = sys.argv[1:4]
ref = [line.split() for line in open(ids_path).read().split("\n")[:-1]]
order = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else range(len(ref))
with h5py.File(h5, "r") as f:
    tokens = f["train/tokens"]
    assert "val" not in f, "packed with --val-fraction 0, yet /val exists"
    assert tokens.dtype == np.dtype(dtype), (tokens.dtype, dtype)
    got = tokens[...].astype(np.int64)
    attrs = tokens.attrs
    bos, eos, vocab = int(attrs["bos_id"]), int(attrs["eos_id"]), int(attrs["vocab_size"])
    stored = f["tokenizer"]
    assert stored.dtype == np.uint8 and stored.shape[0] > 0
    for key in ("format", "name", "file", "vocab_size", "bos_id", "eos_id"):
        assert key in stored.attrs, key
    assert int(stored.attrs["vocab_size"]) == vocab and int(stored.attrs["eos_id"]) == eos
expect = []
for i in order:
    assert ref[i] != ["-"], "document %d is refused by the reference" % i
    expect += ([bos] if bos >= 0 else []) + [int(t) for t in ref[i]] + ([eos] if eos >= 0 else [])
expect = np.array(expect, dtype=np.int64)
if got.shape != expect.shape or not (got == expect).all():
    n = min(len(got), len(expect))
    k = int(np.argmax(got[:n] != expect[:n])) if (got[:n] != expect[:n]).any() else n
    sys.exit("%s: %d tokens, reference %d; first difference at %d: %s vs %s"
             % (h5, len(got), len(expect), k, got[k:k + 5], expect[k:k + 5]))
print("%s: %d tokens equal the reference (%s, bos %d, eos %d, vocabulary %d)" % (h5, len(got), dtype, bos, eos, vocab))
