#!/usr/bin/env bash
# ctest-timeout: 300
# The benchmark and plotting scripts run end to end on tiny sizes (no timing is
# judged here: benchmarks never fail CI on a number).
source "$(dirname "$0")/lib.bash"
$PYTHON -c "import torch, matplotlib, h5py" 2>/dev/null || skip "PyTorch/matplotlib/h5py missing (scripts/install-deps.sh --bench)"
timeout -k 10 250 $PYTHON "$ROOT/bench/run.py" --smoke --build "$BUILD" --out "$TMP/results" > "$TMP/bench.log" 2>&1 \
  || { cat "$TMP/bench.log"; fail "bench/run.py --smoke failed"; }
grep -q "| mlp | 2 |" "$TMP/results/latest.md" || { cat "$TMP/results/latest.md"; fail "latest.md lacks the training table"; }
for png in throughput.png scaling.png; do [ -s "$TMP/results/$png" ] || fail "$png not written"; done
pass "bench/run.py --smoke wrote latest.md and plots"

data=$(mnist_h5)
"$BUILD/hpctrain" --data.path "$data" --model.preset simplenet --train.steps 30 --log.every 10 \
  --run.dir "$TMP/run" > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log"; fail "training for plot-metrics"; }
"$ROOT/data_tools/plot-metrics" "$TMP/run" > /dev/null || fail "plot-metrics failed"
[ -s "$TMP/run/metrics.png" ] || fail "plot-metrics wrote no PNG"
pass "plot-metrics"
expect_exit 2 "no metrics.jsonl" "$ROOT/data_tools/plot-metrics" "$TMP"
mkdir -p "$TMP/bad"
printf '{"step": 1, "loss": 0.5}\nnot json\n' > "$TMP/bad/metrics.jsonl"
expect_exit 2 "not a JSON object" "$ROOT/data_tools/plot-metrics" "$TMP/bad"
