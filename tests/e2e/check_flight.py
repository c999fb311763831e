"""Checks one flight record (dist/flight_recorder.h) against its schema.

    check_flight.py FILE RANK [REASON] [LEAST]

FILE is RUN_DIR/flight-RANK.json; REASON, when given and not empty, must be
the record's reason; the record must hold at least LEAST (default 0) and at
most 256 collectives, each group's in its order, each with every field. Prints one
summary line; exits non-zero (an AssertionError) when the record is wrong.
"""
import json
import sys

path, rank = sys.argv[1], int(sys.argv[2])
reason = sys.argv[3] if len(sys.argv) > 3 else ""
least = int(sys.argv[4]) if len(sys.argv) > 4 else 0
d = json.load(open(path))
assert d["format"] == "hpctrain-flight-1" and d["rank"] == rank, (d.get("format"), d.get("rank"))
assert not reason or d["reason"] == reason, d["reason"]
assert isinstance(d["host"], str) and d["host"] and isinstance(d["pid"], int) and isinstance(d["reason"], str)
assert d["dumped_unix"] > 1.6e9, d["dumped_unix"]
e = d["entries"]
assert least <= len(e) <= 256 and d["recorded"] >= len(e), (len(e), d["recorded"])
# Collectives are numbered per group (dist/group.h), messages per group, peer and direction.
keys = [(x["group"], x["op"] in ("send", "recv") and (x["op"], x["peer"])) for x in e]
for k in set(keys):
    seqs = [x["seq"] for x, kx in zip(e, keys) if kx == k]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"entries of {k} not in order"
fields = {"seq", "group", "op", "count", "dtype", "comm", "step", "enqueue_s", "start_s", "end_s", "state"}
for x in e:
    assert set(x) == fields | ({"peer"} if x["op"] in ("send", "recv") else set()), x
    assert x["op"] in ("allreduce", "broadcast", "allgather", "barrier", "gather", "send", "recv"), x
    assert x["comm"] == "mpi" and isinstance(x["group"], str) and x["group"], x
    assert x["state"] in ("started", "completed") and x["count"] >= 0
    assert x["end_s"] == 0 if x["state"] == "started" else x["end_s"] >= x["start_s"] >= x["enqueue_s"] > 0
newest = f", newest #{e[-1]['seq']} of {e[-1]['group']} {e[-1]['state']}" if e else ""
print(f"{path}: rank {rank}, {len(e)} collectives{newest}, reason: {d['reason']}")
