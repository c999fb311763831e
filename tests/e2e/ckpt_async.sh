#!/usr/bin/env bash
# ctest-timeout: 300
# Asynchronous checkpoints (ckpt.async, the default), on 2 ranks, against the
# synchronous writer (--ckpt.async false). Small runs (tests/e2e/fault_lib.bash):
#   1. the same content: every dataset of every checkpoint bitwise equal, and
#      every attribute equal but the creation time, the checksum over it and
#      the config text's ckpt.async and run.dir lines; a resume from an async checkpoint
#      ends bitwise where the uninterrupted run ends;
#   2. SIGUSR1 while a write is in flight (the step-10 write made slow with
#      sleep=2000@ckpt_write, the signal raised after step 12): the log says it
#      waited for that write, which completes; the final checkpoint of step 12
#      is written, every rank exits 75, the resume from 12 is bit-exact;
#   3. kill -9 of rank 0 half-way through the background step-20 write: step 10
#      is valid, no file of step 20 under its name, --resume auto picks step 10
#      and ends bitwise where the uninterrupted run ends;
#   4. ENOSPC in the background writer (a slow write that then fails at its
#      close; steps of 40 ms): the documented line and exit 74 at a step
#      boundary before the end (step 21..29), no
#      step runs after the one it names, no temporary or damaged file.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/fault_lib.bash"
straight_run
grep -qE "in the background, training stalled [0-9.]+ s\)$" "$TMP/straight.log" || { cat "$TMP/straight.log"; fail "no background write in the default run"; }

# ---- 1. async = sync, byte for byte in content ---------------------------------------
fault_run sync "" --ckpt.async false
expect_rc sync 0
! grep -q "in the background" "$TMP/sync.out" || fail "ckpt.async false wrote in the background"
for s in 10 20 30; do
  "$PYTHON" - "$(printf '%s/ckpt-%08d.h5' "$TMP/straight" $s)" "$(printf '%s/ckpt-%08d.h5' "$TMP/sync" $s)" <<'PY' ||
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
def walk(f):
    out = {}
    f.visititems(lambda n, o: out.__setitem__(n, o))
    return out
na, nb = walk(a), walk(b)
assert sorted(na) == sorted(nb), (sorted(set(na) ^ set(nb)))
def attrs(o):
    d = dict(o.attrs)
    for k in ("created_unix", "checksum"): d.pop(k, None)
    if "config" in d:
        d["config"] = "\n".join(l for l in str(d["config"]).splitlines() if not l.startswith(("async =", "dir =")))
    return d
def same(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
for n in sorted(na):
    if isinstance(na[n], h5py.Dataset):
        assert same(na[n][...], nb[n][...]), n
    ka, kb = attrs(na[n]), attrs(nb[n])
    assert sorted(ka) == sorted(kb) and all(same(ka[k], kb[k]) for k in ka), n
ka, kb = attrs(a), attrs(b)
assert sorted(ka) == sorted(kb), (sorted(ka), sorted(kb))
for k in ka: assert same(ka[k], kb[k]), k
print(f"{len(na)} objects equal")
PY
    fail "step $s: the async checkpoint differs from the synchronous one"
done
pass "async checkpoints of steps 10, 20, 30 = the synchronous ones: every dataset bitwise, every attribute"
mkdir -p "$TMP/from10" && cp "$TMP/straight/ckpt-00000010.h5" "$TMP/from10/"
resume_matches from10 10
pass "resumed from the async step-10 checkpoint: bitwise the uninterrupted result"

# ---- 2. SIGUSR1 while the step-10 write is in flight --------------------------------
fault_run usr1 "sleep=2000@ckpt_write:0:10,sigusr1@step_end:0:12"
expect_rc usr1 75
every_rank_exits usr1 75
grep -qE "^checkpoint: waited [0-9.]+ s for the step-10 write in flight$" "$TMP/usr1.out" ||
  { cat "$TMP/usr1.out"; fail "usr1: the stop did not wait for the write in flight"; }
grep -q "^stopped after step 12 on all 2 rank(s), checkpoint written: exit 75 (requeue)$" "$TMP/usr1.out" ||
  { cat "$TMP/usr1.out"; fail "usr1: no final checkpoint at step 12"; }
[ -f "$TMP/usr1/ckpt-00000010.h5" ] && [ -f "$TMP/usr1/ckpt-00000012.h5" ] || { ls "$TMP/usr1"; fail "usr1: a checkpoint is missing"; }
resume_matches usr1 12
pass "SIGUSR1 during the background step-10 write: it completed, step 12 written, exit 75 on both ranks, bit-exact resume"

# ---- 3. kill -9 during the background step-20 write -------------------------------------
fault_run kill "exit@ckpt_write:0:20"
[ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] || fail "kill: exit $rc"
grep -q "killing myself (SIGKILL) in ckpt_write, step 20" "$TMP/kill.err" || { cat "$TMP/kill.err"; fail "kill: the fault did not fire"; }
[ ! -e "$TMP/kill/ckpt-00000020.h5" ] || fail "kill: a half-written checkpoint appeared under its name"
ls "$TMP/kill" | grep -q '^ckpt-00000020.h5.tmp-' || { ls "$TMP/kill"; fail "kill: the kill did not land in the write"; }
resume_matches kill 10
pass "kill -9 during the background step-20 write: step 10 valid, --resume auto picked it, bitwise the uninterrupted end"

# ---- 4. ENOSPC in the background writer ---------------------------------------------------
fault_run nospc "sleep=150@ckpt_write:0:20,enospc@ckpt_close:0:20,sleep=40@step_end:*:20"
expect_rc nospc 74
every_rank_exits nospc 74
expect_err nospc "^hpctrain: error on rank 0: cannot write checkpoint $TMP/nospc/ckpt-00000020.h5: no space left on device \(ENOSPC\); stopping after step (2[1-9]) \(the last one, $TMP/nospc/ckpt-00000010.h5, is intact\)$"
stopped=$(grep -oP 'stopping after step \K[0-9]+' "$TMP/nospc.err")
last_row=$(awk '$1 == 0 && $2 ~ /^[0-9]+$/ {s = $2} END {print s + 0}' "$TMP/nospc.out")
[ "$last_row" -le "$stopped" ] || fail "nospc: step $last_row ran after the error at step $stopped"
[ ! -e "$TMP/nospc/ckpt-00000020.h5" ] || fail "nospc: the failed checkpoint appeared"
no_leftovers "$TMP/nospc"
"$PYTHON" -c "import h5py,sys; h5py.File(sys.argv[1],'r')['params_flat'][...]" "$TMP/nospc/ckpt-00000010.h5" ||
  fail "nospc: the step-10 checkpoint is unreadable"
pass "ENOSPC in the background step-20 write: exit 74 at step $stopped's boundary, $(grep -m1 -o 'no space left.*' "$TMP/nospc.err")"
