#!/usr/bin/env bash
# ctest-timeout: 300
# hpcdata beyond MNIST: pack --from cifar10-bin, npy and csv, synth and
# repack write files that h5py (Debian python3-h5py) reads back with the
# documented shapes, dtypes, attributes and the input's exact values, stored
# contiguous and 4 KiB-aligned; synth is a pure function of its seed; repack
# makes chunked, compressed and big-endian files mappable without changing a
# value; inspect says what is mappable. Every malformed input (wrong magic,
# truncated, ragged rows, non-numeric cells, bad labels, unsupported dtypes)
# exits 2 with one "hpcdata:" line naming the file and problem, and leaves no
# output or temp file behind.
source "$(dirname "$0")/lib.bash"
H="$BUILD/hpcdata"
[ -x "$H" ] || fail "$H not built (make $H)"
cd "$TMP"

# ---- inputs, written by numpy: CIFAR-10 binary batches, .npy arrays, CSV tables
$PYTHON - <<'PY' || fail "cannot write the test inputs"
import gzip, os, numpy as np
rng = np.random.default_rng(3)
os.makedirs("cifar")
def records(n):
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    images = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    return np.concatenate([labels[:, None], images], axis=1)
for name, n in (("data_batch_1.bin", 50), ("data_batch_2.bin", 30), ("test_batch.bin", 20)):
    records(n).tofile(f"cifar/{name}")
with open("cifar/data_batch_2.bin", "rb") as f, gzip.open("cifar/data_batch_3.bin.gz", "wb") as g:
    g.write(f.read()[: 3073 * 10])                     # a gzipped batch of 10
np.save("xu8.npy", rng.integers(0, 256, (60, 3, 4, 4), dtype=np.uint8))
np.save("yi64.npy", rng.integers(0, 5, 60).astype(np.int64))
np.save("xf64.npy", rng.standard_normal((40, 7)))
np.save("yf32.npy", rng.standard_normal((40, 2)).astype(np.float32))
np.save("xbe.npy", rng.standard_normal((40, 7)).astype(">f4"))
np.save("ycol.npy", rng.integers(0, 3, (40, 1)).astype(np.int16))  # N x 1 class ids
np.lib.format.write_array(open("xv2.npy", "wb"), rng.standard_normal((40, 7)).astype(np.float32), version=(2, 0))
np.save("vx.npy", rng.integers(0, 256, (12, 3, 4, 4), dtype=np.uint8))
np.save("vy.npy", rng.integers(0, 5, 12).astype(np.int32))
rows = rng.standard_normal((30, 3)).round(4)
labels = rng.integers(0, 4, 30)
with open("h.csv", "w") as f:                           # header, label column in the middle
    f.write("a, b ,label,c\n")
    for r, l in zip(rows, labels):
        f.write(f"{r[0]},{r[1]},{l},{r[2]}\r\n")
    f.write("\n")
np.savetxt("plain.csv", np.column_stack([rows, labels]), delimiter=";", fmt="%.6g")  # no header, label last
np.savetxt("reg.csv.gz", np.column_stack([rows, rows @ [[1, 2], [3, 4], [5, 6]]]), delimiter=",", fmt="%.6g")
np.save("ref_rows.npy", rows); np.save("ref_labels.npy", labels)
PY
pass "inputs written"

"$H" pack --from cifar10-bin cifar -o cifar.h5 > out.txt || fail "pack cifar10-bin DIR failed"
grep -q "wrote cifar.h5: train 90 x 3x32x32 uint8, val 20, 10 classes" out.txt || { cat out.txt; fail "cifar summary"; }
"$H" pack --from cifar10-bin cifar/data_batch_1.bin --val cifar/test_batch.bin -o cifar_files.h5 > /dev/null || fail "pack cifar10-bin FILES failed"
"$H" pack --from npy xu8.npy yi64.npy --val vx.npy vy.npy -o npy_u8.h5 > /dev/null || fail "pack npy uint8 failed"
"$H" pack --from npy xf64.npy yf32.npy --val-fraction 0.25 -o npy_reg.h5 > /dev/null || fail "pack npy regression failed"
"$H" pack --from npy xbe.npy ycol.npy --classes 3 -o npy_be.h5 > /dev/null || fail "pack npy big-endian failed"
"$H" pack --from npy xv2.npy ycol.npy -o npy_v2.h5 > /dev/null || fail "pack npy version 2 failed"
"$H" pack --from csv h.csv --label-col label -o csv_h.h5 > /dev/null || fail "pack csv with header failed"
"$H" pack --from csv plain.csv --delimiter ';' --val plain.csv -o csv_plain.h5 > /dev/null || fail "pack csv without header failed"
"$H" pack --from csv reg.csv.gz --targets 2 -o csv_reg.h5 > /dev/null || fail "pack csv regression failed"
"$H" synth -o synth_a.h5 --samples 300 --val 50 --shape 3x8x8 --classes 4 --seed 5 > /dev/null || fail "synth failed"
"$H" synth -o synth_b.h5 --samples 300 --val 50 --shape 3x8x8 --classes 4 --seed 5 > /dev/null || fail "synth failed"
"$H" synth -o synth_c.h5 --samples 300 --val 50 --shape 3x8x8 --classes 4 --seed 6 > /dev/null || fail "synth failed"
"$H" synth -o synth_r.h5 --samples 200 --shape 16 --regression 3 --dtype float32 > /dev/null || fail "synth regression failed"
pass "pack (cifar10-bin, npy, csv) and synth wrote their files"

$PYTHON <<'PY' || fail "a packed file differs from its input or the documented layout"
import gzip, h5py, numpy as np

def layout(f):
    for split in f:
        for name in ("x", "y"):
            d = f[split][name]
            assert d.chunks is None and d.compression is None, d.name
            assert d.dtype.byteorder in "<|=", (d.name, d.dtype)
            if d.nbytes >= 512:
                assert d.id.get_offset() % 4096 == 0, (d.name, d.id.get_offset())

def u8_attrs(x, train_x):
    px = train_x.astype(np.float64) / 255
    assert abs(x.attrs["scale"] - 1 / 255) < 1e-15
    assert abs(x.attrs["mean"] - px.mean()) < 1e-9 and abs(x.attrs["std"] - px.std()) < 1e-9, dict(x.attrs)

rec = lambda p: np.fromfile(p, np.uint8).reshape(-1, 3073)
b1, b2, tb = rec("cifar/data_batch_1.bin"), rec("cifar/data_batch_2.bin"), rec("cifar/test_batch.bin")
b3 = np.frombuffer(gzip.open("cifar/data_batch_3.bin.gz").read(), np.uint8).reshape(-1, 3073)
train = np.concatenate([b1, b2, b3])
with h5py.File("cifar.h5", "r") as f:
    layout(f)
    assert f["train/x"].shape == (90, 3, 32, 32) and f["train/x"].dtype == np.uint8
    assert np.array_equal(f["train/x"][:].reshape(90, -1), train[:, 1:])
    assert f["train/y"].dtype == np.int32 and np.array_equal(f["train/y"][:], train[:, 0])
    assert np.array_equal(f["val/x"][:].reshape(20, -1), tb[:, 1:]) and np.array_equal(f["val/y"][:], tb[:, 0])
    assert f["train/y"].attrs["num_classes"] == 10
    u8_attrs(f["train/x"], train[:, 1:]); u8_attrs(f["val/x"], train[:, 1:])  # val uses train statistics
with h5py.File("cifar_files.h5", "r") as f:
    assert np.array_equal(f["train/y"][:], b1[:, 0]) and f["val/x"].shape[0] == 20

x, y = np.load("xu8.npy"), np.load("yi64.npy")
with h5py.File("npy_u8.h5", "r") as f:
    layout(f)
    assert f["train/x"].dtype == np.uint8 and np.array_equal(f["train/x"][:], x)
    assert f["train/y"].dtype == np.int32 and np.array_equal(f["train/y"][:], y)
    assert np.array_equal(f["val/x"][:], np.load("vx.npy")) and np.array_equal(f["val/y"][:], np.load("vy.npy"))
    assert f["train/y"].attrs["num_classes"] == max(y.max(), np.load("vy.npy").max()) + 1
    u8_attrs(f["train/x"], x)
with h5py.File("npy_reg.h5", "r") as f:
    layout(f)
    xs, ys = np.load("xf64.npy").astype(np.float32), np.load("yf32.npy")
    assert f["train/x"].dtype == np.float32 and f["train/y"].shape[1:] == (2,)
    assert f["train/x"].shape[0] == 30 and f["val/x"].shape[0] == 10       # --val-fraction 0.25 of 40
    got = np.concatenate([f["train/x"][:], f["val/x"][:]])
    assert sorted(map(bytes, got)) == sorted(map(bytes, xs)), "not a partition of the input rows"
    pairs = {bytes(a): bytes(b) for a, b in zip(xs, ys)}
    for s in ("train", "val"):
        for a, b in zip(f[s]["x"][:], f[s]["y"][:]):
            assert pairs[bytes(a)] == bytes(b), "x and y rows separated"
with h5py.File("npy_be.h5", "r") as f:
    assert f["train/x"].dtype == np.dtype("<f4") and np.array_equal(f["train/x"][:], np.load("xbe.npy"))
    assert np.array_equal(f["train/y"][:], np.load("ycol.npy")[:, 0]) and f["train/y"].attrs["num_classes"] == 3
with h5py.File("npy_v2.h5", "r") as f:
    assert np.array_equal(f["train/x"][:], np.load("xv2.npy"))

rows, labels = np.load("ref_rows.npy").astype(np.float32), np.load("ref_labels.npy")
with h5py.File("csv_h.h5", "r") as f:
    layout(f)
    assert f["train/x"].shape == (30, 3) and f["train/x"].dtype == np.float32
    assert np.array_equal(f["train/x"][:], rows) and np.array_equal(f["train/y"][:], labels)
with h5py.File("csv_plain.h5", "r") as f:
    assert np.allclose(f["train/x"][:], rows, rtol=1e-5) and np.array_equal(f["val/y"][:], labels)
with h5py.File("csv_reg.h5", "r") as f:
    assert f["train/y"].shape == (30, 2) and f["train/y"].dtype == np.float32
    assert np.allclose(f["train/y"][:], rows.astype(np.float64) @ [[1, 2], [3, 4], [5, 6]], rtol=1e-5)

with h5py.File("synth_a.h5", "r") as a, h5py.File("synth_b.h5", "r") as b, h5py.File("synth_c.h5", "r") as c:
    layout(a)
    assert a["train/x"].shape == (300, 3, 8, 8) and a["val/x"].shape == (50, 3, 8, 8)
    assert a["train/x"].dtype == np.uint8 and a["train/y"].attrs["num_classes"] == 4
    assert set(np.unique(a["train/y"][:])) == {0, 1, 2, 3}
    for n in ("train/x", "train/y", "val/x", "val/y"):
        assert np.array_equal(a[n][:], b[n][:]), "same seed, other data: " + n
    assert not np.array_equal(a["train/x"][:], c["train/x"][:]), "another seed, same data"
    assert not np.array_equal(a["train/x"][:50], a["val/x"][:]), "val repeats train"
    # learnable: the class means of the dequantised inputs are far apart compared with the noise
    xv = (a["train/x"][:].reshape(300, -1) * a["train/x"].attrs["scale"] - a["train/x"].attrs["mean"])
    yv = a["train/y"][:]
    means = np.stack([xv[yv == k].mean(0) for k in range(4)])
    nearest = np.argmin(((xv[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert (nearest == yv).mean() > 0.95, (nearest == yv).mean()
with h5py.File("synth_r.h5", "r") as r:
    assert r["train/x"].dtype == np.float32 and r["train/y"].shape == (200, 3) and "num_classes" not in r["train/y"].attrs
    xr, yr = r["train/x"][:].astype(np.float64), r["train/y"][:].astype(np.float64)
    w, *_ = np.linalg.lstsq(xr, yr, rcond=None)
    assert np.sqrt(((xr @ w - yr) ** 2).mean()) < 0.2, "targets are not a linear function of x plus 0.1 noise"
print("every packed file matches its input")
PY
pass "h5py reads every output with the expected shapes, dtypes, attributes and values"

# ---- repack: chunked + gzip + big-endian files written by h5py become mappable, values unchanged
$PYTHON <<'PY' || fail "cannot write the files to repack"
import h5py, numpy as np
rng = np.random.default_rng(4)
with h5py.File("messy.h5", "w") as f:
    f.create_dataset("train/x", data=rng.integers(0, 256, (500, 1, 6, 6), dtype=np.uint8), chunks=(64, 1, 6, 6),
                     compression="gzip", shuffle=True)
    f["train/x"].attrs.update(scale=0.5, mean=3.0, std=2.0)
    f.create_dataset("train/y", data=rng.integers(0, 7, 500).astype(">i4"))
    f["train/y"].attrs["num_classes"] = 9
    f.create_dataset("val/x", data=rng.standard_normal((50, 1, 6, 6)).astype(">f4"), chunks=(10, 1, 6, 6))
    f.create_dataset("val/y", data=rng.integers(0, 7, 50).astype(np.int32), compression="gzip")
    f["notes/readme"] = np.arange(4)
PY
"$H" inspect messy.h5 > messy.txt || { cat messy.txt; fail "inspect messy.h5"; }
grep -q "/train/x .*chunked, filters: shuffle, deflate, mmap: no" messy.txt || { cat messy.txt; fail "inspect: chunked not reported"; }
grep -q "/train/y .*mmap: no (int32 big-endian on disk" messy.txt || { cat messy.txt; fail "inspect: byte order not reported"; }
grep -q "hpcdata repack messy.h5 OUT.h5" messy.txt || { cat messy.txt; fail "inspect: no repack hint"; }
"$H" repack messy.h5 tidy.h5 > repack.txt || { cat repack.txt; fail "repack failed"; }
grep -q "not copied (not part of the dataset layout): /notes" repack.txt || { cat repack.txt; fail "repack: skipped objects not listed"; }
"$H" inspect tidy.h5 > tidy.txt || fail "inspect tidy.h5"
[ "$(grep -c 'mmap: yes' tidy.txt)" -eq 4 ] || { cat tidy.txt; fail "repacked datasets are not all mappable"; }
cp messy.h5 inplace.h5
"$H" repack inplace.h5 inplace.h5 --force > /dev/null || fail "in-place repack with --force failed"
$PYTHON <<'PY' || fail "repack changed values, dtypes or attributes"
import h5py, numpy as np
with h5py.File("messy.h5", "r") as a, h5py.File("tidy.h5", "r") as b, h5py.File("inplace.h5", "r") as c:
    assert set(b) == {"train", "val"}
    for n in ("train/x", "train/y", "val/x", "val/y"):
        for out in (b, c):
            assert np.array_equal(a[n][:], out[n][:]), n
            assert out[n].dtype == a[n].dtype.newbyteorder("<"), (n, out[n].dtype)
            assert out[n].chunks is None and out[n].compression is None, n
    assert dict(b["train/x"].attrs) == {"scale": 0.5, "mean": 3.0, "std": 2.0}
    assert b["train/y"].attrs["num_classes"] == 9 and b["val/y"].attrs["num_classes"] == 9
print("repack kept every value")
PY
compgen -G "*.tmp-*" > /dev/null && fail "temp file left behind"
pass "repack: chunked/gzip/big-endian → contiguous, aligned, mappable; values, dtypes, attributes kept; in place with --force"

# ---- bad input: exit 2, one "hpcdata:" line naming the problem, no output and no temp file
mkdir o
bad() {  # REGEX hpcdata-args…: must fail with it and leave o/ empty
  local re=$1; shift
  expect_exit 2 "^hpcdata: .*$re" "$H" "$@"
  [ "$(wc -l < "$TMP/err")" -eq 1 ] || { cat "$TMP/err"; fail "more than one line on stderr"; }
  if compgen -G "o/*" > /dev/null; then ls -la o >&2; fail "output or temp file left in o/"; fi
}
$PYTHON <<'PY'
import numpy as np
rng = np.random.default_rng(5)
b = open("xu8.npy", "rb").read()
open("trunc.npy", "wb").write(b[:-10])
open("magic.npy", "wb").write(b"\x93NUMPX" + b[6:])
open("hdr.npy", "wb").write(b[:8] + b"\xff\x7f" + b[10:200])
np.save("fortran.npy", np.asfortranarray(rng.standard_normal((60, 5))))
np.save("struct.npy", np.zeros(60, dtype=[("a", "<f4"), ("b", "<i4")]))
np.save("complex.npy", np.zeros((60, 2), np.complex64))
np.save("y59.npy", np.zeros(59, np.int64))
np.save("yneg.npy", np.array([0] * 30 + [-1] + [0] * 29))
np.save("yfrac.npy", np.array([0.5] * 60).reshape(60, 1, 1))
np.save("y3d.npy", np.zeros((60, 2, 2), np.int32))
open("ragged.csv", "w").write("1,2,0\n3,4,1\n5,6\n")
open("text.csv", "w").write("a,b,label\n1,2,0\n3,x4,1\n")
open("frac.csv", "w").write("1,2,0\n3,4,1.5\n")
open("bigid.csv", "w").write("1,2,0\n3,4,2147483647\n")
open("empty.csv", "w").write("a,b,c\n\n")
open("nan.csv", "w").write("1,2,0\n1,nan,0\n")
rec = np.fromfile("cifar/data_batch_1.bin", np.uint8)
rec[:3073 * 3 - 5].tofile("short.bin")
bad_label = rec.reshape(-1, 3073).copy(); bad_label[4, 0] = 12; bad_label.tofile("label.bin")
PY
bad "trunc.npy: truncated: the header promises 2880 bytes of data, the file holds 2870" pack --from npy trunc.npy yi64.npy -o o/out.h5
bad "magic.npy: not a .npy file \(wrong magic" pack --from npy magic.npy yi64.npy -o o/out.h5
bad "hdr.npy: truncated .npy header" pack --from npy hdr.npy yi64.npy -o o/out.h5
bad "fortran.npy: the array is in Fortran order" pack --from npy fortran.npy yi64.npy -o o/out.h5
bad "struct.npy: dtype .* is not supported \(structured" pack --from npy struct.npy yi64.npy -o o/out.h5
bad "complex.npy: dtype '<c8' is not supported" pack --from npy complex.npy yi64.npy -o o/out.h5
bad "xu8.npy: 60 samples but 59 labels/targets" pack --from npy xu8.npy y59.npy -o o/out.h5
bad "yneg.npy: label -1 at row 30 is not a class id" pack --from npy xu8.npy yneg.npy -o o/out.h5
bad "yfrac.npy: y must be N class ids \(integers\) or N x k float targets, got shape 60x1x1" pack --from npy xu8.npy yfrac.npy -o o/out.h5
bad "y3d.npy: y must be N class ids" pack --from npy xu8.npy y3d.npy -o o/out.h5
bad "yi64.npy: label [34] at row [0-9]+ is not a class id in \[0, 3\)" pack --from npy xu8.npy yi64.npy --classes 3 -o o/out.h5
bad "pack --from npy: the training set needs 2 files" pack --from npy xu8.npy -o o/out.h5
bad "no-such.npy: cannot open \(No such file or directory\)" pack --from npy no-such.npy yi64.npy -o o/out.h5
bad "ragged.csv:3: 2 cells, expected 3 \(every row needs the same number of columns" pack --from csv ragged.csv -o o/out.h5
bad "text.csv:3: column 'b' 'x4' is not a finite number" pack --from csv text.csv -o o/out.h5
bad "nan.csv:2: column 1 'nan' is not a finite number" pack --from csv nan.csv -o o/out.h5
bad "frac.csv:2: label '1.5' \(column 2\) is not a class id" pack --from csv frac.csv -o o/out.h5
bad "bigid.csv: label 2147483647 at row 1 is not a class id in \[0, 2147483646\]" pack --from csv bigid.csv -o o/out.h5
bad "empty.csv: no data rows" pack --from csv empty.csv -o o/out.h5
bad "h.csv: --label-col nope is neither a header name nor a column index 0..3" pack --from csv h.csv --label-col nope -o o/out.h5
bad "short.bin: 9214 bytes is not a whole number of 3073-byte CIFAR-10 records" pack --from cifar10-bin short.bin -o o/out.h5
bad "label.bin: label 12 at record 4 is not a CIFAR-10 class 0-9" pack --from cifar10-bin label.bin -o o/out.h5
bad "o: no data_batch_1.bin" pack --from cifar10-bin o -o o/out.h5
bad "val samples are 3x4x4 uint8 but train samples \(xf64.npy\) are 7 float32" pack --from npy xf64.npy yf32.npy --val vx.npy vy.npy -o o/out.h5
bad "give --val or --val-fraction, not both" pack --from npy xu8.npy yi64.npy --val vx.npy vy.npy --val-fraction 0.1 -o o/out.h5
bad "--delimiter expects one character" pack --from csv h.csv --delimiter ab -o o/out.h5
echo precious > keep.h5
expect_exit 2 "^hpcdata: output keep.h5 exists \(use --force" "$H" synth -o keep.h5 --samples 10
[ "$(cat keep.h5)" = precious ] || fail "existing output modified without --force"
bad "synth: unknown option --frob" synth -o o/out.h5 --frob
bad "--shape expects an integer >= 1, got '0'" synth -o o/out.h5 --shape 3x0x4
bad "--dtype expects uint8 or float32" synth -o o/out.h5 --dtype int8
bad "data file 'no-such.h5': no such file" repack no-such.h5 o/out.h5
bad "data file 'h.csv': not an HDF5 file" repack h.csv o/out.h5
bad "usage: hpcdata repack IN OUT" repack messy.h5
$PYTHON -c "
import h5py, numpy as np
with h5py.File('badlabel.h5', 'w') as f:
    f['train/x'] = np.zeros((4, 2), np.float32); f['train/y'] = np.array([0, 1, 5, 1], np.int32)
    f['train/y'].attrs['num_classes'] = 3
"
bad "badlabel.h5': /train/y: label 5 at sample 2 is outside \[0, 3\)" repack badlabel.h5 o/out.h5
if [ "$(id -u)" -eq 0 ]; then ro=/proc/self; else mkdir ro && chmod 555 ro; fi
bad "output directory .* is not writable" synth -o "${ro:-ro}/out.h5" --samples 10
echo "all hpcdata format checks passed"
