#!/usr/bin/python3
"""Writes the seed corpora tests/fuzz/corpus/<target>/ (small valid inputs).

    /usr/bin/python3 tests/fuzz/make_corpus.py

Each seed is a valid input in the layout the target decodes (see the block
at the top of tests/fuzz/fuzz_<target>.cpp): an option byte, length
prefixes where a target takes two files, then files as hpcdata would read
them (IDX, CIFAR-10 records, .npy from numpy itself, CSV), plain and
gzipped. The structure-aware targets (h5dataset, ckpt) get the all-zero
input (a pristine file) and a few fixed pseudo-random ones. Deterministic:
running it again rewrites the same bytes.
"""
import gzip
import io
import os
import random
import struct

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, mtime=0)


def spec_seeds():
    specs = [
        "flatten linear(10)",
        "flatten linear(8) relu linear(8) relu linear(3)",
        "conv(6,5,pad=2) relu maxpool(2) conv(4,3) relu flatten linear(5)",
        "conv(4,3,pad=1) bn relu maxpool(2) flatten dropout(0.25) linear(2)",
        "conv(4,3,pad=1,bias=0) bn relu res(conv(4,3,pad=1,bias=0) bn relu conv(4,3,pad=1,bias=0) bn) relu gap linear(3)",
        "conv(3,3,stride=2,pad=1) tanh avgpool(2) flatten linear(2)",
        "flatten linear(6) gelu ln linear(2)",
    ]
    for i, s in enumerate(specs):
        for shape in range(4):
            put("spec", f"spec{i}_{shape}", bytes([shape]) + s.encode())


def config_seeds():
    ini = (
        "# a run\nresume = auto\n[data]\npath = /dev/null\nworkers = 1\n"
        "[model]\nspec = \"conv(8,3) relu flatten linear(10)  # quoted\"\n"
        "[optim]\nname = adamw\nlr = 0.001 ; comment\nschedule = cosine\nwarmup_steps = 10\n"
        "[train]\nbatch_size = 32\nsteps = 100\n"
    )
    put("config", "ini_only", ini.encode())
    put("config", "ini_argv", (ini + "\0train\0--optim.lr\0" + "0.5\0--train.epochs=2").encode())
    put("config", "eval", b"[data]\npath = /dev/null\n\0eval\0--checkpoint\0runs/x/ckpt-00000010.h5")
    put("config", "env", b"[train]\nsteps = 5\n\0--data.path\0/dev/null\0HPCTRAIN_OPTIM_LR=0.25\0HPCTRAIN_TRAIN_SEED=3")
    put("config", "doctor", b"\0doctor\0--json=true")
    put("config", "help", b"\0--help")


def idx(rank_dims, payload):
    magic = struct.pack(">I", 0x800 + len(rank_dims))
    return magic + b"".join(struct.pack(">I", d) for d in rank_dims) + payload


def idx_seeds():
    rng = random.Random(1)
    for n, h, w in [(3, 4, 4), (2, 28, 28), (4, 1, 5)]:
        images = idx([n, h, w], bytes(rng.randrange(256) for _ in range(n * h * w)))
        labels = idx([n], bytes(rng.randrange(10) for _ in range(n)))
        for opt in (0, 1, 2):
            for zipped in (False, True):
                im, lb = (gz(images), gz(labels)) if zipped else (images, labels)
                put("idx", f"n{n}_{h}x{w}_o{opt}{'_gz' if zipped else ''}",
                    bytes([opt]) + struct.pack("<H", len(im)) + im + lb)


def cifar_seeds():
    rng = random.Random(2)
    for n in (1, 2):
        data = b"".join(bytes([rng.randrange(10)]) + bytes(rng.randrange(256) for _ in range(3072)) for _ in range(n))
        for opt in (0, 1, 2):
            put("cifar", f"n{n}_o{opt}", bytes([opt]) + data)
        put("cifar", f"n{n}_gz", bytes([0]) + gz(data))


def npy_bytes(a, version=None):
    f = io.BytesIO()
    if version is None:
        np.save(f, a)
    else:
        np.lib.format.write_array(f, a, version=version)
    return f.getvalue()


def npy_seeds():
    rng = np.random.default_rng(3)
    pairs = {
        "u8_i64": (rng.integers(0, 256, (4, 2, 2), dtype=np.uint8), rng.integers(0, 3, 4)),
        "f32_f32": (rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)),
        "f64be_u8": (rng.standard_normal((3, 2)).astype(">f8"), np.array([0, 1, 2], dtype=np.uint8)),
        "i16_i32col": (rng.integers(-5, 5, (3, 2), dtype=np.int16), np.array([[1], [0], [1]], dtype=np.int32)),
        "1d_x": (rng.standard_normal(5).astype(np.float32), rng.integers(0, 2, 5).astype(np.int8)),
    }
    for name, (x, y) in pairs.items():
        for version in (None, (2, 0)):
            xb, yb = npy_bytes(x, version), npy_bytes(y, version)
            for opt in (0, 2, 4, 8):
                put("npy", f"{name}_v{2 if version else 1}_o{opt}", bytes([opt]) + struct.pack("<H", len(xb)) + xb + yb)


def csv_seeds():
    tables = {
        "header": "a,b,label\n1,2,0\n3.5,-4,1\n0,0,2\n",
        "noheader": "0.1,0.2,1\n0.3,0.4,0\n\n0.5,0.6,1\n",
        "targets": "x1,x2,t1,t2\n1,2,0.5,0.25\n3,4,1e-3,-2\n5,6,7,8\n",
        "semicolon": "1;2;0\n3;4;1\n5;6;1\n7;8;0\n",
        "crlf": "f,label\r\n1,1\r\n2,0\r\n",
    }
    opts = {"header": [0, 0x20, 0x40, 0x80], "noheader": [0, 0x10, 0x40], "targets": [2, 1, 0x42],
            "semicolon": [0x04, 0x44], "crlf": [0, 0x20]}
    for name, text in tables.items():
        for opt in opts[name]:
            put("csv", f"{name}_o{opt:02x}", bytes([opt]) + text.encode())
        put("csv", f"{name}_gz", bytes([opts[name][0]]) + gz(text.encode()))


def structured_seeds(target, count, length):
    rng = random.Random(target)
    put(target, "zeros", bytes(length))
    for i in range(count):
        put(target, f"random{i}", bytes(rng.randrange(256) for _ in range(length)))


if __name__ == "__main__":
    spec_seeds()
    config_seeds()
    idx_seeds()
    cifar_seeds()
    npy_seeds()
    csv_seeds()
    structured_seeds("h5dataset", 24, 160)
    structured_seeds("ckpt", 24, 96)
