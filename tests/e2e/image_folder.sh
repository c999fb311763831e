#!/usr/bin/env bash
# ctest-timeout: 300
# Image folders end to end (hpcdata pack --from image-folder, the decoding loader):
#  1. a folder PIL writes (JPEGs of six sizes, a progressive and a CMYK JPEG,
#     grayscale, RGBA and palette PNGs, a truncated JPEG, a text file named
#     .png, a README) packs in both stores: --on-error fail names the first
#     bad file (exit 2), skip leaves both out and counts them;
#  2. --store raw --size 32: every pixel equals PIL's Image.open().convert("RGB")
#     .resize((32, 32), BILINEAR) (within 1 grey level; in practice equal),
#     labels and classes as torchvision's ImageFolder orders them;
#  3. --store jpeg: the stored bytes are the files' bytes, the offsets index
#     and attributes as documented, the datasets contiguous and aligned;
#     repack keeps a raw file's per-channel statistics and class names and
#     refuses a JPEG-store file (exit 2); inspect validates one;
#  4. training with "random_resized_crop:24, flip, color_jitter:0.4": 2 ranks x 8
#     == 1 rank x 16 (every draw a function of seed, epoch, sample), and a run
#     stopped by SIGUSR1 and resumed is bitwise the uninterrupted one;
#  5. bad input, one line each: an empty folder, a class folder without images
#     (exit 2), mixed sizes with --store raw and no --size (exit 2), a full
#     disk (exit 74, nothing left behind), a damaged offsets index (hpctrain
#     exit 2 naming the sample), random_resized_crop on decoded data (exit 2).
# The torchvision cross-checks (crop distribution, validation view, ResNet-50)
# are in image_torchvision.sh.
source "$(dirname "$0")/lib.bash"
H="$BUILD/hpcdata"
"$PYTHON" -c "import PIL, h5py, numpy" 2>/dev/null || skip "python3-pil, python3-h5py or python3-numpy missing"
export HPC_TEST_TIMEOUT=120
F="$TMP/folder"
"$PYTHON" "$ROOT/tests/e2e/make_image_folder.py" "$F" --odd --bad || fail "making the image folder"

# ---- 1. bad files: fail names the first, skip counts them -----------------------------------------
expect_exit 2 "^hpcdata: $F/dog/zz_notes.png: not a JPEG or PNG file \(--on-error skip leaves such files out\)$" \
  "$H" pack --from image-folder "$F" -o "$TMP/fail.h5"
[ ! -e "$TMP/fail.h5" ] && ! ls "$TMP" | grep -q tmp- || fail "a failed pack left a file behind"
"$H" pack --from image-folder "$F" -o "$TMP/jpeg.h5" --on-error skip --val-fraction 0.2 --threads 2 \
  >"$TMP/jpeg.out" 2>"$TMP/jpeg.err" || { cat "$TMP/jpeg.err"; fail "pack --store jpeg"; }
grep -q "^hpcdata: warning: skipped $F/dog/zz_truncated.jpg: JPEG: Premature end of JPEG file$" "$TMP/jpeg.err" ||
  { cat "$TMP/jpeg.err"; fail "the truncated JPEG is not named"; }
grep -Eq "^wrote $TMP/jpeg.h5: train 33 images, val 8, 3 classes .*; 2 unreadable file\(s\) skipped; 1 other file\(s\) ignored; [0-9]+ files/s on 2 threads$" \
  "$TMP/jpeg.out" || { cat "$TMP/jpeg.out"; fail "summary line"; }
pass "$(cat "$TMP/jpeg.out")"
"$H" pack --from image-folder "$F" -o "$TMP/raw.h5" --on-error skip --store raw --size 32 >"$TMP/raw.out" 2>/dev/null ||
  fail "pack --store raw"

# ---- 2. raw pixels = PIL's, 3. jpeg bytes = the files' --------------------------------------------
"$PYTHON" - "$F" "$TMP/raw.h5" "$TMP/jpeg.h5" <<'PY' || fail "packed images differ from PIL's / the files"
import os, sys
import h5py, numpy as np
from PIL import Image
folder, raw, jpeg = sys.argv[1:]
classes = sorted(c for c in os.listdir(folder) if os.path.isdir(os.path.join(folder, c)))
files = [(os.path.join(folder, c, n), i) for i, c in enumerate(classes)
         for n in sorted(os.listdir(os.path.join(folder, c))) if not n.startswith("zz_")]
with h5py.File(raw, "r") as f:
    x, y = f["train/x"], f["train/y"]
    assert x.shape == (41, 3, 32, 32) and x.dtype == np.uint8 and y.dtype == np.int32, (x.shape, x.dtype)
    assert [c.decode() if isinstance(c, bytes) else c for c in y.attrs["classes"]] == classes
    assert int(y.attrs["num_classes"]) == 3 and abs(x.attrs["scale"] - 1 / 255) < 1e-15
    assert x.attrs["mean"].shape == (3,) and x.attrs["std"].shape == (3,)
    worst, differ = 0, 0
    for i, (path, label) in enumerate(files):
        want = np.asarray(Image.open(path).convert("RGB").resize((32, 32), Image.BILINEAR)).transpose(2, 0, 1)
        d = np.abs(want.astype(int) - x[i].astype(int))
        worst, differ = max(worst, d.max()), differ + int((d > 0).sum())
        assert y[i] == label, (path, y[i], label)
    assert worst <= 1, worst
    pixels = x[...].astype(np.float64) / 255
    assert np.allclose(x.attrs["mean"], pixels.mean(axis=(0, 2, 3)), atol=1e-12)
    assert np.allclose(x.attrs["std"], pixels.std(axis=(0, 2, 3)), atol=1e-12)
    print(f"raw: {len(files)} images (CMYK, gray, RGBA, palette, progressive among them) vs PIL: "
          f"largest difference {worst}, {differ} values differ")
with h5py.File(jpeg, "r") as f:
    n = 0
    for split in ("train", "val"):
        img, off, y = f[f"{split}/images"], f[f"{split}/offsets"], f[f"{split}/y"]
        assert img.dtype == np.uint8 and off.dtype == np.int64 and off.shape == (y.shape[0] + 1,)
        for ds in (img, off, y):  # contiguous; those of 512 bytes or more on a 4 KiB boundary
            assert ds.chunks is None and ds.id.get_offset() is not None, ds.name
            assert ds.id.get_offset() % 4096 == 0 or ds.id.get_storage_size() < 512, ds.name
        assert int(img.attrs["size"]) == 224 and img.attrs["mean"].shape == (3,)
        o, b = off[...], img[...]
        assert o[0] == 0 and np.all(np.diff(o) > 0) and o[-1] == b.shape[0]
        stored = {bytes(b[o[i]:o[i + 1]]) for i in range(len(o) - 1)}
        n += len(stored)
    originals = {open(p, "rb").read() for p, _ in files}
    assert len(originals) == 41 and n == 41
    with h5py.File(jpeg, "r") as g:
        every = set()
        for split in ("train", "val"):
            o, b = g[f"{split}/offsets"][...], g[f"{split}/images"][...]
            every |= {bytes(b[o[i]:o[i + 1]]) for i in range(len(o) - 1)}
    assert every == originals
    print("jpeg: the 41 stored images are the files' bytes; offsets and attributes as documented")
PY
pass "raw pixels equal PIL's; the jpeg store holds the files' own bytes"
"$H" repack "$TMP/raw.h5" "$TMP/raw2.h5" >/dev/null || fail "repack of a raw image file"
"$PYTHON" - "$TMP/raw.h5" "$TMP/raw2.h5" <<'EOF' || fail "repack lost pixels or attributes"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
assert np.array_equal(a["train/x"][...], b["train/x"][...])
assert np.array_equal(a["train/x"].attrs["mean"], b["train/x"].attrs["mean"])
assert np.array_equal(a["train/x"].attrs["std"], b["train/x"].attrs["std"])
assert list(a["train/y"].attrs["classes"]) == list(b["train/y"].attrs["classes"])
EOF
expect_exit 2 "holds encoded images \(/train/images\), which hpcdata pack --from image-folder writes contiguous already" \
  "$H" repack "$TMP/jpeg.h5" "$TMP/jpeg2.h5"
"$H" inspect "$TMP/jpeg.h5" >"$TMP/inspect.out" 2>&1 || { cat "$TMP/inspect.out"; fail "inspect"; }
grep -q "^train: OK, 33 train images" "$TMP/inspect.out" || { cat "$TMP/inspect.out"; fail "inspect verdict"; }

# ---- 4. training: 2 ranks = 1 rank with the double batch; SIGUSR1 + resume bitwise ------------------
args=(--data.path "$TMP/jpeg.h5" --model.spec "conv(8,3,pad=1) bn relu maxpool(2) flatten linear(3)"
      --data.augment "random_resized_crop:24, flip, color_jitter:0.4" --train.steps 12 --log.every 2
      --log.progress plain --data.drop_last false)
run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 8 --run.dir "$TMP/two" >"$TMP/two.log" 2>&1 ||
  { cat "$TMP/two.log"; fail "2 ranks"; }
grep -Eq "^loader: decodes [0-9]+ images/s per thread" "$TMP/two.log" || { cat "$TMP/two.log"; fail "no loader line"; }
run_mpi 1 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 16 --run.dir "$TMP/one" >"$TMP/one.log" 2>&1 ||
  { cat "$TMP/one.log"; fail "1 rank"; }
"$PYTHON" - "$TMP/two/metrics.jsonl" "$TMP/one/metrics.jsonl" <<'EOF' || fail "2 ranks differ from 1 rank"
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b = (losses(p) for p in sys.argv[1:])
assert sorted(a) == sorted(b) and len(a) >= 6, (sorted(a), sorted(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
print(f"2 ranks x 8 vs 1 rank x 16: largest relative loss difference {worst:.2e}")
assert worst < 1e-5, worst
EOF
pass "2 ranks x 8 == 1 rank x 16 with random_resized_crop, flip and color_jitter"
rc=0
HPCTRAIN_FAULT=sigusr1@step_end:1:5 run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 8 \
  --run.dir "$TMP/split" >"$TMP/split1.log" 2>&1 || rc=$?
[ "$rc" -eq 75 ] || { cat "$TMP/split1.log"; fail "the stopped run exited $rc, expected 75"; }
run_mpi 2 "$BUILD/hpctrain" "${args[@]}" --train.batch_size 8 --run.dir "$TMP/split" --resume auto \
  >"$TMP/split2.log" 2>&1 || { cat "$TMP/split2.log"; fail "resumed run"; }
records() { grep -oE '"(step|loss|val_loss|val_acc|grad_norm|lr)": [^,}]*' "$1/metrics.jsonl"; }
diff <(records "$TMP/two") <(records "$TMP/split") || fail "stop + resume changed the logged losses"
"$PYTHON" - "$TMP/two/ckpt-00000012.h5" "$TMP/split/ckpt-00000012.h5" <<'EOF' || fail "final parameters differ"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["params_flat"][...] for p in sys.argv[1:])
assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
EOF
pass "SIGUSR1 after step 5 + resume: bitwise the uninterrupted run, with augmentation"

# ---- 5. bad input --------------------------------------------------------------------------------
mkdir -p "$TMP/empty" "$TMP/noimg/cat" "$TMP/noimg/dog"
cp "$F/cat/0000.jpg" "$TMP/noimg/cat/"
echo text > "$TMP/noimg/dog/notes.txt"
expect_exit 2 "^hpcdata: image folder $TMP/empty has no class folders \(the layout is DIR/CLASS/IMAGE.jpg\)$" \
  "$H" pack --from image-folder "$TMP/empty" -o "$TMP/e.h5"
expect_exit 2 "^hpcdata: class folder $TMP/noimg/dog has no images \(.jpg, .jpeg or .png files\)$" \
  "$H" pack --from image-folder "$TMP/noimg" -o "$TMP/e.h5"
expect_exit 2 "^hpcdata: $F/cat/0001.jpg is 48x36 but $F/cat/0000.jpg is 32x32: --store raw needs one size; give --size" \
  "$H" pack --from image-folder "$F" -o "$TMP/e.h5" --store raw --on-error skip
expect_exit 2 "^hpcdata: --store expects jpeg or raw, got 'png'" "$H" pack --from image-folder "$F" -o "$TMP/e.h5" --store png
[ ! -e "$TMP/e.h5" ] || fail "a failed pack left its output"
mnt="$TMP/small-fs"
mkdir -p "$mnt"
if mount -t tmpfs -o size=64k tmpfs "$mnt" 2>/dev/null; then
  trap 'umount "$mnt" 2>/dev/null || true; rm -rf "$TMP"' EXIT
  for store in jpeg raw; do
    expect_exit 74 "^hpcdata: cannot write .*$mnt/full-$store.h5.*: no space left on device \(ENOSPC\)$" \
      "$H" pack --from image-folder "$F" -o "$mnt/full-$store.h5" --on-error skip --store $store --size 64
    [ -z "$(ls -A "$mnt")" ] || { ls -la "$mnt"; fail "a full disk left files behind ($store)"; }
    [ "$(grep -v 'warning: skipped' "$TMP/err" | grep -c '^hpc')" -eq 1 ] || { cat "$TMP/err"; fail "more than one error line"; }
  done
  umount "$mnt"
  pass "a full disk (tmpfs of 64 KiB): exit 74 for both stores, nothing left behind"
else
  echo "note: cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): the real full disk is not tested"
fi
cp "$TMP/jpeg.h5" "$TMP/bad1.h5"
cp "$TMP/jpeg.h5" "$TMP/bad2.h5"
"$PYTHON" - "$TMP/bad1.h5" "$TMP/bad2.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:   # not increasing at sample 6
    o = f["train/offsets"]; o[7] = o[6] - 1
with h5py.File(sys.argv[2], "r+") as f:   # increasing, but sample 5 starts 3 bytes late
    o = f["train/offsets"]; o[5] = o[5] + 3
EOF
expect_exit 2 "^hpctrain: error: data file '$TMP/bad1.h5': /train/offsets is damaged at sample 6: its bytes \[[0-9]+, [0-9]+\) are empty or reversed$" \
  "$BUILD/hpctrain" --data.path "$TMP/bad1.h5" --model.preset simplenet --run.dir "$TMP/b1"
expect_exit 2 "^hpctrain: error: data file '$TMP/bad2.h5': /train/images sample 5 \(bytes [0-9]+ to [0-9]+\) is not a readable image \(not a JPEG or PNG file\): the file or its offsets index is damaged$" \
  "$BUILD/hpctrain" --data.path "$TMP/bad2.h5" --model.preset simplenet --run.dir "$TMP/b2"
expect_exit 2 "random_resized_crop and color_jitter act while images are decoded, but data file '$TMP/raw.h5': /train holds decoded pixels" \
  "$BUILD/hpctrain" --data.path "$TMP/raw.h5" --model.preset simplenet --data.augment random_resized_crop:24 --train.batch_size 8 --run.dir "$TMP/b3"
