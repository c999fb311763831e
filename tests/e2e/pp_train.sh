#!/usr/bin/env bash
# ctest-timeout: 900
# Pipeline parallelism (dist.pp, 1F1B) trains what the unsplit model trains with
# the same micro-batches accumulated (train.micro_batches):
#   1. a 4-block Llama (untied head) at pp 2 and pp 4, and a spec with dropout
#      between the stages at pp 2, give pp 1's losses and final parameters and
#      optimizer state bitwise, and its gradient norms to 1e-12 (the stages' sums
#      of squares add in another order); an explicit dist.pp_split the same; the
#      interleaved schedule (dist.pp_virtual 2) and activation recompute the same;
#      log.trace shows each stage's forwards, backwards, waits and messages;
#      gpt-tiny (tied embedding: its two halves' gradients are summed once per
#      step, not per micro-batch) with clipping within 1e-5;
#   2. dp 2 × pp 2 on 4 ranks = dp 2 × pp 1 on 2 ranks, ZeRO 0, 1 and 2, bitwise; and
#      tp 2 × pp 2 = tp 2 × pp 1 (with and without sequence parallelism) bitwise, and
#      for gpt-tiny's tied embedding within 1e-5;
#   3. resume across grids: stopped by SIGUSR1 (exit 75) at pp 2, resumed at pp 1 on
#      1 rank and at pp 4 on 4 ranks, ends bitwise where the uninterrupted run does;
#      export --format hf works from the pipeline's checkpoint;
#   4. bad input, one line and exit 2 each.
source "$(dirname "$0")/lib.bash"
hp="$BUILD/hpctrain"
export OMP_NUM_THREADS=1
text=/usr/share/common-licenses/GPL-3
[ -f "$text" ] || skip "no $text (Debian base-files)"
"$BUILD/hpcdata" pack --from text "$text" --val-fraction 0.05 -o "$TMP/gpl.h5" > /dev/null || fail "pack"

ckpt_of() { ls "$1"/ckpt-*.h5 | tail -1; }
# compare A B LOSS_TOL NORM_TOL STATE_TOL: the logged losses, grad_norms and evaluations, and the final
# checkpoint's flat state, of runs A and B agree within the relative tolerances (0: bitwise).
compare() {
  "$PYTHON" - "$@" "$(ckpt_of "$1")" "$(ckpt_of "$2")" <<'PY'
import json, sys, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
tol_loss, tol_norm, tol_state = map(float, sys.argv[3:6])
def rows(d, key):
    return [json.loads(l) for l in open(d + "/metrics.jsonl") if f'"{key}"' in l]
def rel(x, y):
    return abs(x - y) / max(abs(x), 1e-30)
ra, rb = rows(a, "grad_norm"), rows(b, "grad_norm")
if len(ra) != len(rb) or not ra:
    sys.exit(f"{len(ra)} vs {len(rb)} step records")
loss = max(rel(x["loss"], y["loss"]) for x, y in zip(ra, rb))
norm = max(rel(x["grad_norm"], y["grad_norm"]) for x, y in zip(ra, rb))
ea, eb = rows(a, "val_loss"), rows(b, "val_loss")
if len(ea) != len(eb):
    sys.exit(f"{len(ea)} vs {len(eb)} evaluations")
loss = max([loss] + [rel(x["val_loss"], y["val_loss"]) for x, y in zip(ea, eb)])
fa, fb = (h5py.File(p, "r") for p in sys.argv[6:8])
names = ["params_flat"] + ["optimizer/" + k for k in fa["optimizer"]]
state = 0.0
for n in names:
    x, y = np.asarray(fa[n], np.float64), np.asarray(fb[n], np.float64)
    if x.shape != y.shape:
        sys.exit(f"{n}: {x.shape} vs {y.shape}")
    state = max(state, np.abs(x - y).max() / max(np.abs(x).max(), 1e-30))
if loss > tol_loss or norm > tol_norm or state > tol_state:
    sys.exit(f"losses {loss:.2e}, grad norms {norm:.2e}, state {state:.2e} relative")
say = lambda v: "bitwise" if v == 0 else f"{v:.1e}"
print(f"{len(ra)} steps, {len(ea)} evaluation(s): losses {say(loss)}, grad norms {say(norm)}, state {say(state)}")
PY
}
train() {  # NAME RANKS args…
  local name=$1 n=$2; shift 2
  run_mpi "$n" "$hp" "$@" --log.every 1 --log.progress plain --ckpt.keep 1 --run.dir "$TMP/$name" \
    > "$TMP/$name.log" 2>&1 || { tail -30 "$TMP/$name.log"; fail "$name: training on $n ranks"; }
}

common=(--data.path "$TMP/gpl.h5" --model.preset llama-tiny --model.layers 4 --optim.name adamw --optim.lr 1e-3
        --optim.weight_decay 0.1 --train.batch_size 8)
bare=("${common[@]}" --train.steps 30)
base=("${common[@]}" --train.micro_batches 4)
llama=("${base[@]}" --train.steps 30)

# ---- 1. pp 2, 4 = pp 1 ------------------------------------------------------------------------
train l-pp1 1 "${llama[@]}"
train l-pp2 2 "${llama[@]}" --dist.pp 2 --log.trace "$TMP/l-pp2.json" --log.trace_steps 3:3
grep -q "^pipeline: 2 stages, 1F1B over 4 micro-batches of 2 per step" "$TMP/l-pp2.log" \
  || { cat "$TMP/l-pp2.log"; fail "no pipeline line"; }
grep -qE "^  stage 1: layers 3–6 \(2 blocks, rmsnorm, lm_head\)" "$TMP/l-pp2.log" || fail "stage 1 is not described"
grep -qE "stage 0/2 \(layers 0–2, 2 in flight, activations [0-9.]+ MiB\)" "$TMP/l-pp2.log" || fail "rank 0 does not say its stage"
r=$(compare "$TMP/l-pp1" "$TMP/l-pp2" 0 1e-12 0) || fail "llama pp 2 vs pp 1: $r"
pass "llama-tiny (4 blocks, untied head) pp 2 = pp 1 with 4 micro-batches: $r"
# The schedule on the timeline: each stage's forward and backward of every micro-batch, its waits on
# the neighbour, and the messages (4 activations 0 → 1, 4 gradients 1 → 0) with their other end.
"$PYTHON" - "$TMP/l-pp2.json" <<'PY' || fail "the trace does not show the pipeline's schedule"
import json, sys
spans = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X" and e["args"]["step"] == 3]
for rank, peer, sent, got in ((0, 1, "send", "recv"), (1, 0, "send", "recv")):
    names = [e["name"] for e in spans if e["pid"] == rank]
    pipe = sorted(e["name"] for e in spans if e["pid"] == rank and e["cat"] == "pipe" and e["name"][0] in "fb")
    assert pipe == sorted([f"forward m{m}" for m in range(4)] + [f"backward m{m}" for m in range(4)]), (rank, pipe)
    waits = [e for e in spans if e["pid"] == rank and e["name"] == "pipeline wait"]
    assert waits, (rank, names)
    for op in (sent, got):
        msgs = [n for n in names if n.startswith(op + " #") and f" rank {peer} of pp[" in n]
        assert len(msgs) == 4, (rank, op, msgs, names)
    print(f"stage {rank}: 4 forwards, 4 backwards, {len(waits)} waits, 4 sends and 4 receives with rank {peer}")
PY
train l-pp4 4 "${llama[@]}" --dist.pp 4
r=$(compare "$TMP/l-pp1" "$TMP/l-pp4" 0 1e-12 0) || fail "llama pp 4 vs pp 1: $r"
pass "llama-tiny pp 4 = pp 1: $r"
train l-split 2 "${llama[@]}" --dist.pp 2 --dist.pp_split 1,3
grep -qE "^  stage 0: layers 0–1 \(embed, 1 block\)" "$TMP/l-split.log" || fail "dist.pp_split 1,3 not followed"
r=$(compare "$TMP/l-pp1" "$TMP/l-split" 0 1e-12 0) || fail "llama pp 2 split 1,3 vs pp 1: $r"
pass "llama-tiny pp 2 cut 1,3 (dist.pp_split) = pp 1: $r"

train l-v2 2 "${llama[@]}" --dist.pp 2 --dist.pp_virtual 2
grep -q "^pipeline: 2 stages, interleaved 1F1B with 2 chunks per stage over 4 micro-batches" "$TMP/l-v2.log" \
  || { cat "$TMP/l-v2.log"; fail "no interleaved pipeline line"; }
grep -qE "stage 0/2 \(layers 0–1, 3, 4\+2 in flight" "$TMP/l-v2.log" || fail "rank 0 does not say its chunks"
r=$(compare "$TMP/l-pp1" "$TMP/l-v2" 0 1e-12 0) || fail "llama pp 2 interleaved vs pp 1: $r"
pass "llama-tiny pp 2, interleaved (2 chunks per stage) = pp 1: $r"
train l-rc 2 "${llama[@]}" --dist.pp 2 --model.recompute true
r=$(compare "$TMP/l-pp1" "$TMP/l-rc" 0 1e-12 0) || fail "llama pp 2 with recompute vs pp 1: $r"
pass "llama-tiny pp 2 with activation recompute = pp 1: $r"

# Dropout between and inside the stages: masks are functions of the whole model's layer index.
spec="embed(256,64,64) block(4,layers=3) dropout(0.2) block(4,layers=3) dropout(0.2) block(4,layers=3) ln lm_head(256,tied=0)"
drop=(--data.path "$TMP/gpl.h5" --model.spec "$spec" --optim.name adamw --optim.lr 1e-3 --train.batch_size 4
      --train.micro_batches 2 --train.steps 20)
train d-pp1 1 "${drop[@]}"
train d-pp2 2 "${drop[@]}" --dist.pp 2
r=$(compare "$TMP/d-pp1" "$TMP/d-pp2" 0 1e-12 0) || fail "dropout spec pp 2 vs pp 1: $r"
pass "a GPT with dropout layers, pp 2 = pp 1: $r"

gpt=(--data.path "$TMP/gpl.h5" --model.preset gpt-tiny --model.heads 4 --optim.name adamw --optim.lr 1e-3
     --optim.clip_norm 0.5 --train.batch_size 4 --train.micro_batches 2 --train.steps 30)
train g-pp1 1 "${gpt[@]}"
train g-pp2 2 "${gpt[@]}" --dist.pp 2
r=$(compare "$TMP/g-pp1" "$TMP/g-pp2" 1e-5 1e-5 1e-5) || fail "gpt-tiny pp 2 vs pp 1: $r"
pass "gpt-tiny (tied embedding, clipping) pp 2 = pp 1 within 1e-5: $r"
train g-v2 2 "${gpt[@]}" --dist.pp 2 --dist.pp_virtual 2 --model.layers 4
train g-v2ref 1 "${gpt[@]}" --model.layers 4
r=$(compare "$TMP/g-v2ref" "$TMP/g-v2" 1e-5 1e-5 1e-5) || fail "gpt-tiny interleaved pp 2 vs pp 1: $r"
pass "gpt-tiny (4 blocks, tied) pp 2 interleaved = pp 1 within 1e-5: $r"

# ---- 2. dp 2 × pp 2 = dp 2 × pp 1, ZeRO 0, 1, 2 ---------------------------------------------
short=("${base[@]}" --train.steps 20 --ckpt.every_steps 10)
train d2p1 2 "${short[@]}"
for z in 0 1 2; do
  train "d2p2-z$z" 4 "${short[@]}" --dist.pp 2 --dist.zero $z
  r=$(compare "$TMP/d2p1" "$TMP/d2p2-z$z" 0 1e-12 0) || fail "dp 2 × pp 2, zero $z vs dp 2 × pp 1: $r"
  pass "dp 2 × pp 2 (zero $z) = dp 2 × pp 1: $r"
done
grep -q "ZeRO stage 2" "$TMP/d2p2-z2.log" || fail "zero 2 does not say it is sharded"
tiny=(--train.micro_batches 4 --train.steps 10)
for sp in false true; do
  train "t2p1-$sp" 2 "${common[@]}" "${tiny[@]}" --dist.tp 2 --dist.sequence_parallel $sp
  train "t2p2-$sp" 4 "${common[@]}" "${tiny[@]}" --dist.tp 2 --dist.pp 2 --dist.sequence_parallel $sp
  r=$(compare "$TMP/t2p1-$sp" "$TMP/t2p2-$sp" 0 1e-12 0) || fail "tp 2 × pp 2 vs tp 2 × pp 1 (sequence parallel $sp): $r"
  pass "llama-tiny tp 2 × pp 2 = tp 2 × pp 1 (sequence parallel $sp): $r"
done
train g-t2p1 2 "${gpt[@]}" --dist.tp 2
train g-t2p2 4 "${gpt[@]}" --dist.tp 2 --dist.pp 2
r=$(compare "$TMP/g-t2p1" "$TMP/g-t2p2" 1e-5 1e-5 1e-5) || fail "gpt-tiny tp 2 × pp 2 vs tp 2 × pp 1: $r"
pass "gpt-tiny (tied, vocabulary split) tp 2 × pp 2 = tp 2 × pp 1 within 1e-5: $r"

# ---- 3. resume across grids --------------------------------------------------------------------
stop=$TMP/stop
HPCTRAIN_FAULT=sigusr1@step_end:1:7 run_mpi 2 -x HPCTRAIN_FAULT "$hp" "${short[@]}" --dist.pp 2 \
  --log.every 1 --log.progress plain --run.dir "$stop" > "$TMP/stop.log" 2>&1 && rc=0 || rc=$?
[ "$rc" -eq 75 ] || { tail -20 "$TMP/stop.log"; fail "SIGUSR1 at pp 2: exit $rc, expected 75"; }
grep -q "stopped after step 7 on all 2 rank(s)" "$TMP/stop.log" || { cat "$TMP/stop.log"; fail "not stopped at step 7"; }
train p1-all 1 "${short[@]}"
ck=$(ckpt_of "$stop")
for n in 1 4; do
  rm -rf "$TMP/resume-$n" && mkdir -p "$TMP/resume-$n" && cp "$stop"/metrics.jsonl "$ck" "$TMP/resume-$n/"
  run_mpi "$n" "$hp" "${short[@]}" --dist.pp "$n" --resume auto --log.every 1 --log.progress plain \
    --run.dir "$TMP/resume-$n" > "$TMP/resume-$n.log" 2>&1 || { tail -20 "$TMP/resume-$n.log"; fail "resume at pp $n"; }
  grep -q "resumed from .*: step 7 of 20" "$TMP/resume-$n.log" || { cat "$TMP/resume-$n.log"; fail "pp $n: not resumed at step 7"; }
  r=$(compare "$TMP/p1-all" "$TMP/resume-$n" 0 1e-12 0) || fail "stopped at pp 2, resumed at pp $n: $r"
  pass "stopped (SIGUSR1, exit 75) at pp 2, resumed at pp $n on $n rank(s): ends as the uninterrupted run ($r)"
done
timeout -k 10 60 "$hp" export --checkpoint "$(ckpt_of "$TMP/l-pp2")" --format hf -o "$TMP/hf-pp2" \
  > "$TMP/hf.log" 2>&1 || { cat "$TMP/hf.log"; fail "export of the pp 2 run"; }
timeout -k 10 60 "$hp" export --checkpoint "$(ckpt_of "$TMP/l-pp1")" --format hf -o "$TMP/hf-pp1" \
  > "$TMP/hf.log" 2>&1 || { cat "$TMP/hf.log"; fail "export of the pp 1 run"; }
cmp -s "$TMP/hf-pp1/model.safetensors" "$TMP/hf-pp2/model.safetensors" || fail "the exported models differ"
pass "export --format hf of the pp 2 run = that of the pp 1 run, byte for byte"

# ---- 4. bad input --------------------------------------------------------------------------
bad() {  # RANKS PATTERN args…: one line naming the problem, exit 2, no run directory
  local n=$1 pattern=$2 rc=0; shift 2
  rm -rf "$TMP/bad"
  run_mpi "$n" "$hp" "$@" --run.dir "$TMP/bad" > "$TMP/bad.log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { cat "$TMP/bad.log"; fail "'$*': exit $rc, expected 2"; }
  grep -qE "$pattern" "$TMP/bad.log" || { cat "$TMP/bad.log"; fail "'$*': no '$pattern'"; }
  [ ! -e "$TMP/bad/metrics.jsonl" ] || fail "'$*': a run was written"
}
bad 2 "micro_batches: 1 is fewer than the 2 pipeline stages" "${bare[@]}" --dist.pp 2
bad 1 "micro_batches: 3 does not divide train.batch_size 8" "${bare[@]}" --train.micro_batches 3
bad 3 "does not divide the world|divide" "${llama[@]}" --dist.pp 2
bad 4 "fewer blocks|blocks" --data.path "$TMP/gpl.h5" --model.spec "embed(256,64,64) block(4) block(4) ln lm_head(256)" \
  --train.batch_size 4 --train.micro_batches 4 --dist.pp 4
bad 2 "pp_split.*(sum|blocks)" "${llama[@]}" --dist.pp 2 --dist.pp_split 1,2
bad 2 "pp_split.*(empty|0)" "${llama[@]}" --dist.pp 2 --dist.pp_split 0,4
bad 1 "dist.pp_split: needs pipeline parallelism" "${llama[@]}" --dist.pp_split 2,2
bad 2 "multiple" --data.path "$TMP/gpl.h5" --model.preset llama-tiny --model.layers 4 --train.batch_size 6 --train.micro_batches 3 --dist.pp 2 --dist.pp_virtual 2
bad 2 "fewer blocks|blocks" "${llama[@]}" --dist.pp 2 --dist.pp_virtual 3
bad 2 "dist.zero 3" "${llama[@]}" --dist.pp 2 --dist.zero 3
bad 2 "cannot start from --model.init" "${llama[@]}" --dist.pp 2 --model.init "$(ckpt_of "$TMP/l-pp1")"
bad 2 "BatchNorm" --data.path "$(mnist_h5)" --model.preset cnn --dist.pp 2 --train.micro_batches 2
pass "bad input: too few micro-batches, an indivisible batch, pp not dividing the world, too few blocks, bad splits, interleaving over micro-batches that are no multiple of the stages or too few blocks, zero 3, --model.init, a BatchNorm model: exit 2 each"
