#!/usr/bin/env bash
# ctest-timeout: 180
# The timeline (log.trace, log.trace_steps; train/trace.h): 2 ranks, an mlp
# with small gradient buckets, 8 steps of which 3..5 are traced, a
# checkpoint at step 4 and an evaluation epoch inside the window:
#   - the file is one JSON object whose trace events all have the fields
#     Chrome's trace-event format requires for their phase (X: name, cat, ph,
#     ts, dur, pid, tid, args; M: name, ph, pid, args), numbers where numbers
#     belong — a JSON-schema check in Python;
#   - both ranks are present (process names "rank R (host)");
#   - every recorded step is within 3..5, and each of them has, on every
#     rank, a forward and a backward event per layer, a data wait, a
#     host-to-device copy, the optimizer, the step, and one allreduce per
#     gradient bucket (the number the start-up line prints) on the
#     collectives thread;
#   - the checkpoint's snapshot and write are there (rank 0);
#   - a bad A:B is one line, exit 2.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
trace=$TMP/trace.json
run_mpi 2 "$hp" --data.path "$data" --model.preset mlp --train.batch_size 16 --train.steps 8 \
  --dist.bucket_mb 0.01 --ckpt.every_steps 4 --log.every 1 --log.progress plain --run.dir "$TMP/run" \
  --log.trace "$trace" --log.trace_steps 3:5 >"$TMP/out" 2>&1 || { cat "$TMP/out"; fail "the traced run"; }
grep -q "^trace: $trace (steps 3:5, 2 rank(s);" "$TMP/out" || { cat "$TMP/out"; fail "no trace line"; }
buckets=$(grep -oP "^gradient all-reduce: \K[0-9]+(?= bucket)" "$TMP/out")
layers=$(grep -cE "^  [0-9]+ +[a-z]" "$TMP/out" || true)
"$PYTHON" - "$trace" "$buckets" <<'PY' || fail "the trace does not hold what it should"
import json, sys, collections
doc = json.load(open(sys.argv[1]))
buckets = int(sys.argv[2])
assert set(doc) >= {"traceEvents"}, doc.keys()
events = doc["traceEvents"]
num = (int, float)
schema = {"X": {"name": str, "cat": str, "ph": str, "ts": num, "dur": num, "pid": int, "tid": int, "args": dict},
          "M": {"name": str, "ph": str, "pid": int, "args": dict}}
for e in events:
    assert e.get("ph") in schema, e
    for k, t in schema[e["ph"]].items():
        assert k in e and isinstance(e[k], t), (k, e)
    if e["ph"] == "X":
        assert e["dur"] >= 0 and e["ts"] >= 0, e
procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(procs) == [0, 1] and all(procs[r].startswith(f"rank {r} (") for r in procs), procs
spans = [e for e in events if e["ph"] == "X"]
steps = {e["args"]["step"] for e in spans}
assert steps == {3, 4, 5}, steps
by = collections.defaultdict(list)
for e in spans:
    by[(e["pid"], e["args"]["step"])].append(e)
for (pid, step), es in sorted(by.items()):
    names = [e["name"] for e in es]
    fw = [n for n in names if n.startswith("forward ")]
    bw = [n for n in names if n.startswith("backward ")]
    assert fw and sorted(n.split()[1] for n in fw) == sorted(n.split()[1] for n in bw), (pid, step, names)
    for need in ("data wait", "host to device", "optimizer", f"step {step}", "gradient wait", "loss"):
        assert need in names, (need, pid, step)
    comm = [e for e in es if e["cat"] == "comm" and e["tid"] == 1]
    big = [e for e in comm if e["name"].startswith("allreduce") and "float32" in e["name"]]
    assert len(big) == buckets, (pid, step, len(big), buckets, [e["name"] for e in comm])
    print(f"rank {pid} step {step}: {len(fw)} forward, {len(bw)} backward layer events, "
          f"{len(big)} bucket allreduces, {len(comm)} collectives")
ck = [e["name"] for e in spans if e["cat"] == "checkpoint" and e["pid"] == 0]
assert any(n.startswith("checkpoint snapshot, step 4") for n in ck), ck
assert any(n.startswith("checkpoint write, step 4") for n in ck), ck
PY
pass "trace: valid trace events from both ranks, steps 3..5 only, per-layer forward/backward, $buckets bucket allreduce(s) per step, checkpoint snapshot and write"
expect_exit 2 "log.trace_steps '5:3'" "$hp" --data.path "$data" --model.preset mlp --train.steps 2 \
  --run.dir "$TMP/bad" --log.trace "$TMP/bad.json" --log.trace_steps 5:3
