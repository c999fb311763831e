#!/usr/bin/env bash
# ctest-timeout: 420
# The data pipeline under hpctrain:
#  - a chunked + gzip copy of MNIST (read through H5Dread, with ONE info line
#    pointing at hpcdata repack) trains to bitwise the same losses as its
#    repacked, memory-mapped copy, whatever data.workers / data.prefetch are;
#  - evaluation on 1, 2 and 3 ranks with the same global batch (12 = 12, 2×6,
#    3×4; the 2000 validation samples need masked padding on every world
#    size) gives the same val_loss and val_acc and counts 2000 samples;
#  - files h5py writes in the documented layout train (uint8 with attributes,
#    float32 classification, float32 regression), also with drop_last false;
#  - a dataset smaller than one global batch is one error line, exit 2;
#  - a read error mid-epoch (a corrupted gzip chunk that the quick open-time
#    check does not read) stops the run with one error line, no hang.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
T="$BUILD/hpctrain"
H="$BUILD/hpcdata"
cd "$TMP"
common=(--model.preset mlp --model.hidden 64 --log.progress plain)
losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }

# ---- chunked + gzip vs repacked: identical training
$PYTHON - "$data" <<'PY' || fail "cannot write the chunked copy"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f, h5py.File("chunked.h5", "w") as g:
    for split in ("train", "val"):
        for k in ("x", "y"):
            d = f[split][k]
            c = g.create_dataset(f"{split}/{k}", data=d[:], chunks=(100,) + d.shape[1:], compression="gzip")
            c.attrs.update(d.attrs)
PY
"$H" repack chunked.h5 repacked.h5 > /dev/null || fail "repack failed"
train_cmp() {  # NAME FILE extra…
  local name=$1 file=$2; shift 2
  timeout -k 5 300 "$T" --data.path "$file" "${common[@]}" --train.steps 36 --train.batch_size 32 --log.every 4 \
    --run.dir "$name" "$@" > "$name.log" 2>&1 || { cat "$name.log"; fail "training on $file failed"; }
}
train_cmp chunked chunked.h5
train_cmp repacked repacked.h5
train_cmp repacked_w1 repacked.h5 --data.workers 1 --data.prefetch 1
train_cmp chunked_w4 chunked.h5 --data.workers 4 --data.prefetch 8
[ "$(losses chunked | wc -l)" -eq 9 ] || fail "expected 9 loss records"
for other in repacked repacked_w1 chunked_w4; do
  diff <(losses chunked) <(losses "$other") > /dev/null || { paste <(losses chunked) <(losses "$other"); fail "chunked and $other differ"; }
done
pass "chunked+gzip and repacked files, 1-4 workers, prefetch 1-8: bitwise identical losses over 36 steps"
[ "$(grep -c '^info: data .*not memory-mappable.*slower.*hpcdata repack' chunked.log)" -eq 1 ] ||
  { grep -n info chunked.log; fail "the chunked run must print exactly one info line"; }
grep -q "^info:" repacked.log && fail "the mapped run printed an info line"
grep -q "^loader: 1 worker thread(s), 1 batches ahead, pageable host buffers, data memory-mapped" repacked_w1.log ||
  { grep loader repacked_w1.log; fail "no loader line"; }
pass "one info line for the chunked file (none for the mapped one)"

# ---- distributed evaluation equals single-rank evaluation
for w in 1 2 3; do
  run_mpi $w "$T" --data.path "$data" "${common[@]}" --train.steps 5 --train.batch_size $((12 / w)) --log.every 5 \
    --run.dir "eval$w" > "eval$w.log" 2>&1 || { cat "eval$w.log"; fail "$w-rank run failed"; }
  grep -q "(2000 validation samples)" "eval$w.log" || { grep final "eval$w.log"; fail "$w ranks did not count 2000 samples"; }
done
$PYTHON <<'PY' || fail "distributed evaluation differs from single-rank evaluation"
import json
def val(run):
    rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if "val_loss" in l]
    assert len(rows) == 1, rows
    return rows[0]
one = val("eval1")
for w in (2, 3):
    r = val(f"eval{w}")
    # Same global batch: the weights agree to float rounding (reduction order), so val_loss to 1e-6
    # relative; counting a padding row or missing a sample would move it by ~1e-3 relative.
    assert abs(r["val_loss"] - one["val_loss"]) <= 1e-6 * abs(one["val_loss"]), (w, r, one)
    # ±1 sample of 2000: a borderline argmax may flip under rounding-level weight differences.
    assert abs(r["val_acc"] - one["val_acc"]) <= 1 / 2000 + 1e-12, (w, r, one)
print("val_loss", [val(f"eval{w}")["val_loss"] for w in (1, 2, 3)], "val_acc", [val(f"eval{w}")["val_acc"] for w in (1, 2, 3)])
PY
pass "1, 2 and 3 ranks: same val_loss / val_acc, 2000 samples each"

# ---- files written by h5py in the documented layout train
$PYTHON <<'PY' || fail "cannot write the h5py files"
import h5py, numpy as np
rng = np.random.default_rng(0)
def classes(n, d, k):
    centres = rng.standard_normal((k, d)) * 2
    y = rng.integers(0, k, n)
    return (centres[y] + rng.standard_normal((n, d))).astype(np.float32), y.astype(np.int32)
with h5py.File("py_u8.h5", "w") as f:          # uint8 images with scale/mean/std, int32 labels
    x, y = classes(1000, 3 * 4 * 4, 4)
    for split, sl in (("train", slice(0, 800)), ("val", slice(800, 1000))):
        f[f"{split}/x"] = np.clip(np.round(128 + 32 * x[sl]), 0, 255).astype(np.uint8).reshape(-1, 3, 4, 4)
        f[f"{split}/x"].attrs.update(scale=1 / 32, mean=4.0, std=1.0)
        f[f"{split}/y"] = y[sl]
    f["train/y"].attrs["num_classes"] = 4
with h5py.File("py_f32.h5", "w") as f:         # float32 features, no attributes at all
    x, y = classes(1003, 10, 3)
    f["train/x"], f["train/y"] = x[:900], y[:900]
    f["val/x"], f["val/y"] = x[900:], y[900:]
with h5py.File("py_reg.h5", "w") as f:         # regression: N x 2 float32 targets
    x = rng.standard_normal((600, 8)).astype(np.float32)
    f["train/x"], f["train/y"] = x, (x @ rng.standard_normal((8, 2))).astype(np.float32)
with h5py.File("tiny.h5", "w") as f:
    f["train/x"], f["train/y"] = np.zeros((10, 4), np.float32), np.arange(10, dtype=np.int32) % 2
PY
for f in py_u8 py_f32; do
  timeout -k 5 120 "$T" --data.path $f.h5 "${common[@]}" --train.epochs 8 --train.batch_size 32 --optim.lr 3e-3 \
    --data.drop_last false --run.dir $f > $f.log 2>&1 || { cat $f.log; fail "$f.h5 did not train"; }
  acc=$(final_acc $f.log)
  awk -v a="$acc" 'BEGIN { exit !(a >= 90) }' || { cat $f.log; fail "$f.h5: val_acc $acc% < 90%"; }
  pass "$f.h5 (written by h5py) trains: val_acc $acc%"
done
grep -q "29 steps/epoch" py_f32.log || { grep steps/epoch py_f32.log; fail "drop_last false: 900 samples / 32 must give 29 steps"; }
timeout -k 5 120 "$T" --data.path py_reg.h5 "${common[@]}" --train.epochs 20 --train.batch_size 32 --run.dir py_reg \
  > py_reg.log 2>&1 || { cat py_reg.log; fail "py_reg.h5 did not train"; }
$PYTHON - <<'PY' || fail "regression loss did not fall"
import json
rows = [json.loads(l) for l in open("py_reg/metrics.jsonl") if '"loss"' in l]
assert rows[-1]["loss"] < 0.2 * rows[0]["loss"], (rows[0]["loss"], rows[-1]["loss"])
PY
pass "py_reg.h5 (float32 targets, written by h5py) trains"

# ---- a dataset smaller than one global batch
expect_exit 2 "^hpctrain: error: data file 'tiny.h5': /train has 10 samples, fewer than one global batch of 16 \(16 per rank × 1 rank\)" \
  "$T" --data.path tiny.h5 "${common[@]}" --train.batch_size 16 --run.dir tiny
expect_exit 2 "/train has 10 samples, fewer than one global batch of 12 \(6 per rank × 2 ranks\)" \
  run_mpi 2 "$T" --data.path tiny.h5 "${common[@]}" --train.batch_size 3 --train.accum_steps 2 --run.dir tiny2
[ "$(grep -c 'fewer than one global batch' "$TMP/err")" -eq 1 ] || { cat "$TMP/err"; fail "printed more than once"; }

# ---- a read error in the middle of an epoch: one line, exit 2, no hang
$PYTHON <<'PY' || fail "cannot corrupt a chunk"
import h5py, numpy as np
with h5py.File("chunked.h5", "r") as f:
    info = f["train/x"].id.get_chunk_info_by_coord((7000, 0, 0, 0))
with open("chunked.h5", "r+b") as f:  # samples 7000-7099: never read by the open-time checks
    f.seek(info.byte_offset + info.size // 3)
    f.write(b"\xff" * 64)
PY
expect_exit 2 "^hpctrain: error: data file 'chunked.h5': /train/x: reading rows? 70[0-9][0-9]( to 70[0-9][0-9])? failed \(" \
  timeout -k 5 120 "$T" --data.path chunked.h5 "${common[@]}" --train.epochs 1 --data.workers 3 --run.dir broken
[ "$(wc -l < "$TMP/err")" -le 2 ] || { cat "$TMP/err"; fail "more than the error line on stderr"; }
pass "a read error mid-epoch ends the run with one line"
echo "all data pipeline training checks passed"
