#!/usr/bin/env bash
# ctest-timeout: 180
# `hpctrain doctor` on a healthy setup: under mpirun -np 2 on CPU the report
# has the right rank count, hosts, local ranks, devices (no GPU here), data
# and run-directory checks and an nccl-tests style preflight table whose
# numbers agree with each other, and it exits 0; --json carries the same
# facts; alone and with --local it works without a launcher.
source "$(dirname "$0")/lib.bash"
data=$(mnist_h5)
hp="$BUILD/hpctrain"
host=$(hostname)
export HPC_TEST_TIMEOUT=120  # run_mpi's limit
# No GPU on this machine means the report must say cpu; on a GPU machine it may say cuda.
gpu_here=0
[ -e /dev/nvidiactl ] && gpu_here=1

# ---- text report under mpirun -np 2 -------------------------------------------
rc=0
run_mpi 2 "$hp" doctor --data.path "$data" --run.dir "$TMP/run" --dist.bucket_mb 4 >"$TMP/out" 2>"$TMP/err" || rc=$?
[ $rc -eq 0 ] || { cat "$TMP/out" "$TMP/err"; fail "doctor on a healthy 2-rank job exited $rc"; }
out="$TMP/out"
grep -q "^hpctrain doctor: 2 ranks on 1 node, launched by mpirun" "$out" || { cat "$out"; fail "header line"; }
for r in 0 1; do
  grep -Eq "^ +$r  $host +[0-9]+ +$r/2 +0 +[0-9]+ +(cpu|cuda)" "$out" || { cat "$out"; fail "rank $r line (host $host, local $r/2)"; }
done
if [ $gpu_here -eq 0 ]; then
  [ "$(grep -c 'cpu (no GPU visible\|cpu (hpctrain built without CUDA' "$out")" -eq 2 ] || { cat "$out"; fail "device column should be cpu on both ranks"; }
fi
grep -Eq "^  node 0 +$host +2 rank\(s\): 0,1 " "$out" || { cat "$out"; fail "node line: 2 ranks on $host"; }
grep -Eq "^  MPI +.*(Open MPI|MPICH)" "$out" || fail "MPI version row"
grep -Eq "^  HDF5 +[0-9]+\.[0-9]+\.[0-9]+ +[0-9]+\.[0-9]+\.[0-9]+" "$out" || fail "HDF5 build/runtime row"
grep -q "mnist.h5 (.*): opens and validates" "$out" || fail "data line"
grep -Eq "^  /train +8000 samples of 1x28x28 uint8, 10 classes, memory-mapped" "$out" || { cat "$out"; fail "/train split line"; }
grep -q "$TMP/run (will be created in $TMP): writable" "$out" || fail "run directory line"
[ ! -e "$TMP/run" ] || fail "the doctor created the run directory"
grep -q "^preflight: AllReduce float32 sum over 2 ranks (mpi, host buffers), bucket 4.0 MiB" "$out" || fail "preflight title"
grep -Eq "^ +size +count +type +redop +time\(us\) +algbw\(GB/s\) +busbw\(GB/s\) +#wrong" "$out" || fail "preflight header"
# bucket 4 MiB: sizes bucket/16, /4, 1x, 2x
rows=$(grep -Ec "^ +[0-9]+ +[0-9]+ +float +sum +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$" "$out")
[ "$rows" -eq 4 ] || { cat "$out"; fail "expected 4 preflight rows with 0 wrong, got $rows"; }
for size in 262144 1048576 4194304 8388608; do
  grep -Eq "^ +$size +$((size / 4)) +float" "$out" || fail "no preflight row for $size bytes"
done
grep -q "ring exchange, 4.0 MiB from each neighbour" "$out" || fail "ring exchange line"
grep -q "^doctor: ready: no problems found" "$out" || fail "summary line"
grep -q "^problem:" "$out" && fail "problems reported on a healthy job"
pass "text report under mpirun -np 2"

# ---- the same as JSON ------------------------------------------------------------
run_mpi 2 "$hp" doctor --json --data.path "$data" --run.dir "$TMP/run" --dist.bucket_mb 4 >"$TMP/json" 2>"$TMP/err" \
  || { cat "$TMP/err"; fail "doctor --json exited non-zero"; }
$PYTHON - "$TMP/json" "$host" "$gpu_here" "$TMP" <<'EOF' || fail "JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
host, gpu_here, tmp = sys.argv[2], sys.argv[3] == "1", sys.argv[4]
def check(cond, what):
    if not cond:
        sys.exit(f"JSON: {what}")
check(r["ok"] is True and r["problems"] == [], "ok with no problems")
check(r["launch"]["launcher"] == "mpirun" and r["launch"]["world"] == 2 and r["launch"]["nodes"] == 1, "launch")
check(r["launch"]["consistent"] is True, "launch consistent")
ranks = r["ranks"]
check([x["rank"] for x in ranks] == [0, 1], "two ranks in order")
check(all(x["host"] == host for x in ranks), "host names")
check([x["local_rank"] for x in ranks] == [0, 1] and all(x["local_size"] == 2 for x in ranks), "local ranks")
check(len({x["pid"] for x in ranks}) == 2, "distinct pids")
if not gpu_here:
    check(all(x["device"] == "cpu" and x["gpu"] is None and x["gpus_visible"] == 0 for x in ranks), "no GPU")
check(r["nodes"] == [{"node": 0, "host": host, "ranks": [0, 1], "infiniband": r["nodes"][0]["infiniband"],
                      "interfaces": r["nodes"][0]["interfaces"]}], "one node holding both ranks")
check("lo" in r["nodes"][0]["interfaces"], "interfaces listed")
check(r["versions"]["hdf5"]["build"] and r["versions"]["mpi"]["runtime"], "versions")
d = r["data"]
check(d["path"].endswith("mnist.h5") and len(d["checks"]) == 1, "data checked once (one node)")
c = d["checks"][0]
check(c["opens"] and [s["split"] for s in c["splits"]] == ["train", "val"], "data splits")
check(all(s["mmap"] for s in c["splits"]) and c["splits"][0]["samples"] == 8000, "mmap and sample count")
rd = r["run_dir"]
check(rd["writable"] and not rd["exists"] and rd["probed"] == tmp and rd["free_bytes"] > 0, "run dir")
p = r["preflight"]
check(p["ran"] and p["ranks"] == 2 and p["bucket_bytes"] == 4 << 20, "preflight")
host_sweep = p["sweeps"][0]
check(host_sweep["communicator"] == "mpi" and host_sweep["buffers"] == "host", "first sweep: MPI over host buffers")
if not gpu_here:
    check(len(p["sweeps"]) == 1 and p["gpu_skipped"] == "", "no NCCL sweep without GPUs")
check([s["bytes"] for s in host_sweep["rows"]] == [262144, 1048576, 4194304, 8388608], "sweep sizes")
for s in host_sweep["rows"]:
    check(s["wrong"] == 0 and s["count"] * 4 == s["bytes"], "sweep counts")
    check(abs(s["algbw_gbps"] - s["bytes"] / (s["time_us"] * 1e3)) <= 1e-4 * s["algbw_gbps"] + 1e-6, "algbw = bytes/time")
    check(abs(s["busbw_gbps"] - s["algbw_gbps"]) <= 1e-5 * s["algbw_gbps"], "busbw = algbw * 2(n-1)/n = algbw for n = 2")
check(len(host_sweep["rank_us"]) == 2 and len(p["links"]) == 4 and p["slowest"] is None, "per-rank timing")
check({(l["src"], l["dst"]) for l in p["links"]} == {(0, 1), (1, 0)}, "ring links of 2 ranks")
EOF
pass "JSON report under mpirun -np 2"

# ---- alone, --local, switches ------------------------------------------------------
"$hp" doctor --data.path "$data" --run.dir "$TMP/run" >"$TMP/alone" 2>"$TMP/err" || { cat "$TMP/alone" "$TMP/err"; fail "doctor alone"; }
grep -q "^hpctrain doctor: 1 rank on 1 node, no launcher" "$TMP/alone" || fail "alone: header"
grep -q "^preflight: skipped (1 rank" "$TMP/alone" || fail "alone: preflight skipped"
pass "alone, no launcher"

"$hp" doctor --local --json >"$TMP/local" 2>"$TMP/err" || { cat "$TMP/local" "$TMP/err"; fail "doctor --local --json"; }
$PYTHON -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["launch"]["local"] and not r["preflight"]["ran"] and r["data"] is None, r' "$TMP/local" \
  || fail "--local --json content"
"$hp" doctor --json false --local true >"$TMP/text" || fail "--json false"
grep -q "^hpctrain doctor: 1 rank on 1 node, no launcher (--local" "$TMP/text" || fail "--json false prints text"
pass "--local, bare and valued switches"
expect_exit 2 "option --json: only for 'hpctrain doctor'" "$hp" --json true --data.path "$data"
