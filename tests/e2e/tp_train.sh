#!/usr/bin/env bash
# ctest-timeout: 900
# Tensor parallelism (dist.tp) trains what the unsplit model trains:
#   1. gpt-tiny (4 heads) with AdamW, clipping (clip_norm low enough to clip every
#      step), dropout off: tp 2 and tp 4, and tp 2 and 4 with sequence parallelism,
#      give tp 1's losses and grad_norms over 50 steps within 1e-5 relative, and its
#      final parameters and optimizer state; a tp 2 run repeated is bitwise itself;
#      a Llama (grouped kv heads, untied head) at tp 2 the same;
#   2. dp 2 × tp 2 on 4 ranks = dp 1 × tp 2 on 2 ranks with twice the batch, with
#      dist.zero 0, 1 and 2 (and zero 1, 2 = zero 0 bitwise);
#   3. resume across grids: a dp 2 × tp 2 run stopped by SIGUSR1 (exit 75) and
#      resumed at tp 1 × dp 2 and at tp 4 ends where the uninterrupted run does;
#      the checkpoint holds the unsplit model: export --format hf of a tp 2 run
#      equals that of the tp 1 run;
#   4. bad input, one line and exit 2 each.
# Float32 in summation order only: the split changes how the GEMMs' sums are cut
# (≈1e-7 relative per step); 1e-5 leaves a margin of 100, while a wrong split, a
# missing reduction or a misplaced bias moves the losses by 1e-3 or more. (At lr 3e-3
# this model has a loss spike near step 17 — grad_norm 13 — that magnifies the
# rounding to 8e-5 for one step; lr 1e-3 stays well conditioned: ≤ 1e-7 per step,
# ≤ 1.5e-6 in the final state, observed.)
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
export OMP_NUM_THREADS=1
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || skip "no $text (Debian base-files)"
"$BUILD/hpcdata" pack --from text "$text" --val-fraction 0 -o "$TMP/gpl.h5" > /dev/null || fail "pack"

col() { grep -oP "\"$2\": \K[^,}]*" "$1/metrics.jsonl"; }
ckpt_of() { ls "$1"/ckpt-*.h5 | tail -1; }
# close A B TOL: every logged loss and grad_norm, and the final checkpoint's flat state, of runs A and
# B agree within TOL relative (the state: its largest difference against its largest value).
close() {
  "$PYTHON" - "$1" "$2" "$3" "$(ckpt_of "$1")" "$(ckpt_of "$2")" <<'PY'
import json, sys, h5py, numpy as np
a, b, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
def rows(d):
    return [json.loads(l) for l in open(d + "/metrics.jsonl") if '"grad_norm"' in l]
ra, rb = rows(a), rows(b)
if len(ra) != len(rb) or not ra:
    sys.exit(f"{len(ra)} vs {len(rb)} step records")
worst = 0.0
for x, y in zip(ra, rb):
    for k in ("loss", "grad_norm"):
        worst = max(worst, abs(x[k] - y[k]) / max(abs(x[k]), 1e-30))
fa, fb = (h5py.File(p, "r") for p in sys.argv[4:6])
names = ["params_flat"] + ["optimizer/" + k for k in fa["optimizer"]]
state = 0.0
for n in names:
    x, y = np.asarray(fa[n], np.float64), np.asarray(fb[n], np.float64)
    if x.shape != y.shape:
        sys.exit(f"{n}: {x.shape} vs {y.shape}")
    state = max(state, np.abs(x - y).max() / max(np.abs(x).max(), 1e-30))
if worst > tol or state > tol:
    sys.exit(f"steps {worst:.2e}, state {state:.2e} relative (tolerance {tol:g})")
print(f"{len(ra)} steps to {worst:.1e}, {len(names)} state datasets to {state:.1e}")
PY
}
train() {  # NAME RANKS args…
  local name=$1 n=$2; shift 2
  run_mpi "$n" "$hp" "$@" --log.every 1 --log.progress plain --ckpt.keep 1 --run.dir "$TMP/$name" \
    > "$TMP/$name.log" 2>&1 || { tail -30 "$TMP/$name.log"; fail "$name: training on $n ranks"; }
}

gpt=(--data.path "$TMP/gpl.h5" --model.preset gpt-tiny --model.heads 4 --optim.name adamw --optim.lr 1e-3
     --optim.clip_norm 0.5 --optim.weight_decay 0.1 --train.batch_size 4 --train.steps 50)

# ---- 1. tp 2, 4 (and sequence parallel) = tp 1 -------------------------------------------
train g-tp1 1 "${gpt[@]}"
train g-tp2 2 "${gpt[@]}" --dist.tp 2
grep -q "^tensor parallel: tp 2: this rank holds" "$TMP/g-tp2.log" || { cat "$TMP/g-tp2.log"; fail "no tensor-parallel line"; }
grep -q "vocabulary 256 padded to 256 (128 per rank" "$TMP/g-tp2.log" || fail "the vocabulary split is not said"
awk '$1 > 0.5 { c++ } END { exit !(c > 0) }' <(col "$TMP/g-tp1" grad_norm) || fail "gpt: never clipped"
for run in g-tp2:"--dist.tp 2" g-tp4:"--dist.tp 4" g-sp2:"--dist.tp 2 --dist.sequence_parallel true" \
  g-sp4:"--dist.tp 4 --dist.sequence_parallel true"; do
  name=${run%%:*}
  # shellcheck disable=SC2086
  [ -d "$TMP/$name" ] || train "$name" "$(grep -oP 'tp \K[0-9]' <<< "${run#*:}")" "${gpt[@]}" ${run#*:}
  r=$(close "$TMP/g-tp1" "$TMP/$name" 1e-5) || fail "$name vs tp 1: $r"
  pass "gpt-tiny $name = tp 1: $r"
done
train g-tp2-again 2 "${gpt[@]}" --dist.tp 2
r=$(close "$TMP/g-tp2" "$TMP/g-tp2-again" 0) || fail "tp 2 run to run: $r"
pass "tp 2 run to run: bitwise ($r)"

llama=(--data.path "$TMP/gpl.h5" --model.preset llama-tiny --optim.name adamw --optim.lr 1e-3 --optim.clip_norm 0.5
       --train.batch_size 4 --train.steps 30)
train l-tp1 1 "${llama[@]}"
train l-tp2 2 "${llama[@]}" --dist.tp 2
# The Llama's final state is held to 3e-5: one weight of a SwiGLU down projection ends 9e-6
# (of the largest parameter) apart after 30 steps, observed; its gradient is near zero, and Adam's
# normalised step turns that gradient's rounding into steps of up to lr. Losses and norms: ≤ 1e-6.
r=$(close "$TMP/l-tp1" "$TMP/l-tp2" 3e-5) || fail "llama tp 2 vs tp 1: $r"
pass "llama-tiny (4 heads, 2 kv heads, untied head) tp 2 = tp 1: $r"

# ---- 2. dp 2 × tp 2 = dp 1 × tp 2 with twice the batch, ZeRO 0, 1, 2 ---------------------------
short=(--data.path "$TMP/gpl.h5" --model.preset gpt-tiny --model.heads 4 --optim.name adamw --optim.lr 1e-3
       --optim.clip_norm 0.5 --train.steps 20 --ckpt.every_steps 10)
train d1t2 2 "${short[@]}" --dist.tp 2 --train.batch_size 8
for z in 0 1 2; do
  train "d2t2-z$z" 4 "${short[@]}" --dist.tp 2 --train.batch_size 4 --dist.zero $z
  r=$(close "$TMP/d1t2" "$TMP/d2t2-z$z" 1e-5) || fail "dp 2 × tp 2, zero $z vs dp 1 × tp 2: $r"
  pass "dp 2 × tp 2 (zero $z) = dp 1 × tp 2 with twice the batch: $r"
done
grep -q "ZeRO stage 2" "$TMP/d2t2-z2.log" || fail "zero 2 does not say it is sharded"
for z in 1 2; do
  r=$(close "$TMP/d2t2-z0" "$TMP/d2t2-z$z" 0) || fail "dp 2 × tp 2: zero $z vs zero 0: $r"
done
pass "dp 2 × tp 2: zero 1 and 2 = zero 0 bitwise"

# ---- 3. resume across grids ------------------------------------------------------------------
stop=$TMP/stop
HPCTRAIN_FAULT=sigusr1@step_end:1:7 run_mpi 4 -x HPCTRAIN_FAULT "$hp" "${short[@]}" --dist.tp 2 \
  --train.batch_size 4 --log.every 1 --log.progress plain --run.dir "$stop" > "$TMP/stop.log" 2>&1 && rc=0 || rc=$?
[ "$rc" -eq 75 ] || { tail -20 "$TMP/stop.log"; fail "SIGUSR1 at dp 2 × tp 2: exit $rc, expected 75"; }
ck=$(ckpt_of "$stop")
for grid in "2 --dist.tp 1 --train.batch_size 4" "4 --dist.tp 4 --train.batch_size 8"; do
  n=${grid%% *}
  tag=$(grep -oP 'tp \K[0-9]' <<< "$grid")
  rm -rf "$TMP/resume-$tag" && mkdir -p "$TMP/resume-$tag" && cp "$stop"/metrics.jsonl "$ck" "$TMP/resume-$tag/"
  # shellcheck disable=SC2086
  run_mpi "$n" "$hp" "${short[@]}" ${grid#* } --resume auto --log.every 1 --log.progress plain \
    --run.dir "$TMP/resume-$tag" > "$TMP/resume-$tag.log" 2>&1 || { tail -20 "$TMP/resume-$tag.log"; fail "resume at tp $tag"; }
  grep -q "resumed from .*: step 7 of 20" "$TMP/resume-$tag.log" || { cat "$TMP/resume-$tag.log"; fail "tp $tag: not resumed at step 7"; }
  r=$(close "$TMP/d2t2-z0" "$TMP/resume-$tag" 1e-5) || fail "stopped at dp 2 × tp 2, resumed at tp $tag: $r"
  pass "stopped (SIGUSR1, exit 75) at dp 2 × tp 2, resumed on $n ranks at tp $tag: ends as the uninterrupted run ($r)"
done

for t in 1 2; do
  timeout -k 10 60 "$hp" export --checkpoint "$(ckpt_of "$TMP/g-tp$t")" --format hf -o "$TMP/hf-tp$t" \
    > "$TMP/hf-tp$t.log" 2>&1 || { cat "$TMP/hf-tp$t.log"; fail "export of the tp $t run"; }
done
# same_export A B: two exported model.safetensors agree within 1e-5 (the largest difference against
# the largest value, as for the checkpoints).
same_export() {
  "$PYTHON" - "$1" "$2" <<'PY'
import json, struct, sys, numpy as np
def load(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], {"F32": np.float32}[v["dtype"]]).reshape(v["shape"])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), "different tensors"
assert all(a[k].shape == b[k].shape for k in a), "different shapes"
err = max(np.abs(a[k].astype(np.float64) - b[k]).max() for k in a) / max(np.abs(a[k]).max() for k in a)
assert err < 1e-5, f"{err:.2e}"
print(f"{len(a)} tensors to {err:.1e}")
PY
}
r=$(same_export "$TMP/hf-tp1/model.safetensors" "$TMP/hf-tp2/model.safetensors") || fail "the exported models differ: $r"
pass "export --format hf of the tp 2 run = that of the tp 1 run: $r"

# ---- 4. bad input --------------------------------------------------------------------------
bad() {  # RANKS PATTERN args…: one line naming the problem, exit 2, no run directory
  local n=$1 pattern=$2 rc=0; shift 2
  rm -rf "$TMP/bad"
  run_mpi "$n" "$hp" "$@" --run.dir "$TMP/bad" > "$TMP/bad.log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { cat "$TMP/bad.log"; fail "'$*': exit $rc, expected 2"; }
  grep -qE "$pattern" "$TMP/bad.log" || { cat "$TMP/bad.log"; fail "'$*': no '$pattern'"; }
  [ ! -e "$TMP/bad/metrics.jsonl" ] || fail "'$*': a run was written"
}
bad 3 "dist.tp 2 .*does not divide|divide" "${gpt[@]}" --dist.tp 2
bad 2 "heads" "${gpt[@]}" --model.heads 3 --model.width 48 --dist.tp 2
bad 4 "kv.heads|kv_heads" "${llama[@]}" --dist.tp 4
bad 2 "layer 0 'linear|cannot be split" --data.path "$(mnist_h5)" --model.preset mlp --dist.tp 2
bad 1 "sequence_parallel" "${gpt[@]}" --dist.sequence_parallel true
bad 2 "context of 63 tokens is not divisible by dist.tp 2" "${gpt[@]}" --dist.tp 2 --dist.sequence_parallel true \
  --model.context 63
bad 2 "dist.zero 3" "${gpt[@]}" --dist.tp 2 --dist.zero 3
pass "bad input: tp not dividing the world, heads and kv heads not divisible, an mlp, sequence parallel at tp 1 or over an indivisible context, zero 3: exit 2 each"
