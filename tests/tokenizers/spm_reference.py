#!/usr/bin/env python3
"""The third-party side of the SentencePiece tests: Debian's python3-sentencepiece.

Usage: spm_reference.py DOCS.json OUTDIR

Trains three small models on the documents' text with sentencepiece's own trainer
(a few seconds) and writes, for each, OUTDIR/NAME.model and OUTDIR/NAME.ids (one
line per document of DOCS.json: the ids sentencepiece gives, space-separated):

  spm_unigram  unigram, 8000 pieces, byte fallback, no normalization, no
               whitespace removal, digits split (Llama 2's settings): lossless
  spm_bpe      BPE, 8000 pieces, byte fallback, no normalization: lossless
  spm_nfkc     unigram, 6000 pieces, sentencepiece's default nmt_nfkc
               normalization, no byte fallback: lossy (NAME.lossy marks it)

A document with bytes that are not UTF-8 (integers in DOCS.json) gets the rule
hpctrain keeps where the model has byte fallback: each such byte is its <0xNN>
piece, the text before the first is encoded as it is, and the text after one is
encoded with add_dummy_prefix off (the same model with that field of its
NormalizerSpec changed here through sentencepiece's own model_pb2). Without byte
fallback the line is "-": hpctrain must refuse the document.
"""
import io
import json
import os
import sys

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

MODELS = {
    "spm_unigram": dict(model_type="unigram", vocab_size=8000, byte_fallback=True,
                        normalization_rule_name="identity", remove_extra_whitespaces=False, split_digits=True),
    "spm_bpe": dict(model_type="bpe", vocab_size=8000, byte_fallback=True,
                    normalization_rule_name="identity", remove_extra_whitespaces=False),
    "spm_nfkc": dict(model_type="unigram", vocab_size=6000),
}


def main():
    docs = json.load(open(sys.argv[1]))
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    sentences = [line for doc in docs for seg in doc if isinstance(seg, str) for line in seg.split("\n") if line]
    for name, opts in MODELS.items():
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model,
                                       character_coverage=0.98, hard_vocab_limit=False, num_threads=2,
                                       minloglevel=2, **opts)
        proto = model.getvalue()
        with open(os.path.join(out, name + ".model"), "wb") as f:
            f.write(proto)
        sp = spm.SentencePieceProcessor(model_proto=proto)
        m = model_pb2.ModelProto()
        m.ParseFromString(proto)
        m.normalizer_spec.add_dummy_prefix = False
        continuation = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
        fallback = opts.get("byte_fallback", False)
        lines = []
        for doc in docs:
            if all(isinstance(s, str) for s in doc):
                lines.append(" ".join(map(str, sp.encode("".join(doc)))))
                continue
            if not fallback:
                lines.append("-")
                continue
            ids = []
            for i, seg in enumerate(doc):
                if isinstance(seg, int):
                    ids.append(sp.piece_to_id("<0x%02X>" % seg))
                else:
                    ids += (sp if i == 0 else continuation).encode(seg)
            lines.append(" ".join(map(str, ids)))
        with open(os.path.join(out, name + ".ids"), "w") as f:
            f.write("\n".join(lines) + "\n")
        if name == "spm_nfkc":
            open(os.path.join(out, name + ".lossy"), "w").close()
        print("%s: %d pieces" % (name, sp.get_piece_size()))


if __name__ == "__main__":
    main()
