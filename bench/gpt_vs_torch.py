#!/usr/bin/python3
"""hpctrain's bench_gpt against PyTorch's bench/torch_gpt.py, interleaved.

Runs the two alternately (A B A B ...) REPS times on the same ranks, one BLAS
thread per rank, and prints the medians: tokens/s of each, the ratio (median
of the per-pair ratios, so a burst of other load hits both sides of a pair),
and each one's model FLOPs utilisation against the sgemm peak it measured in
its own run (OpenBLAS for both; torch.mm for PyTorch). The FLOPs per token
are the same count for both (Model::forward_flops; torch_gpt.flops_per_token).

    bench/gpt_vs_torch.py [--build build] [--ranks 1] [--reps 3] [--steps 20] [--batch 8] [--preset gpt-small]
                          [--blas-core NAME]
Both sides run one OpenBLAS core, the best for this CPU (bench/blas_env.py).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

import blas_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--preset", default="gpt-small")
    ap.add_argument("--blas-core", help="the OpenBLAS core for both sides (default: hpctrain's fitted one)")
    args = ap.parse_args()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    env, note = blas_env.comparison_env(args.build, env, args.blas_core)
    print(note, flush=True)
    mpi = ["mpirun", "-np", str(args.ranks), "--oversubscribe"]
    ours_cmd = mpi + [os.path.join(args.build, "bench", "bench_gpt"), str(args.steps), str(args.batch), args.preset]
    torch_cmd = mpi + ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_gpt.py"), "--preset", args.preset,
                       "--batch", str(args.batch), "--steps", str(args.steps)]
    ours, theirs = [], []
    for r in range(args.reps):
        ours.append(run_json(ours_cmd, env))
        theirs.append(run_json(torch_cmd, env))
        print(f"rep {r + 1}: hpctrain {ours[-1]['tokens_per_s']:.0f} tokens/s (MFU {ours[-1]['mfu']:.1%}), "
              f"PyTorch {theirs[-1]['tokens_per_s']:.0f} tokens/s (MFU {theirs[-1]['mfu']:.1%})", flush=True)
    med = lambda rows, key: statistics.median(r[key] for r in rows)
    ratio = statistics.median(a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(ours, theirs))
    print(f"# {args.preset}, batch {args.batch}, {args.ranks} rank(s) x 1 thread, medians of {args.reps} "
          f"interleaved runs")
    print(f"{'impl':<10} {'tokens/s':>10} {'MFU':>7} {'sgemm GFLOP/s':>14}")
    for name, rows in (("hpctrain", ours), ("pytorch", theirs)):
        print(f"{name:<10} {med(rows, 'tokens_per_s'):>10.0f} {med(rows, 'mfu'):>7.1%} {med(rows, 'sgemm_gflops'):>14.1f}")
    print(f"ratio hpctrain/pytorch {ratio:.2f}  (target >= 1.5; bounded by 1 / PyTorch's MFU)")


if __name__ == "__main__":
    main()
