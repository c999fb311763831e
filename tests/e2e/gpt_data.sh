#!/usr/bin/env bash
# ctest-timeout: 180
# Language-model data end to end:
#   * hpcdata pack --from text: the tokens are the files' bytes in order (checked
#     with h5py against the files), uint16, contiguous and 4 KiB-aligned, with
#     vocab_size=256 and tokenizer=byte; /val is the last fraction (at least one
#     window), or the --val files; inspect shows token splits;
#   * every bad input exits 2 with one "hpcdata:" line and leaves no output;
#   * hpctrain refuses mismatched data and models with one line, exit 2 (a
#     gpt preset on image data, a classifier on tokens, a context longer
#     than the text, a token outside the vocabulary);
#   * the other tools understand token files: hpcdata repack (chunked + gzip →
#     contiguous, same tokens and attributes; a bad file refused), hpctrain
#     doctor (a token line per split), and an EIO reading mapped tokens
#     (HPCTRAIN_FAULT eio@data_read) ends in exit 74 naming the windows.
source "$(dirname "$0")/lib.bash"
H="$BUILD/hpcdata"
hp="$BUILD/hpctrain"
[ -x "$H" ] && [ -x "$hp" ] || fail "$H or $hp not built"
lic=/usr/share/common-licenses
[ -f "$lic/GPL-3" ] && [ -f "$lic/BSD" ] || skip "no texts in $lic"

# ---- pack: tokens = bytes, the last 5% is /val
"$H" pack --from text "$lic/BSD" "$lic/GPL-3" -o "$TMP/t.h5" > "$TMP/pack.out" || fail "pack failed"
grep -q "wrote $TMP/t.h5: train .* tokens, val .* tokens (uint16, byte-level tokenizer, vocabulary 256) from 2 files" \
  "$TMP/pack.out" || { cat "$TMP/pack.out"; fail "pack summary"; }
pass "$(cat "$TMP/pack.out")"
$PYTHON - "$TMP/t.h5" "$lic/BSD" "$lic/GPL-3" <<'PY' || fail "packed tokens differ from the text or the layout"
import sys
import h5py, numpy as np
path, *texts = sys.argv[1:]
data = b"".join(open(t, "rb").read() for t in texts)
with h5py.File(path, "r") as f:
    tr, va = f["train/tokens"], f["val/tokens"]
    assert tr.dtype == np.uint16 and va.dtype == np.uint16, (tr.dtype, va.dtype)
    assert tr.ndim == 1 and va.ndim == 1
    n_val = max(65, round(0.05 * len(data)))  # default --val-fraction 0.05, at least a window of 64 + 1
    assert len(va) == n_val and len(tr) + len(va) == len(data), (len(tr), len(va), len(data))
    assert bytes(np.concatenate([tr[:], va[:]]).astype(np.uint8)) == data, "tokens are not the bytes"
    for d in (tr, va):
        assert d.attrs["vocab_size"] == 256 and d.attrs["tokenizer"] in (b"byte", "byte"), dict(d.attrs)
        assert d.id.get_offset() % 4096 == 0 and d.chunks is None and d.compression is None
print("ok: tokens are the bytes of both files; val is the last", n_val)
PY

"$H" inspect "$TMP/t.h5" > "$TMP/inspect.out" || { cat "$TMP/inspect.out"; fail "inspect"; }
grep -q "^train: OK, [0-9]* tokens (uint16), vocabulary 256 from the vocab_size attribute of /train/tokens, tokenizer byte" \
  "$TMP/inspect.out" || { cat "$TMP/inspect.out"; fail "inspect does not describe the token split"; }
grep -q "/train/tokens.*mmap: yes.*tokenizer=byte.*vocab_size=256" "$TMP/inspect.out" || { cat "$TMP/inspect.out"; fail "inspect listing"; }
pass "inspect: $(grep '^val:' "$TMP/inspect.out")"

# --val files and --val-fraction 0
"$H" pack --from text "$lic/GPL-3" --val "$lic/BSD" -o "$TMP/v.h5" > /dev/null || fail "pack --val"
"$H" pack --from text "$lic/BSD" --val-fraction 0 -o "$TMP/nv.h5" > /dev/null || fail "pack --val-fraction 0"
$PYTHON - "$TMP/v.h5" "$TMP/nv.h5" "$lic/BSD" <<'PY' || fail "--val files or --val-fraction 0"
import sys
import h5py
v, nv, bsd = sys.argv[1:]
with h5py.File(v, "r") as f:
    assert bytes(f["val/tokens"][:].astype("u1")) == open(bsd, "rb").read()
with h5py.File(nv, "r") as f:
    assert "val" not in f and len(f["train/tokens"]) == len(open(bsd, "rb").read())
PY
pass "--val FILE is /val; --val-fraction 0 keeps everything for training"

# ---- bad inputs: one line, exit 2, nothing left behind
printf '' > "$TMP/empty.txt"
printf 'short text' > "$TMP/short.txt"
expect_exit 2 "^hpcdata: $TMP/nope.txt: cannot open \(No such file or directory\)$" "$H" pack --from text "$TMP/nope.txt" -o "$TMP/o.h5"
expect_exit 2 "^hpcdata: pack --from text: no text" "$H" pack --from text "$TMP/empty.txt" -o "$TMP/o.h5"
expect_exit 2 "^hpcdata: pack --from text: 10 bytes of text is too short for one training window of 65 tokens" \
  "$H" pack --from text "$TMP/short.txt" --val-fraction 0 -o "$TMP/o.h5"
expect_exit 2 "too short for a training and a validation window of 1001 tokens.*--val-fraction 0" \
  "$H" pack --from text "$lic/BSD" --context 1000 -o "$TMP/o.h5"
expect_exit 2 "^hpcdata: $lic: is a directory" "$H" pack --from text "$lic" -o "$TMP/o.h5"
expect_exit 2 "^hpcdata: output directory $TMP/no/such/dir does not exist" "$H" pack --from text "$lic/BSD" -o "$TMP/no/such/dir/o.h5"
expect_exit 2 "^hpcdata: output $TMP/t.h5 exists \(use --force" "$H" pack --from text "$lic/BSD" -o "$TMP/t.h5"
expect_exit 2 "^hpcdata: --val-fraction must be in \[0, 1\)" "$H" pack --from text "$lic/BSD" --val-fraction 1 -o "$TMP/o.h5"
expect_exit 2 "^hpcdata: --context applies to pack --from text and tokens-bin only" "$H" pack --from csv "$lic/BSD" --context 8 -o "$TMP/o.h5"
[ ! -e "$TMP/o.h5" ] && [ -z "$(ls "$TMP" | grep tmp-)" ] || fail "a failed pack left a file behind: $(ls "$TMP")"
pass "no output or temp file after the failures"

# ---- hpctrain: data and model must match (one line, exit 2, before training)
common=(--train.steps 2 --train.batch_size 4 --log.progress none --run.dir "$TMP/run")
if [ -f "$ROOT/../shared/data/mnist-sample/train-images-idx3-ubyte.gz" ]; then
  expect_exit 2 "model.preset gpt-tiny is a language model, but data file '.*' holds no /train/tokens: make one with .hpcdata pack --from text" \
    "$hp" --data.path "$(mnist_h5)" --model.preset gpt-tiny "${common[@]}"
fi
expect_exit 2 "holds tokens \(/train/tokens\) but model preset cnn is not a language model" \
  "$hp" --data.path "$TMP/t.h5" --model.preset cnn "${common[@]}"
expect_exit 2 "/val/tokens holds 1832 tokens, fewer than one window of 2049 \(model.context 2048 \+ 1\)" \
  "$hp" --data.path "$TMP/t.h5" --model.preset gpt-tiny --model.context 2048 "${common[@]}"
$PYTHON - "$TMP/bad.h5" <<'PY'
import sys
import h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    t = np.frombuffer(b"hello world, " * 20, np.uint8).astype(np.uint16)
    t[100] = 300
    f.create_dataset("train/tokens", data=t).attrs["vocab_size"] = 256
with h5py.File(sys.argv[1].replace("bad", "novocab"), "w") as f:
    f.create_dataset("train/tokens", data=t)  # no vocab_size: the vocabulary is the largest token + 1
PY
expect_exit 2 "data file '$TMP/bad.h5': /train/tokens: token 300 at index 100 is outside \[0, 256\)" \
  "$hp" --data.path "$TMP/bad.h5" --model.preset gpt-tiny --model.context 16 "${common[@]}"
expect_exit 2 "the data has 301 token ids but model.vocab is 256" \
  "$hp" --data.path "$TMP/novocab.h5" --model.preset gpt-tiny --model.context 16 "${common[@]}"

# ---- token files in the other tools: repack, doctor, the data_read fault hook
$PYTHON - "$TMP/t.h5" "$TMP/tchunked.h5" <<'PY'
import sys
import h5py
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "w") as b:
    for split in ("train", "val"):
        d = a[split]["tokens"]
        b.create_dataset(f"{split}/tokens", data=d[:], chunks=(1000,), compression="gzip").attrs.update(d.attrs)
PY
"$H" repack "$TMP/tchunked.h5" "$TMP/trepacked.h5" > "$TMP/repack.out" || { cat "$TMP/repack.out"; fail "repack of a token file"; }
grep -q "repack: /train/tokens (chunked, filters: deflate) → contiguous" "$TMP/repack.out" || { cat "$TMP/repack.out"; fail "repack report"; }
$PYTHON - "$TMP/t.h5" "$TMP/trepacked.h5" <<'PY' || fail "repacked tokens differ or are not contiguous"
import sys
import h5py, numpy as np
with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
    for split in ("train", "val"):
        x, y = a[split]["tokens"], b[split]["tokens"]
        assert y.dtype == np.uint16 and np.array_equal(x[:], y[:]), split
        assert y.chunks is None and y.compression is None and y.id.get_offset() % 4096 == 0, split
        assert y.attrs["vocab_size"] == 256 and y.attrs["tokenizer"] in (b"byte", "byte"), dict(y.attrs)
PY
pass "repack: a chunked + gzip token file → contiguous, same tokens and attributes"
expect_exit 2 "data file '$TMP/bad.h5': /train/tokens: token 300 at index 100 is outside \[0, 256\)" \
  "$H" repack "$TMP/bad.h5" "$TMP/never.h5"
[ ! -e "$TMP/never.h5" ] || fail "repack of a bad token file left an output"

"$hp" doctor --data.path "$TMP/t.h5" --run.dir "$TMP/drun" > "$TMP/doctor.out" 2>&1 || { cat "$TMP/doctor.out"; fail "doctor on a token file"; }
grep -Eq "^  /train +[0-9]+ tokens of uint16, vocabulary 256, memory-mapped" "$TMP/doctor.out" || { cat "$TMP/doctor.out"; fail "doctor: /train token line"; }
grep -Eq "^  /val +[0-9]+ tokens of uint16, vocabulary 256, memory-mapped" "$TMP/doctor.out" || { cat "$TMP/doctor.out"; fail "doctor: /val token line"; }
pass "doctor: $(grep -E '^  /train ' "$TMP/doctor.out" | sed 's/^ *//')"

rc=0
HPCTRAIN_FAULT="eio@data_read:0:3" timeout 60 "$hp" --data.path "$TMP/t.h5" --model.preset gpt-tiny --model.context 16 \
  --train.steps 40 --train.batch_size 4 --log.progress none --run.dir "$TMP/eio" > "$TMP/eio.out" 2> "$TMP/eio.err" || rc=$?
[ $rc -eq 74 ] || { cat "$TMP/eio.out" "$TMP/eio.err"; fail "EIO on a token file: exit $rc, want 74"; }
# (the loader reads ahead: the failing read may be a later training batch or the evaluation's)
grep -Eq "^hpctrain: error.*data file '$TMP/t.h5': /(train|val)/tokens: reading 4 windows \(tokens [0-9]+ to [0-9]+\) failed: Input/output error \(EIO\)$" \
  "$TMP/eio.err" || { cat "$TMP/eio.err"; fail "EIO on a token file: message"; }
pass "EIO reading a mapped token file: exit 74, $(grep -o 'reading .*' "$TMP/eio.err")"
