#!/usr/bin/python3
"""Weak scaling of hpctrain from 1 to 2 ranks, one core each, with and without
overlap of the gradient AllReduce with backward.

Per-rank batch fixed (weak scaling); OPENBLAS_NUM_THREADS=1 and --bind-to core,
so 2 ranks use 2 cores. For every model the runs are interleaved (1 rank,
2 ranks with overlap, 2 ranks without, repeated) and the median kept.
From metrics.jsonl (the first, warm-up window dropped; the median window):
  efficiency   = samples/s on 2 ranks / (2 × samples/s on 1 rank)
  exposed comm = comm_ms / (data_ms + compute_ms + comm_ms) on rank 0: the
                 time the optimizer waited for gradients after backward
Targets: efficiency >= 90 %, exposed comm <= 10 % of the step.

A control row, "2 × 1 independent": two single-rank runs at the same time,
one per core, no communication at all. What it loses against 2 × one rank
alone is the machine's own contention (memory bandwidth, shared caches,
other tenants), the ceiling any communication scheme could reach here;
"of ceiling" is the 2-rank throughput against it.

    bench/scaling.py [--models mlp,cnn] [--reps 3] [--steps 120] [--bucket-mb MB] [--build build]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           OMP_NUM_THREADS="1")


def train_args(build, data, model, steps, window, overlap, bucket_mb, run_dir):
    cmd = [f"{build}/hpctrain", "--data.path", data, "--model.preset", model, "--train.batch_size", "64",
           "--train.steps", str(steps), "--log.every", str(window), "--log.progress", "none",
           "--dist.overlap", "true" if overlap else "false", "--run.dir", run_dir, "--ckpt.keep", "1"]
    return cmd + (["--dist.bucket_mb", str(bucket_mb)] if bucket_mb else [])


def summary(run_dir):
    # The median window, not the mean: on a shared machine one disturbed window should not decide.
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl")) if '"samples_per_s"' in l][1:]
    med = lambda k: statistics.median(r[k] for r in rows)
    step = med("data_ms") + med("compute_ms") + med("comm_ms")
    return {"sps": med("samples_per_s"), "step_ms": step, "comm_ms": med("comm_ms"), "exposed": med("comm_ms") / step}


def run(build, data, model, ranks, overlap, steps, window, bucket_mb, tmp):
    """One job of `ranks` ranks; ranks = 0: the control, two independent 1-rank jobs at once."""
    if ranks == 0:
        dirs = [tempfile.mkdtemp(dir=tmp) for _ in range(2)]
        procs = [subprocess.Popen(["taskset", "-c", str(i % os.cpu_count())] +
                                  train_args(build, data, model, steps, window, overlap, bucket_mb, d),
                                  env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for i, d in enumerate(dirs)]
        for p in procs:
            if p.wait(timeout=1800) != 0:
                sys.exit(f"independent run exited {p.returncode}: {p.stderr.read()[-2000:]}")
        a, b = summary(dirs[0]), summary(dirs[1])
        return {"sps": a["sps"] + b["sps"], "step_ms": (a["step_ms"] + b["step_ms"]) / 2, "comm_ms": 0.0,
                "exposed": 0.0}
    run_dir = tempfile.mkdtemp(dir=tmp)
    bind = "core" if ranks <= os.cpu_count() else "none"
    cmd = ["mpirun", "-np", str(ranks), "--bind-to", bind, "--oversubscribe"] + \
        train_args(build, data, model, steps, window, overlap, bucket_mb, run_dir)
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
    return summary(run_dir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--bucket-mb", type=float, default=0, help="dist.bucket_mb (default: hpctrain's)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    window = max(1, args.steps // 6)
    tmp = tempfile.mkdtemp(prefix="hpctrain-scaling-")
    data = os.path.join(tmp, "synth.h5")
    subprocess.run([f"{args.build}/hpcdata", "synth", "-o", data, "--samples", "32768", "--val", "0",
                    "--shape", "1x28x28", "--classes", "10"], check=True, capture_output=True)
    print(f"# weak scaling 1 -> 2 ranks, batch 64 per rank, 1 core and 1 BLAS thread per rank, "
          f"{args.steps} steps (first {window} dropped), median of {args.reps}, "
          f"dist.bucket_mb {args.bucket_mb or 'default'}")
    print(f"# {'model':6s} {'ranks':>22s} {'overlap':>7s} | {'samples/s':>10s} {'step_ms':>8s} "
          f"{'comm_ms':>8s} {'exposed':>8s} | {'efficiency':>10s} {'of ceiling':>10s}")
    for model in args.models.split(","):
        configs = [(1, True), (0, True), (2, True), (2, False)]
        results = {c: [] for c in configs}
        for _ in range(args.reps):  # interleaved: drift hits every configuration alike
            for ranks, overlap in configs:
                results[(ranks, overlap)].append(run(args.build, data, model, ranks, overlap, args.steps, window,
                                                     args.bucket_mb, tmp))
        med = {c: {k: statistics.median(r[k] for r in results[c]) for k in results[c][0]} for c in configs}
        base, ceiling = med[(1, True)]["sps"], med[(0, True)]["sps"]
        for ranks, overlap in configs:
            m = med[(ranks, overlap)]
            label = "2 × 1 independent" if ranks == 0 else str(ranks)
            eff = m["sps"] / ((1 if ranks == 1 else 2) * base)
            of_ceiling = f"{100 * m['sps'] / ceiling:9.1f}%" if ranks == 2 else ""
            print(f"  {model:6s} {label:>22s} {'on' if overlap else 'off':>7s} | {m['sps']:10.1f} "
                  f"{m['step_ms']:8.2f} {m['comm_ms']:8.2f} {100 * m['exposed']:7.1f}% | {100 * eff:9.1f}% "
                  f"{of_ceiling:>10s}", flush=True)


if __name__ == "__main__":
    main()
