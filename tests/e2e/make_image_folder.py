#!/usr/bin/python3
"""Writes a small image folder (DIR/CLASS/*.jpg|png) with PIL, for the image
tests and benchmarks:

    make_image_folder.py DIR [--per-class N] [--size W H | --sizes mixed] [--odd]

Three classes told apart by colour and stripe direction (a small CNN learns
them), each image a function of its class and index (numpy RandomState).
Sizes vary (--sizes mixed: 24 to 64 pixels, both aspect ratios) or are
fixed (--size W H). --odd adds the awkward files every real collection
has: a progressive JPEG, a CMYK JPEG, a grayscale, an RGBA and a palette
PNG, plus (--bad) a truncated JPEG and a text file named .png, and a
README.txt that is not an image.
"""
import argparse
import os

import numpy as np
from PIL import Image

CLASSES = ["cat", "dog", "fish"]


def picture(label, index, w, h):
    rng = np.random.RandomState(1000 * label + index)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    phase = rng.uniform(0, 6.3)
    if label == 0:
        wave = np.sin(y / 3.0 + phase)           # horizontal stripes
    elif label == 1:
        wave = np.sin(x / 3.0 + phase)           # vertical stripes
    else:
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        wave = np.sin(np.hypot(x - cx, y - cy) / 2.5 + phase)  # rings
    base = np.array([[200, 60, 60], [60, 180, 70], [60, 90, 200]], dtype=np.float64)[label]
    img = base[None, None, :] * (0.6 + 0.4 * wave[..., None]) + rng.normal(0, 12, (h, w, 3))
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--per-class", type=int, default=12)
    ap.add_argument("--size", type=int, nargs=2, metavar=("W", "H"))
    ap.add_argument("--odd", action="store_true", help="progressive, CMYK, gray, RGBA and palette files")
    ap.add_argument("--bad", action="store_true", help="a truncated JPEG and a text file named .png")
    ap.add_argument("--quality", type=int, default=90)
    a = ap.parse_args()
    sizes = [(32, 32), (48, 36), (36, 48), (64, 40), (24, 30), (57, 43)]
    for label, name in enumerate(CLASSES):
        os.makedirs(os.path.join(a.dir, name), exist_ok=True)
        for i in range(a.per_class):
            w, h = a.size if a.size else sizes[(i + label) % len(sizes)]
            picture(label, i, w, h).save(os.path.join(a.dir, name, f"{i:04d}.jpg"), quality=a.quality)
    if a.odd:
        d = os.path.join(a.dir, "fish")
        w, h = a.size if a.size else (40, 30)
        picture(2, 100, w, h).save(os.path.join(d, "odd_progressive.jpg"), quality=85, progressive=True)
        picture(2, 101, w, h).convert("CMYK").save(os.path.join(d, "odd_cmyk.jpg"), quality=90)
        picture(2, 102, w, h).convert("L").save(os.path.join(d, "odd_gray.png"))
        rgba = picture(2, 103, w, h).convert("RGBA")
        rgba.putalpha(Image.fromarray(np.arange(w * h, dtype=np.uint8).reshape(h, w)))
        rgba.save(os.path.join(d, "odd_rgba.png"))
        picture(2, 104, w, h).convert("P", palette=Image.ADAPTIVE, colors=16).save(os.path.join(d, "odd_palette.png"))
        with open(os.path.join(a.dir, "README.txt"), "w") as f:
            f.write("not an image\n")
    if a.bad:
        d = os.path.join(a.dir, "dog")
        picture(1, 200, 48, 48).save(os.path.join(d, "zz_truncated.jpg"), quality=90)
        path = os.path.join(d, "zz_truncated.jpg")
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
        with open(os.path.join(d, "zz_notes.png"), "w") as f:
            f.write("this is a text file with an image extension\n")


if __name__ == "__main__":
    main()
