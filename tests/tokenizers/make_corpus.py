#!/usr/bin/env python3
"""Writes the tokenizer tests' text: varied documents, a function of the seed only.

Usage: make_corpus.py OUTDIR [--bytes N] [--seed S]

OUTDIR/docs.json   every document as a list of segments: a string (valid UTF-8 text)
                   or an integer (one byte that is not UTF-8), so that a reference
                   tokenizer that only takes strings can be run on the valid parts
OUTDIR/docs/NNNN.txt  each document's bytes (pack --doc-sep file)
OUTDIR/lines.txt   the documents without a newline, one per line (pack --doc-sep line),
OUTDIR/lines.json  and their indices in docs.json

The kinds of text are the ones tokenizers get wrong: ASCII prose with contractions
in any case ('S, 'ſ, 'K with the Kelvin sign), numbers of every length (Llama 3
splits digits in threes), accented Latin precomposed and decomposed, CJK, emoji
with ZWJ sequences, code with tabs and indentation, runs of every kind of space
(U+0085, U+00A0, U+202F, U+3000 are Unicode White_Space; U+FEFF, U+200B and
U+180E are not), long pieces (kilobytes of spaces, a base64 blob), characters drawn
from all of Unicode 14 (Python 3.11's tables, the version PCRE2 10.42 has), the
literal text of special tokens, and bytes that are not UTF-8.
"""
import json
import os
import random
import sys
import unicodedata

assert unicodedata.unidata_version == "14.0.0", unicodedata.unidata_version

WORDS = ("the of and to in is was he for it with as his on be at by had are but from or have an they which "
         "one you were her all she there would their we him been has when who will more no if out so said "
         "what up its about into than them can only other new some could time these two may then do first "
         "any my now such like our over man me even most made after also did many before must through").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'D",
                "'\u017f", "'\u212a", "'x", "''", "'"]
LATIN = ("café naïve déjà vu façade Ångström Straße größer Œuvre señor año Łódź Dvořák Tiếng Việt "
         "crème brûlée smörgåsbord İstanbul ıi").split()
DECOMPOSED = [unicodedata.normalize("NFD", w) for w in LATIN]
CJK = ["我们的语言模型", "東京都は日本の首都です", "ひらがなとカタカナ", "한국어 텍스트입니다", "中文，标点。符号！",
       "ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ", "漢字かな交じり文"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "❤️", "🤖", "✨🎉", "🧑🏿‍💻", "☕"]
SPACES = [" ", "  ", "\t", "\u0085", "\u00a0", "\u202f", "\ufeff", "\u200b", "\u180e", "\u3000",
          "\u2028", "\u1680", "\u2009", "\r", "\x0b", "\x0c"]
NUMBERS = ["7", "42", "123", "1234", "12345", "123456", "1234567", "3.14159", "1,000,000", "0x1F",
           "²³", "Ⅻ", "١٢٣", "१२३", "１２３"]
SPECIAL_TEXT = ["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<s>", "</s>"]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if __name__ == '__main__':\n        main()\n",
    "const s = `${a}+${b}`;\n\n\n    // done\n",
    "    \n  \t \n x = {'k': [1, 2, 3]}\n",
]
INVALID = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xe3\x81", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80", b"\xc3"]


def assigned_chars():
    out = []
    for cp in range(0x20, 0x110000):
        if 0xD800 <= cp < 0xE000 or (cp & 0xFFFE) == 0xFFFE or 0xFDD0 <= cp <= 0xFDEF:
            continue
        c = chr(cp)
        if unicodedata.category(c) not in ("Cn", "Cs", "Co"):
            out.append(c)
    return out


def prose(rng, n):
    parts = []
    for _ in range(n):
        w = rng.choice(WORDS)
        r = rng.random()
        if r < 0.1:
            w = w.capitalize()
        elif r < 0.15:
            w = w.upper()
        if rng.random() < 0.12:
            w += rng.choice(CONTRACTIONS)
        if rng.random() < 0.08:
            w += rng.choice(",.;:!?")
        parts.append(w)
    return " ".join(parts)


def unicode_soup(rng, chars, n):
    s = []
    for _ in range(n):
        s.append(rng.choice(chars))
        if rng.random() < 0.2:
            s.append(rng.choice(SPACES))
    return "".join(s)


def document(rng, chars, i):
    kind = i % 12
    segs = []
    if kind == 0:
        segs.append(prose(rng, rng.randint(20, 400)))
    elif kind == 1:
        segs.append(" ".join(rng.choice(LATIN + DECOMPOSED + WORDS) for _ in range(rng.randint(10, 120))))
    elif kind == 2:
        segs.append("".join(rng.choice(CJK + EMOJI + [" ", "、", "\u3000"]) for _ in range(rng.randint(5, 80))))
    elif kind == 3:
        segs.append("".join(rng.choice(CODE) for _ in range(rng.randint(1, 12))))
    elif kind == 4:
        segs.append("".join(rng.choice(WORDS + NUMBERS + SPACES + EMOJI) + rng.choice(["", " ", ""])
                            for _ in range(rng.randint(10, 200))))
    elif kind == 5:
        segs.append(unicode_soup(rng, chars, rng.randint(10, 300)))
    elif kind == 6:
        segs.append(prose(rng, 10) + " " + rng.choice(SPECIAL_TEXT) + " " + prose(rng, 10))
    elif kind == 7:  # text with bytes that are not UTF-8
        for _ in range(rng.randint(1, 6)):
            segs.append(rng.choice([prose(rng, rng.randint(0, 8)), rng.choice(CJK), unicode_soup(rng, chars, 5)]))
            segs.extend(rng.choice(INVALID))
        segs.append(prose(rng, rng.randint(0, 5)))
    elif kind == 8:
        segs.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 40))) + prose(rng, 5) +
                    "".join(rng.choice(SPACES) for _ in range(rng.randint(1, 40))))
    elif kind == 9:
        segs.append("".join(str(rng.randint(0, 10 ** rng.randint(1, 30))) + rng.choice([" ", "", ".", "-", "\n"])
                            for _ in range(rng.randint(5, 60))))
    elif kind == 10:
        segs.append(prose(rng, 30).replace(" ", "\n", rng.randint(0, 10)) + "\n\n" + prose(rng, 30) + "\n")
    else:  # long pieces: kilobytes in one pre-token
        pick = rng.randrange(4)
        if pick == 0:
            segs.append("a" + " " * rng.randint(1000, 6000) + "b")
        elif pick == 1:
            alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
            segs.append("data:" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1000, 4000))) + "==")
        elif pick == 2:
            segs.append("".join(rng.choice("0123456789") for _ in range(rng.randint(500, 2000))))
        else:
            segs.append("x" + "\u3000" * rng.randint(100, 1000) + "!" * rng.randint(100, 1000))
    # Merge neighbouring strings; bytes stay integers.
    out = []
    for s in segs:
        if isinstance(s, int):
            out.append(s)
        elif s:
            if out and isinstance(out[-1], str):
                out[-1] += s
            else:
                out.append(s)
    return out


def to_bytes(doc):
    return b"".join(s.encode("utf-8") if isinstance(s, str) else bytes([s]) for s in doc)


def segments(raw):
    """The segments of raw bytes as Python's UTF-8 decoder sees them: each byte it cannot decode
    (surrogateescape gives one lone surrogate per such byte) becomes an integer."""
    out = []
    for c in raw.decode("utf-8", "surrogateescape"):
        if 0xDC80 <= ord(c) <= 0xDCFF:
            out.append(ord(c) - 0xDC00)
        elif out and isinstance(out[-1], str):
            out[-1] += c
        else:
            out.append(c)
    return out


def main():
    out = sys.argv[1]
    size = int(sys.argv[sys.argv.index("--bytes") + 1]) if "--bytes" in sys.argv else 1_000_000
    seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else 0
    rng = random.Random(seed)
    chars = assigned_chars()
    docs, total = [], 0
    while total < size:
        # Bytes meant as invalid can form a valid sequence with their neighbours: segment what was written.
        d = segments(to_bytes(document(rng, chars, len(docs))))
        if not d:
            continue
        docs.append(d)
        total += len(to_bytes(d))
    os.makedirs(os.path.join(out, "docs"), exist_ok=True)
    with open(os.path.join(out, "docs.json"), "w") as f:
        json.dump(docs, f)
    for i, d in enumerate(docs):
        with open(os.path.join(out, "docs", "%05d.txt" % i), "wb") as f:
            f.write(to_bytes(d))
    # One document per line: those without a line break (a trailing "\r" would be dropped).
    lines = [i for i, d in enumerate(docs) if b"\n" not in to_bytes(d) and not to_bytes(d).endswith(b"\r")]
    with open(os.path.join(out, "lines.txt"), "wb") as f:
        f.write(b"".join(to_bytes(docs[i]) + b"\n" for i in lines))
    with open(os.path.join(out, "lines.json"), "w") as f:
        json.dump(lines, f)
    print("%d documents, %d bytes, %d of them one per line" % (len(docs), total, len(lines)))


if __name__ == "__main__":
    main()
