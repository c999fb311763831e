#!/usr/bin/env bash
# ctest-timeout: 300
# hpcdata pack --from tokens-bin: files written here by numpy in nanoGPT's
# raw uint16 layout and in llm.c's headered shard layout pack into
# /train/tokens and /val/tokens that read back equal to what was written
# (both layouts, --val files and --val-fraction), with vocab_size and
# tokenizer attributes; hpctrain trains a GPT on the result. A wrong magic,
# a truncated body, a token >= vocab or an odd-sized raw file: one line, exit 2,
# no output file.
source "$(dirname "$0")/lib.bash"
"$PYTHON" -c 'import h5py, numpy' >/dev/null 2>&1 || skip "$PYTHON cannot import h5py and numpy"
cd "$TMP"
"$PYTHON" - <<'PY'
import numpy as np
rng = np.random.default_rng(0)
train, val = rng.integers(0, 300, 5000).astype(np.uint16), rng.integers(0, 300, 700).astype(np.uint16)
train.tofile("train.bin"); val.tofile("val.bin")                      # nanoGPT: raw uint16
np.save("train.npy", train); np.save("val.npy", val)
def shard(path, tokens, count=None, magic=20240520, version=1):        # llm.c: 256 int32 header + uint16
    header = np.zeros(256, np.int32)
    header[:3] = magic, version, len(tokens) if count is None else count
    with open(path, "wb") as f:
        f.write(header.tobytes()); f.write(tokens.tobytes())
shard("shard_000.bin", train[:3000]); shard("shard_001.bin", train[3000:]); shard("shard_val.bin", val)
shard("short.bin", train[:100], count=200)                             # header says more than the body holds
shard("v2.bin", train[:100], version=2)
big = train.copy(); big[1234] = 300; big.tofile("big.bin")             # a token >= --vocab 300
open("odd.bin", "wb").write(train.tobytes()[:-1])
PY
hd="$BUILD/hpcdata"
"$hd" pack --from tokens-bin train.bin --val val.bin --vocab 300 -o raw.h5 | tee raw.log
grep -q "nanoGPT raw uint16" raw.log || fail "raw layout not recognised"
"$hd" pack --from tokens-bin shard_000.bin shard_001.bin --val shard_val.bin --vocab 300 --tokenizer test -o llmc.h5 | tee llmc.log
grep -q "llm.c shard" llmc.log || fail "llm.c layout not recognised"
"$hd" pack --from tokens-bin train.bin --vocab 300 --val-fraction 0.1 -o frac.h5 > /dev/null
"$PYTHON" - <<'PY' || fail "the packed tokens differ from the files"
import h5py, numpy as np
train, val = np.load("train.npy"), np.load("val.npy")
for path, tok in (("raw.h5", "gpt2"), ("llmc.h5", "test")):
    with h5py.File(path, "r") as f:
        assert np.array_equal(f["train/tokens"][...], train) and np.array_equal(f["val/tokens"][...], val), path
        assert f["train/tokens"].dtype == np.uint16 and f["train/tokens"].attrs["vocab_size"] == 300
        t = f["val/tokens"].attrs["tokenizer"]
        assert (t.decode() if isinstance(t, bytes) else t) == tok, t
with h5py.File("frac.h5", "r") as f:  # /val = the last 10% of the stream
    a, b = f["train/tokens"][...], f["val/tokens"][...]
    assert len(b) == 500 and np.array_equal(np.concatenate([a, b]), train)
print("round trip: both layouts, --val files and --val-fraction")
PY
pass "tokens-bin round trip (nanoGPT raw and llm.c shards)"
timeout -k 10 200 "$BUILD/hpctrain" --data.path llmc.h5 --model.preset gpt-tiny --model.vocab 300 --train.steps 2 \
  --train.batch_size 4 --log.progress none --run.dir run > run.log 2>&1 || { cat run.log; fail "training on packed tokens"; }
pass "hpctrain trains gpt-tiny (vocabulary 300) on the packed shards"

expect_exit 2 "train.bin: wrong magic .* 20240520" "$hd" pack --from tokens-bin train.bin --layout llmc --vocab 300 -o bad1.h5
expect_exit 2 "short.bin: the header counts 200 tokens .*truncated" "$hd" pack --from tokens-bin short.bin --vocab 300 -o bad2.h5
expect_exit 2 "big.bin: token 300 at position 1234 is >= the vocabulary 300" "$hd" pack --from tokens-bin big.bin --vocab 300 -o bad3.h5
expect_exit 2 "odd.bin: .* not a whole number of uint16 ids" "$hd" pack --from tokens-bin odd.bin -o bad4.h5
expect_exit 2 "v2.bin: llm.c header version 2" "$hd" pack --from tokens-bin v2.bin -o bad5.h5
ls bad*.h5* 2>/dev/null && fail "a refused pack left a file behind"
pass "bad token files: one line, exit 2, nothing written"
