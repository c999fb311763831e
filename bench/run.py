#!/usr/bin/python3
"""make bench: how fast is hpctrain against what users run today (PyTorch
DDP) and against this machine's own limits (sgemm, memcpy, raw MPI)?

Everything is measured in this one run, on this machine:
  1. training throughput, hpctrain vs PyTorch DDP (gloo), same models, per-rank
     batch, optimizer (Adam) and data shapes, 1 and 2 ranks, one thread per
     rank; runs interleaved (A B A B …) and the median of the repetitions kept
  2. compute efficiency: the mlp training step against sgemm at its shapes
  3. communication: hpctrain's AllReduce against raw MPI_Allreduce and gloo
  4. data: loader throughput against memcpy
  5. weak scaling 1 -> 2 ranks and exposed communication time
and written to bench/results/latest.md with PNG plots. Nothing here fails on
a slow number: a missing piece is reported as such.

    bench/run.py [--quick] [--build build] [--out bench/results]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1")
SHAPES = {"simplenet": (1, 28, 28), "mlp": (1, 28, 28), "cnn": (1, 28, 28), "resnet20": (3, 32, 32)}


def run(cmd, timeout=900):
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-500:]}")
    return p.stdout


def mpirun(n, cmd, timeout=900):
    return run(["mpirun", "-np", str(n), "--bind-to", "core", "--oversubscribe"] + cmd, timeout)


def synth_file(path, shape, n):
    import h5py
    import numpy as np
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = f.create_dataset("train/x", data=rng.integers(0, 256, (n,) + shape, dtype=np.uint8))
        x.attrs["scale"], x.attrs["mean"], x.attrs["std"] = 1 / 255, 0.5, 0.25
        y = f.create_dataset("train/y", data=rng.integers(0, 10, n, dtype=np.int32))
        y.attrs["num_classes"] = 10


def hpctrain_sps(build, model, ranks, batch, warmup, steps, data, tmp):
    """samples/s over the timed steps: the last metrics record covers exactly them."""
    run_dir = tempfile.mkdtemp(dir=tmp)
    mpirun(ranks, [f"{build}/hpctrain", "--data.path", data, "--model.preset", model,
                   "--train.batch_size", str(batch), "--train.steps", str(warmup + steps),
                   "--log.every", str(warmup), "--log.progress", "none", "--optim.name", "adam",
                   "--run.dir", run_dir, "--dist.bucket_mb", "25"])
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    last = [r for r in rows if "samples_per_s" in r][-1]
    return last["samples_per_s"], last


def torch_sps(model, ranks, batch, warmup, steps):
    out = mpirun(ranks, [PY, os.path.join(ROOT, "bench", "torch_ddp.py"), "--model", model, "--batch", str(batch),
                         "--steps", str(steps), "--warmup", str(warmup)])
    return json.loads(out.strip().splitlines()[-1])["samples_per_s"]


def bench_training(build, models, reps, steps_for, tmp):
    results = {}
    for model in models:
        warmup, steps = steps_for(model)
        data = os.path.join(tmp, f"{model}.h5")
        synth_file(data, SHAPES[model], 64 * 2 * (warmup + steps + 1))
        for ranks in (1, 2):
            ours, theirs, extra = [], [], None
            for _ in range(reps):  # interleaved: machine drift hits both alike
                sps, extra = hpctrain_sps(build, model, ranks, 64, warmup, steps, data, tmp)
                ours.append(sps)
                theirs.append(torch_sps(model, ranks, 64, warmup, steps))
            results[(model, ranks)] = {"hpctrain": statistics.median(ours), "pytorch": statistics.median(theirs),
                                       "metrics": extra}
            r = results[(model, ranks)]
            print(f"  {model:10s} {ranks} rank(s): hpctrain {r['hpctrain']:9.1f}  pytorch {r['pytorch']:9.1f} "
                  f"samples/s  ratio {r['hpctrain'] / r['pytorch']:.2f}", flush=True)
    return results


def bench_binary(build, name, args=(), ranks=None):
    exe = os.path.join(build, "bench", name)
    if not os.path.exists(exe):
        return None
    try:
        return mpirun(ranks, [exe] + list(args)) if ranks else run([exe] + list(args))
    except Exception as e:  # report, never fail the whole bench
        return f"(failed: {e})"


def machine():
    cpu = "?"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def versions(build):
    try:
        v = run([f"{build}/hpctrain", "--version"])
    except Exception as e:
        v = str(e)
    try:
        import torch
        v += f"\nPyTorch {torch.__version__}"
    except ImportError:
        pass
    return v.strip()


def plots(out, training, allreduce_rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots (apt-get install python3-matplotlib)")
        return
    keys = sorted(training)
    labels = [f"{m}\n{r} rank(s)" for m, r in keys]
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(keys)), 4))
    xs = range(len(keys))
    ours = [training[k]["hpctrain"] for k in keys]
    theirs = [training[k]["pytorch"] for k in keys]
    ax.bar([x - 0.2 for x in xs], ours, 0.4, label="hpctrain")
    ax.bar([x + 0.2 for x in xs], theirs, 0.4, label="PyTorch DDP (gloo)")
    for x, a, b in zip(xs, ours, theirs):
        ax.text(x, max(a, b) * 1.02, f"{a / b:.2f}x", ha="center")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("samples/s (total)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("Training throughput, CPU, one thread per rank")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=110)

    fig, ax = plt.subplots(figsize=(6, 4))
    ones = {m: training[(m, 1)] for m, r in keys if r == 1 and (m, 2) in training}
    eff = [training[(m, 2)]["hpctrain"] / (2 * ones[m]["hpctrain"]) for m in ones]
    eff_t = [training[(m, 2)]["pytorch"] / (2 * ones[m]["pytorch"]) for m in ones]
    xs = range(len(ones))
    ax.bar([x - 0.2 for x in xs], eff, 0.4, label="hpctrain")
    ax.bar([x + 0.2 for x in xs], eff_t, 0.4, label="PyTorch DDP")
    ax.axhline(0.9, color="gray", ls="--", lw=1)
    ax.set_xticks(list(xs), list(ones))
    ax.set_ylabel("weak-scaling efficiency 1 -> 2 ranks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "scaling.png"), dpi=110)

    if allreduce_rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for series in sorted({r[0] for r in allreduce_rows}):
            pts = sorted((r[1], r[2]) for r in allreduce_rows if r[0] == series)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=series)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, "allreduce.png"), dpi=110)


def parse_allreduce(text, ranks):
    """Rows of an nccl-tests style table: (series, bytes, busbw) for every numeric row."""
    rows, series = [], None
    for line in (text or "").splitlines():
        m = re.match(r"#\s*series:\s*(\S+)", line)
        if m:
            series = f"{m.group(1)} ({ranks} ranks)"
            continue
        cols = line.split()
        if series and len(cols) >= 6 and cols[0].isdigit():
            try:
                rows.append((series, int(cols[0]), float(cols[-1])))
            except ValueError:
                pass
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition (< 2 minutes)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: only checks that everything runs (tests)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    started = time.time()
    tmp = tempfile.mkdtemp(prefix="hpctrain-bench-")

    if args.smoke:
        models, reps = ["mlp"], 1
        steps_for = lambda m: (2, 3)
        args.quick = True
    elif args.quick:
        models, reps = ["mlp", "cnn"], 1
        steps_for = lambda m: (5, 15)
    else:
        models, reps = ["simplenet", "mlp", "cnn", "resnet20"], 3
        steps_for = lambda m: {"simplenet": (20, 400), "mlp": (20, 200), "cnn": (10, 60), "resnet20": (3, 12)}[m]

    print("== training throughput (samples/s, median of interleaved runs)", flush=True)
    training = bench_training(args.build, models, reps, steps_for, tmp)

    print("== compute efficiency (mlp step vs sgemm)", flush=True)
    mlp_steps = "5" if args.smoke else "100" if args.quick else "400"
    mlp = bench_binary(args.build, "bench_mlp", [mlp_steps]) or "(bench_mlp not built)"
    print(mlp, flush=True)

    print("== communication", flush=True)
    allreduce_text, allreduce_rows = {}, []
    for n in (2, 4):
        t = bench_binary(args.build, "bench_allreduce", ["--quick"] if args.quick else [], ranks=n)
        allreduce_text[n] = t or "(bench_allreduce not built)"
        allreduce_rows += parse_allreduce(t, n)
        print(allreduce_text[n], flush=True)

    print("== data loader", flush=True)
    loader = bench_binary(args.build, "bench_loader", ["--quick"] if args.quick else []) or "(bench_loader not built)"
    print(loader, flush=True)

    lines = [f"# hpctrain benchmarks", "", f"- date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
             f"- machine: {machine()}", f"- mode: {'quick' if args.quick else 'full'}", "", "```", versions(args.build),
             "```", "", "## Training throughput (samples/s over all ranks; Adam, per-rank batch 64, 1 thread/rank)", "",
             "| model | ranks | hpctrain | PyTorch DDP | ratio | hpctrain comm_ms/step | compute_ms/step |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for (m, r), v in sorted(training.items()):
        met = v["metrics"] or {}
        lines.append(f"| {m} | {r} | {v['hpctrain']:.1f} | {v['pytorch']:.1f} | {v['hpctrain'] / v['pytorch']:.2f} | "
                     f"{met.get('comm_ms', 0):.2f} | {met.get('compute_ms', 0):.2f} |")
    lines += ["", "## Weak scaling 1 -> 2 ranks", "", "| model | hpctrain efficiency | PyTorch efficiency |",
              "| --- | --- | --- |"]
    for m in models:
        if (m, 1) in training and (m, 2) in training:
            e = training[(m, 2)]["hpctrain"] / (2 * training[(m, 1)]["hpctrain"])
            et = training[(m, 2)]["pytorch"] / (2 * training[(m, 1)]["pytorch"])
            lines.append(f"| {m} | {e:.2f} | {et:.2f} |")
    lines += ["", "## Compute efficiency", "", "```", mlp.strip(), "```", "", "## AllReduce", ""]
    for n, t in allreduce_text.items():
        lines += [f"{n} ranks:", "", "```", t.strip(), "```", ""]
    lines += ["## Data loader", "", "```", loader.strip(), "```", "",
              f"Total benchmark time: {time.time() - started:.0f} s", ""]
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write("\n".join(lines))
    plots(args.out, training, allreduce_rows)
    print(f"wrote {args.out}/latest.md and plots in {time.time() - started:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
